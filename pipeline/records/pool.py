"""The candidate pool's record (pipeline.juniors.stage.write_pool): pipeline.juniors.pool.CandidatePool, and the
schedule's decisions when juniors.schedule is on."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pipeline.records.base import Flag, Int, Number, Part, Record, Text, Word, absent
from pipeline.records.retrieval import ReachedRollout
from pipeline.rundir.layout import TASK


class Hunk(Part):
    """A hunk of a candidate's source edits."""

    file: Text = absent("the file, from the repository root")
    old_start: Int = absent("its first line in the base commit")
    old_lines: Int = absent("the base commit's lines it spans")
    function: Text | None = absent("the function or class it is in, when one is found")


class Candidate(Part):
    """One distinct candidate: the rollouts' patches that are the same fix once cleaned."""

    key: Text = absent("16 hex digits naming the candidate (its folder under candidates/)")
    patch: Text = absent("its source edits, as a unified diff")
    test_patch: Text = absent("its edits to test files, kept apart")
    votes: Int = absent("the rollouts that proposed it")
    rollouts: list[Int] = absent("their indices")
    exit_reasons: list[Text] = absent("how each of them ended, in the order of rollouts")
    files: list[Text] = absent("the source files it changes")
    hunks: list[Hunk] = absent("its source hunks")
    functions: list[Text] = absent("the functions its hunks are in")
    reached: list[ReachedRollout] = absent("its rollouts whose trajectories reached for the answer (the retrieval "
                                           "audit, pipeline.audit), and how; the candidate is kept as evidence, "
                                           "and the senior and principal are told")


class ScheduleDecision(StrEnum):
    """What juniors.schedule decided after a wave."""

    STOP = "stop"  # a rule held (the pool converged), or all K rollouts ran
    GO_ON = "go on"  # another wave of rollouts


class Decision(Part):
    """One decision of juniors.schedule, made after a wave (pipeline.pool_rules.judge)."""

    wave: Int = absent("the wave, from 1")
    rollouts: Int = absent("the rollouts run so far")
    decision: Word[ScheduleDecision] = absent("stop, or go on to another wave")
    converged: Flag = absent("a rule held")
    rules: dict[str, Flag | None] = absent("each rule (top_share, no_new_files) and whether it "
                                           "held; null when off or not judged")
    submitted: Int = absent("rollouts so far that submitted")
    top_candidate: Text | None = absent("the key of the pool's top candidate")
    top_votes: Int = absent("its votes")
    top_submitted_votes: Int = absent("its votes among the submitted rollouts")
    top_share: Number = absent("those votes over the submitted rollouts")
    candidates: Int = absent("distinct candidates so far")
    files: list[Text] = absent("the source files they change")
    new_files: list[Text] = absent("those this wave added")
    reason: Text = absent("why, in words")
    time: Number = absent("when it was made (Unix seconds)")


class Schedule(Part):
    """What juniors.schedule did on the task (pipeline.pool_rules.record)."""

    settings: dict[str, Any] = absent("juniors.schedule as configured")
    k: Int = absent("K, the most rollouts it could run")
    decisions: list[Decision] = absent("its decisions, one a wave, in order")
    rollouts_run: Int = absent("the rollouts it ran")
    stopped_early: Flag = absent("it stopped before K")
    not_started: Int | None = absent("rollouts it never started (null while it goes on)")
    on_disk_not_in_pool: list[Int] = absent("rollouts an earlier session or another run left "
                                            "beyond the stop, not in the pool")


class Dropped(Part):
    """A file cleaning left out of a rollout's candidate."""

    rollout: Int = absent("the rollout")
    file: Text = absent("the file")
    reason: Text = absent("why (a scratch file, a build artefact, a whitespace-only change, ...)")


class Pool(Record):
    """The candidate pool: the rollouts' patches parsed, cleaned, de-duplicated and counted, most-voted first
    (ties: the earliest rollout); the candidates are numbered 1.. in this order wherever a stage names one."""

    FILE = str(TASK.junior_files.pool)

    instance_id: Text = absent("the task")
    candidates: list[Candidate] = absent("the distinct candidates, most-voted first")
    rollouts: Int = absent("the rollouts pooled")
    empty: list[Int] = absent("rollouts that left no source edit")
    unparsable: list[Int] = absent("rollouts whose diff does not parse")
    failed: list[Int] = absent("rollouts whose diff could not be taken, or was kept out (patch_error: an "
                               "imported patch that touches .git/, is binary or does not apply)")
    dropped: list[Dropped | Text] = absent("what cleaning left out, and why (an entry that is "
                                             "text is kept as a note)")
    schedule: Schedule = absent("with juniors.schedule on: its decisions")
