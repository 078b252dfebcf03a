"""``principal.skip_when``: when the juniors agree strongly, the top candidate is submitted without the senior and
principal calls.

The rule is judged on the task's pool as ``juniors.schedule`` judges it (``pipeline.pool_rules.agreement``):
the pool's top candidate (most votes; ties: the earliest rollout) holds at least ``top_share`` of the submitted
rollouts' votes, with at least ``min_submitted`` rollouts submitted. Failed rollouts and test-only patches are no
votes for any candidate, so they never make agreement.

When it holds, the pipeline runs two stages that call no model (``role = None``, like the principal-off ablation)
in place of the senior and the principal: ``SkippedSenior`` records senior/brief.json with source ``skipped``,
``SkipPrincipal`` records principal/result.json and patch.diff with the top candidate and source
``skip:junior_top``. Nothing is called or paid. The decision is on disk: a rerun of a skipped task skips again,
whatever the rule says now.
"""

from __future__ import annotations

from pathlib import Path

from pipeline import patchtext
from pipeline.config import RunConfig
from pipeline.job import TaskJob, once
from pipeline.pool_rules import CandidatePool, agreement, agrees
from pipeline.records import Brief, PrincipalResult, Rollout, Unreadable
from pipeline.records.brief import SkipDecision

SKIP_SOURCE = "skip:junior_top"  # the prediction's source when the senior and principal were skipped
SKIPPED_BRIEF = "skipped"  # the brief's source then


def skip_decision(job: TaskJob, pool: CandidatePool, rollouts: list[Rollout]) -> SkipDecision | None:
    """The skip rule's decision on the task's pool (``skip``: whether the senior and principal are skipped, and
    why), or None when ``principal.skip_when`` is off. A decision an earlier session recorded wins."""
    recorded = _recorded(job.paths.senior_files.brief, job.paths.principal_files.result)
    if recorded is not None:
        return recorded
    rule = job.config.principal.skip_when
    if rule.top_share is None:
        return None
    measure = agreement(pool, [rollout.to_dict() for rollout in rollouts])
    holds, reason = agrees(measure, rule.top_share, rule.min_submitted)
    return SkipDecision.model_validate({"skip": holds, "top_share_needed": rule.top_share,
                                        "min_submitted": rule.min_submitted,
                                        **measure, "reason": reason})


def _recorded(brief: Path, result: Path) -> SkipDecision | None:
    for path, kind in ((result, PrincipalResult), (brief, Brief)):
        record = kind.read(path)
        if not isinstance(record, Unreadable) and record.source in (SKIP_SOURCE, SKIPPED_BRIEF) \
                and record.skipped is not None:
            return record.skipped
    return None


class SkippedSenior:
    """The senior stage when the skip rule holds: no model, no workspace; brief.json says why."""

    role = None

    def __init__(self, config: RunConfig, decision: SkipDecision):
        self.config, self.decision = config, decision

    def brief(self, job: TaskJob, pool: CandidatePool) -> Brief:
        def make() -> Brief:
            job.paths.senior.mkdir(parents=True, exist_ok=True)
            return Brief.of({
                "source": SKIPPED_BRIEF, "analysis": f"(Skipped by principal.skip_when: {self.decision.reason}.)",
                "spans": [], "candidate": 1, "problems": [], "context_spans": None, "context_tokens": 0,
                "senior_error": None, "senior_exit": "skipped", "senior_cost": 0.0, "senior_steps": 0,
                "skipped": self.decision.to_dict()})

        return once(job.paths.senior_files.brief, make, Brief).model_copy(update={"context": ""})


class SkipPrincipal:
    """The principal stage when the skip rule holds: the pool's top candidate, no model, no workspace."""

    role = None

    def __init__(self, config: RunConfig, decision: SkipDecision):
        self.config, self.decision = config, decision

    def write(self, job: TaskJob, pool: CandidatePool, brief: Brief) -> PrincipalResult:
        def make() -> PrincipalResult:
            top = pool.candidates[0] if pool.candidates else None
            patch = top.patch if top else ""
            job.paths.principal.mkdir(parents=True, exist_ok=True)
            patchtext.write(job.paths.principal_files.patch, patch)
            return PrincipalResult.of({
                "source": SKIP_SOURCE if top else "none", "error": None if top else "no candidate",
                "candidate": 1 if top else None, "calls": 0, "cost": 0.0, "failed_attempts": [],
                "patch_lines": patch.count("\n"), "skipped": self.decision.to_dict(), "patch": patch})

        return once(job.paths.principal_files.result, make, PrincipalResult)
