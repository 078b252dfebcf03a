"""The product: juniors map where the fix lives, the senior writes a brief, the principal writes the patch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import SwepipeError
from pipeline.job import TaskJob
from pipeline.juniors.stage import junior_stage
from pipeline.pool_rules import CandidatePool
from pipeline.principal.skip import SubmitTopCandidate, skip_decision
from pipeline.records import Brief, PrincipalResult, Rollout
from pipeline.records.base import expect_record
from pipeline.records.brief import SkipDecision
from pipeline.senior.skipped import SkippedBrief
from pipeline.settings.config import RunConfig
from pipeline.settings.model_spec import Role
from pipeline.strategies.answer import Spend, TaskAnswer
from pipeline.strategies.base import BaseStrategy, PrincipalStage, SeniorStage, stage_class


class PipelineStrategy(BaseStrategy):
    name = "pipeline"
    roles = (Role.JUNIOR, Role.SENIOR, Role.PRINCIPAL)

    def __init__(self, config: RunConfig):
        super().__init__(config)
        self.senior = _senior_class(config)(config)
        self.principal = _principal_class(config)(config)

    @staticmethod
    def needed_roles(config: RunConfig) -> tuple[str, ...]:
        """The roles that call a model: juniors unless k is 0, and the roles of the senior and principal stages
        unless switched off (model ``none``; a plug-in stage with ``role = None`` calls no model either).
        Ablations that cannot give a patch are refused here, before anything is spent."""
        if (config.juniors.k == 0 and not config.juniors.imported and not config.plays(Role.PRINCIPAL)
                and not config.principal.impl):
            raise SwepipeError("juniors.k is 0, no candidates are imported and the principal model is none: no junior "
                               "proposes a patch and no principal writes one; keep juniors (-k N), import candidates "
                               "(--juniors-from) or a principal model")
        junior = ("junior",) if config.juniors.k > 0 else ()
        stages = (_senior_class(config), _principal_class(config))
        roles = (getattr(stage, "role", None) for stage in stages)
        return (*junior, *(role for role in roles if role and config.plays(role)))

    def run_task(self, job: TaskJob) -> TaskAnswer:
        rollouts, pool = junior_stage(job)  # no rollouts when k is 0: the senior explores alone
        job.finished_stage("junior", f"{len(rollouts)} rollouts, {len(pool.candidates)} distinct candidate(s), "
                                     f"${sum(r.cost or 0.0 for r in rollouts):.4f}" if rollouts else
                           "no juniors (k=0)")
        senior, principal, skip = self.stages(job, pool, rollouts)
        job.stage = "senior"
        brief = expect_record(senior.brief(job, pool), Brief)
        job.finished_stage("senior", f"skipped: {skip.reason}" if skip and skip.skip else
                           f"brief from the {brief.source or '?'}, {len(brief.spans or [])} span(s)")
        job.stage = "principal"
        result = expect_record(principal.write(job, pool, brief), PrincipalResult)
        job.finished_stage("principal", f"patch from {result.source}")
        reused_from, carried = reused_juniors(rollouts)
        answer = with_imported(TaskAnswer(model_patch=result.patch, source=result.source, error=result.error,
                                          juniors_reused_from=reused_from,
                                          carried_spend={"junior": carried} if carried else {}), rollouts)
        if skip is not None:
            answer.skip_check = skip
        return answer

    def stages(self, job: TaskJob, pool: CandidatePool, rollouts: list[Rollout]) -> tuple[
            SeniorStage | SkippedBrief, PrincipalStage | SubmitTopCandidate, SkipDecision | None]:
        """The senior and principal stages for this task, and the skip rule's decision (None when it is off):
        the configured stages, or with principal.skip_when holding two that call no model and submit the top
        candidate (pipeline.principal.skip)."""
        decision = skip_decision(job, pool, rollouts)
        if decision is not None and decision.skip:
            return SkippedBrief(self.config, decision), SubmitTopCandidate(self.config, decision), decision
        return self.senior, self.principal, decision


def _senior_class(config: RunConfig) -> type[SeniorStage]:
    return stage_class(config.senior.impl, "pipeline.senior.stage:Senior", "senior.impl")


def _principal_class(config: RunConfig) -> type[PrincipalStage]:
    """The principal stage: the config's plug-in, else the frontier call, or with the principal model ``none``
    the senior-informed top candidate (pipeline.principal.choice, no call)."""
    default = ("pipeline.principal.stage:Principal" if config.plays(Role.PRINCIPAL)
               else "pipeline.principal.choice:SubmitSeniorCandidate")
    stage = stage_class(config.principal.impl, default, "principal.impl")
    if config.principal.impl and not config.plays(Role.PRINCIPAL) and getattr(stage, "role", None) == Role.PRINCIPAL:
        raise SwepipeError(f"principal.impl {config.principal.impl} calls the principal model, which is none; "
                           "give a principal model, or a principal stage that calls none (role = None)")
    return stage


def reused_juniors(rollouts: list[Rollout]) -> tuple[str | None, Spend | None]:
    """Which run the reused rollouts came from, and what they cost there (not in this task's ledger); (None, None)
    when none were reused."""
    reused = [r for r in rollouts if r.reused_from]
    if not reused:
        return None, None
    spent = Spend(cost=sum(r.cost or 0.0 for r in reused), input=sum(r.input_tokens or 0 for r in reused),
                  output=sum(r.output_tokens or 0 for r in reused))
    return Path(reused[0].reused_from).parents[2].name, spent


@dataclass(frozen=True)
class ImportedJuniors:
    """Candidates taken in from elsewhere (--juniors-from): their sources, and what the sources recorded they cost
    (None when no source recorded a cost)."""

    sources: list[str]
    cost: float | None

    def onto(self, answer: TaskAnswer) -> TaskAnswer:
        """``answer`` naming them (imported_from, imported_cost)."""
        answer.imported_from, answer.imported_cost = self.sources, self.cost
        return answer


def imported_juniors(rollouts: list[Rollout]) -> ImportedJuniors | None:
    """What of ``rollouts`` was taken in from elsewhere; None when nothing was."""
    imported = [r for r in rollouts if r.imported_from]
    if not imported:
        return None
    costs = [r.imported_cost for r in imported if isinstance(r.imported_cost, (int, float))]
    return ImportedJuniors([Path(r.imported_from).name for r in imported], round(sum(costs), 8) if costs else None)


def with_imported(answer: TaskAnswer, rollouts: list[Rollout]) -> TaskAnswer:
    """``answer``, naming the candidates of ``rollouts`` taken in from elsewhere when there are any."""
    imported = imported_juniors(rollouts)
    return answer if imported is None else imported.onto(answer)
