"""The candidate pool as the stages hold it in memory (``CandidateDraft``, ``CandidatePool``; built by
``pipeline.juniors.pool.build_pool``) and the rules judged on it: how strongly the juniors agree, and the adaptive
rollouts' waves (``juniors.schedule``). Pure (no model, container or file), so the juniors stage, the principal's
skip rule and the what-if analysis (``pipeline.analysis.whatif``, which replays the same decisions on a run's
recorded pools) share one copy without the analysis importing a stage.

The schedule starts ``first`` rollouts, then adds waves of ``wave`` up to K (``juniors.k``). After each wave the
pool of the rollouts so far (``build_pool``: the same candidates, votes and source/test split the later stages
use) is judged, and the schedule stops when a rule holds:

- ``top_share``: the pool's top candidate (most votes; ties: the earliest rollout) holds at least this share of
  the submitted rollouts' votes: of the rollouts that ended ``submitted``, the share whose source candidate it
  is, with at least ``min_submitted`` of them. Rollouts that failed or left no source edit (a test-only
  patch, nothing) are no votes for any candidate, so they never make agreement;
- ``no_new_files``: the last wave added no file to the union of the pool's changed source files, while that
  wave left at least one source candidate (a wave that proposed nothing says nothing about convergence).

Every decision (the wave, the rollouts so far, the rules' values, stop or go on, and why) is a line of the
``schedule`` record in junior/pool.json, written as it is made; rollouts never started are absent. Rollout
indices stay 0..n-1, so rollout i keeps seed ``juniors.seed + i`` and its temperature whatever the waves.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from pipeline.records import Rollout
from pipeline.records.pool import Decision, Schedule, ScheduleDecision
from pipeline.records.trajectory import ExitReason
from pipeline.settings.config import ScheduleConfig


class HunkData(TypedDict):
    """A hunk of a candidate's source edits (pipeline.records.pool.Hunk)."""

    file: str
    old_start: int
    old_lines: int
    function: str | None


class DroppedFile(TypedDict):
    """A file of a rollout's patch that cleaning left out of the pool, and why."""

    rollout: int
    file: str
    reason: str


@dataclass
class CandidateDraft:
    key: str
    patch: str  # source edits only, as a unified diff
    test_patch: str  # edits to test files, kept apart
    votes: int = 0
    rollouts: list[int] = field(default_factory=list)
    exit_reasons: list[str] = field(default_factory=list)  # how each of its rollouts ended, in `rollouts` order
    files: list[str] = field(default_factory=list)
    hunks: list[HunkData] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    # {rollout, findings}: its rollouts whose trajectories reached for the answer (pipeline.audit), and how
    reached: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CandidatePool:
    instance_id: str
    candidates: list[CandidateDraft]
    rollouts: int
    empty: list[int]  # rollouts that left no source edit
    unparsable: list[int]
    failed: list[int] = field(default_factory=list)  # rollouts whose diff could not be taken (patch_error)
    dropped: list[DroppedFile] = field(default_factory=list)  # what cleaning left out, and why

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Agreement:
    """How strongly rollouts agree (``agreement``): the submitted rollouts, the pool's top candidate, the votes it
    holds, those among the submitted rollouts and their share."""

    submitted: int
    top_candidate: str | None
    top_votes: int
    top_submitted_votes: int
    top_share: float


def agreement(pool: CandidatePool, rollouts: Sequence[Rollout]) -> Agreement:
    """How strongly ``rollouts`` (whose pool is ``pool``) agree."""
    submitted = sorted(r.index or 0 for r in rollouts if r.exit_reason == ExitReason.SUBMITTED)
    top = pool.candidates[0] if pool.candidates else None
    votes = sum(1 for reason in top.exit_reasons if reason == ExitReason.SUBMITTED) if top else 0
    return Agreement(submitted=len(submitted), top_candidate=top.key if top else None,
                     top_votes=top.votes if top else 0, top_submitted_votes=votes,
                     top_share=round(votes / len(submitted), 4) if submitted else 0.0)


