"""``principal.skip_when``: when the juniors agree strongly, the top candidate is submitted without the senior and
principal calls.

The rule is judged on the task's pool as ``juniors.schedule`` judges it (``pipeline.pool_rules.agreement``):
the pool's top candidate (most votes; ties: the earliest rollout) holds at least ``top_share`` of the submitted
rollouts' votes, with at least ``min_submitted`` rollouts submitted. Failed rollouts and test-only patches are no
votes for any candidate, so they never make agreement.

When it holds, the pipeline runs two stages that call no model (``role = None``, like the principal-off ablation)
in place of the senior and the principal: ``SkippedBrief`` (pipeline.senior.skipped) records senior/brief.json with
source ``skipped``, ``SubmitTopCandidate`` records principal/result.json and patch.diff with the top candidate and
source ``skip:junior_top``. Nothing is called or paid. The decision is on disk: a rerun of a skipped task skips again,
whatever the rule says now.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from pipeline.job import TaskJob, once
from pipeline.pool_rules import CandidatePool, agreement, agrees
from pipeline.records import Brief, PrincipalResult, Rollout, Unreadable
from pipeline.records.brief import SkipDecision
from pipeline.records.sources import BriefSource, PatchSource
from pipeline.settings.config import RunConfig
from pipeline.text import patchtext


def skip_decision(job: TaskJob, pool: CandidatePool, rollouts: list[Rollout]) -> SkipDecision | None:
    """The skip rule's decision on the task's pool (``skip``: whether the senior and principal are skipped, and
    why), or None when ``principal.skip_when`` is off. A decision an earlier session recorded wins."""
    recorded = _recorded(job.paths.senior_files.brief, job.paths.principal_files.result)
    if recorded is not None:
        return recorded
    rule = job.config.principal.skip_when
    if rule.top_share is None:
        return None
    measure = agreement(pool, rollouts)
    holds, reason = agrees(measure, rule.top_share, rule.min_submitted)
    return SkipDecision.model_validate({"skip": holds, "top_share_needed": rule.top_share,
                                        "min_submitted": rule.min_submitted,
                                        **asdict(measure), "reason": reason})


def _recorded(brief: Path, result: Path) -> SkipDecision | None:
    for path, kind in ((result, PrincipalResult), (brief, Brief)):
        record = kind.read(path)
        if not isinstance(record, Unreadable) and record.source in (PatchSource.SKIP_JUNIOR_TOP, BriefSource.SKIPPED) \
                and record.skipped is not None:
            return record.skipped
    return None


class SubmitTopCandidate:
    """The principal stage when the skip rule holds: the pool's top candidate, no model, no workspace."""

    role = None

    def __init__(self, config: RunConfig, decision: SkipDecision):
        self.config, self.decision = config, decision

    def write(self, job: TaskJob, pool: CandidatePool, brief: Brief) -> PrincipalResult:
        """The result an earlier session recorded (the resume cache), else the top candidate's."""
        return once(job.paths.principal_files.result, lambda: self.submit_top(job, pool), PrincipalResult)

    def submit_top(self, job: TaskJob, pool: CandidatePool) -> PrincipalResult:
        """The pool's top candidate as the result, patch.diff written (no candidate: no patch, and why)."""
        top = pool.candidates[0] if pool.candidates else None
        patch = top.patch if top else ""
        job.paths.principal.mkdir(parents=True, exist_ok=True)
        patchtext.write(job.paths.principal_files.patch, patch)
        return PrincipalResult.of({
            "source": PatchSource.SKIP_JUNIOR_TOP if top else PatchSource.NONE,
            "error": None if top else "no candidate",
            "candidate": 1 if top else None, "calls": 0, "cost": 0.0, "failed_attempts": [],
            "patch_lines": patch.count("\n"), "skipped": self.decision.to_dict(), "patch": patch})
