"""The candidate pool's record (pipeline.juniors.stage.write_pool): pipeline.juniors.pool.CandidatePool, and the
schedule's decisions when juniors.schedule is on."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from pipeline.layout import TASK
from pipeline.records.base import Flag, Int, Number, Part, Record, Text


class Hunk(Part):
    """A hunk of a candidate's source edits."""

    file: Text = Field(None, description="the file, from the repository root")
    old_start: Int = Field(None, description="its first line in the base commit")
    old_lines: Int = Field(None, description="the base commit's lines it spans")
    function: Text | None = Field(None, description="the function or class it is in, when one is found")


class Candidate(Part):
    """One distinct candidate: the rollouts' patches that are the same fix once cleaned."""

    key: Text = Field(None, description="16 hex digits naming the candidate (its folder under candidates/)")
    patch: Text = Field(None, description="its source edits, as a unified diff")
    test_patch: Text = Field(None, description="its edits to test files, kept apart")
    votes: Int = Field(None, description="the rollouts that proposed it")
    rollouts: list[Int] = Field(None, description="their indices")
    exit_reasons: list[Text] = Field(None, description="how each of them ended, in the order of rollouts")
    files: list[Text] = Field(None, description="the source files it changes")
    hunks: list[Hunk] = Field(None, description="its source hunks")
    functions: list[Text] = Field(None, description="the functions its hunks are in")


class Decision(Part):
    """One decision of juniors.schedule, made after a wave (pipeline.juniors.schedule.judge)."""

    wave: Int = Field(None, description="the wave, from 1")
    rollouts: Int = Field(None, description="the rollouts run so far")
    decision: Text = Field(None, description="\"stop\" or \"go on\"")
    converged: Flag = Field(None, description="a rule held")
    rules: dict[str, Flag | None] = Field(None, description="each rule (top_share, no_new_files) and whether it "
                                                            "held; null when off or not judged")
    submitted: Int = Field(None, description="rollouts so far that submitted")
    top_candidate: Text | None = Field(None, description="the key of the pool's top candidate")
    top_votes: Int = Field(None, description="its votes")
    top_submitted_votes: Int = Field(None, description="its votes among the submitted rollouts")
    top_share: Number = Field(None, description="those votes over the submitted rollouts")
    candidates: Int = Field(None, description="distinct candidates so far")
    files: list[Text] = Field(None, description="the source files they change")
    new_files: list[Text] = Field(None, description="those this wave added")
    reason: Text = Field(None, description="why, in words")
    time: Number = Field(None, description="when it was made (Unix seconds)")


class Schedule(Part):
    """What juniors.schedule did on the task (pipeline.juniors.schedule.record)."""

    settings: dict[str, Any] = Field(None, description="juniors.schedule as configured")
    k: Int = Field(None, description="K, the most rollouts it could run")
    decisions: list[Decision] = Field(None, description="its decisions, one a wave, in order")
    rollouts_run: Int = Field(None, description="the rollouts it ran")
    stopped_early: Flag = Field(None, description="it stopped before K")
    not_started: Int | None = Field(None, description="rollouts it never started (null while it goes on)")
    on_disk_not_in_pool: list[Int] = Field(None, description="rollouts an earlier session or another run left "
                                                             "beyond the stop, not in the pool")


class Dropped(Part):
    """A file cleaning left out of a rollout's candidate."""

    rollout: Int = Field(None, description="the rollout")
    file: Text = Field(None, description="the file")
    reason: Text = Field(None, description="why (a scratch file, a build artefact, a whitespace-only change, ...)")


class Pool(Record):
    """The candidate pool: the rollouts' patches parsed, cleaned, de-duplicated and counted, most-voted first
    (ties: the earliest rollout); the candidates are numbered 1.. in this order wherever a stage names one."""

    FILE = str(TASK.junior_files.pool)

    instance_id: Text = Field(None, description="the task")
    candidates: list[Candidate] = Field(None, description="the distinct candidates, most-voted first")
    rollouts: Int = Field(None, description="the rollouts pooled")
    empty: list[Int] = Field(None, description="rollouts that left no source edit")
    unparsable: list[Int] = Field(None, description="rollouts whose diff does not parse")
    failed: list[Int] = Field(None, description="rollouts whose diff could not be taken (patch_error)")
    dropped: list[Dropped | Text] = Field(None, description="what cleaning left out, and why (an entry that is "
                                                              "text is kept as a note)")
    schedule: Schedule = Field(None, description="with juniors.schedule on: its decisions")