def agrees(measure: Agreement, share: float, min_submitted: int) -> tuple[bool, str]:
    """Whether ``measure`` (``agreement``) reaches ``share`` with at least ``min_submitted`` submitted rollouts,
    and why (not)."""
    submitted, votes = measure.submitted, measure.top_submitted_votes
    if measure.top_candidate is None:
        return False, "no rollout left a source candidate"
    if submitted < min_submitted:
        return False, f"{submitted} rollout(s) submitted, fewer than {min_submitted}"
    holds = votes > 0 and measure.top_share >= share
    return holds, (f"the top candidate holds {votes} of {submitted} submitted rollouts' votes "
                   f"({measure.top_share:.2f} {'>=' if holds else '<'} {share:g})")


def source_files(pool: CandidatePool) -> set[str]:
    """The union of the files the pool's source candidates change (test edits are kept apart by the pool)."""
    return {path for candidate in pool.candidates for path in candidate.files}


def wave_sizes(settings: ScheduleConfig, k: int) -> list[int]:
    """The rollouts run after each wave: first, first + wave, ... up to k."""
    sizes, size = [], min(settings.first, k)
    while size > 0:
        sizes.append(size)
        if size >= k:
            break
        size = min(k, size + settings.wave)
    return sizes


def judge(settings: ScheduleConfig, k: int, wave: int, records: Sequence[Rollout], pool: CandidatePool,
          before: CandidatePool | None) -> Decision:
    """The decision after wave ``wave`` (1-based): ``records`` are the rollouts so far in index order, ``pool``
    their pool, ``before`` the pool of the rollouts before this wave (None after the first)."""
    measure = agreement(pool, records)
    files = source_files(pool)
    new = sorted(files - source_files(before)) if before is not None else sorted(files)
    rules: dict[str, bool | None] = {"top_share": None, "no_new_files": None}
    why: list[str] = []
    if settings.top_share is not None:
        rules["top_share"], reason = agrees(measure, settings.top_share, settings.min_submitted)
        why.append(reason)
    if settings.no_new_files:
        if before is None:
            why.append("no earlier wave to compare files with")
        else:
            started = {r.index or 0 for r in records[before.rollouts:]}  # this wave's rollouts
            proposed = any(set(c.rollouts) & started for c in pool.candidates)
            rules["no_new_files"] = proposed and not new
            if not proposed:
                why.append("this wave left no source candidate")
            elif new:
                why.append(f"this wave added {len(new)} file(s): {', '.join(new[:5])}")
            else:
                why.append(f"this wave added no file to the {len(files)} the pool changes")
    converged = any(rules.values())
    if converged:
        decision = ScheduleDecision.STOP
    elif len(records) >= k:
        decision, why = ScheduleDecision.STOP, [*why, f"all K={k} rollouts run"]
    else:
        decision = ScheduleDecision.GO_ON
    return Decision(wave=wave, rollouts=len(records), decision=decision, converged=converged, rules=rules,
                    **asdict(measure), candidates=len(pool.candidates), files=sorted(files), new_files=new,
                    reason="; ".join(why), time=round(time.time(), 3))


def record(settings: ScheduleConfig, k: int, decisions: list[Decision], left_out: list[int] | None = None) -> Schedule:
    """The ``schedule`` entry of junior/pool.json."""
    run = rollouts_run(decisions)
    stopped = bool(decisions) and decisions[-1].decision == ScheduleDecision.STOP
    entry = Schedule(settings=settings.model_dump(mode="json"), k=k, decisions=decisions, rollouts_run=run,
                     stopped_early=stopped and run < k, not_started=k - run if stopped else None)
    if left_out:
        entry.on_disk_not_in_pool = left_out  # rollouts an earlier session or another run left beyond the stop
    return entry


def rollouts_run(decisions: list[Decision]) -> int:
    """The rollouts run by the last of ``decisions`` (0 before any)."""
    return decisions[-1].rollouts if decisions else 0
