"""The team baseline's records (pipeline.team): the result of the lead and its workers, and the delegations the
lead made, kept current while the team works."""

from __future__ import annotations

from typing import Any

from pipeline.records.base import Flag, Int, Number, Part, Record, Text, Word, absent
from pipeline.records.retrieval import RetrievalFinding
from pipeline.records.trajectory import ExitReason
from pipeline.rundir.layout import TASK


class LostCommand(Part):
    """A command a worker ran past the lead's submit (pipeline.team.lead.Lead.lost_work)."""

    command: Text = absent("the command")
    started: Number | None = absent("when it started (seconds since the team started)")
    ended: Number = absent("when it ended")
    exit_code: Int | None = absent("its exit code")
    started_before_submit: Flag = absent("it was running when the lead submitted")


class LostWorkRecord(Part):
    """What one worker did after the lead submitted, with the submit guard off."""

    worker: Text = absent("the worker, worker-N")
    steps: Int = absent("its steps after the submit")
    cost: Number = absent("dollars they cost")
    commands: list[LostCommand] = absent("its commands that ended after the submit")
    files: list[Text] = absent("the files its commands changed that changed after the submit")


class TeamResult(Record):
    """The team's attempt at the task (pipeline.team.lead.run_team): how the lead ended, what its workers did, and
    the final diff, which is the prediction. patch.diff beside it holds the same patch."""

    FILE = str(TASK.team_files.result)

    exit_reason: Word[ExitReason] | None = absent("how the lead ended (submitted, step_limit, ...)")
    error: Text | None = absent("what went wrong, if anything")
    steps: Int = absent("the lead's steps")
    workers: Int = absent("the workers started")
    delegations: dict[str, Int] = absent("delegations by stage (planning, implementation, "
                                         "verification)")
    stopped_at_end: list[Text] = absent("workers still running when the lead ended, stopped then")
    unread_reports: list[Text] = absent("workers whose report the lead never read")
    writes_outside: dict[str, list[Text]] = absent("worker -> files it wrote outside its writable "
                                                   "paths")
    possible_writes_outside: dict[str, dict[str, list[Text]]] = absent(
        "worker -> files it may have written outside them (a command whose writes are uncertain) -> the other "
        "agents that may have written them instead")
    submit_guard: Flag = absent("team.submit_guard: whether the lead could submit with workers "
                                "running")
    lost_work: list[LostWorkRecord] = absent("with the submit guard off: what workers did after the lead submitted")
    files_changed_after_submit: list[Text] = absent("files changed after the lead submitted")
    resumed: Flag = absent("whether the lead's run was continued from an earlier session")
    patch: Text = absent("the final patch: the tree as the lead submitted it, else the workspace's "
                         "diff")
    retrieval: list[RetrievalFinding] = absent("the retrieval audit's findings on the lead's and the workers' "
                                               "trajectories (pipeline.audit), each naming its agent; [] when none; "
                                               "absent when not audited")


class Counts(Part):
    """Delegations by stage, and in all."""

    planning: Int = absent("planning delegations")
    implementation: Int = absent("implementation delegations")
    verification: Int = absent("verification delegations")
    total: Int = absent("all delegations")


class WorkerSession(Part):
    """A session of a worker: its first, or one the lead resumed it for (times in seconds since the team
    started, and Unix seconds for ``started_at`` and ``ended_at``)."""

    lead_step: Int = absent("the lead's step that started or resumed it")
    started: Number = absent("when it started")
    started_at: Number = absent("when it started (Unix seconds)")
    instructions: Text | None = absent("the lead's instructions resuming it (null: the first session)")
    ended: Number = absent("when it ended")
    ended_at: Number = absent("when it ended (Unix seconds)")
    exit_reason: Text | None = absent("how its agent ended")


class WorkerRecord(Part):
    """One worker the lead delegated to (pipeline.team.workers.Worker's record). Times: delegated_at, started_at
    and ended_at are Unix seconds; offset and the sessions' started and ended are seconds since the team started."""

    worker: Text = absent("its name, worker-N")
    by: Text = absent("who delegated (the lead)")
    stage: Text = absent("planning, implementation or verification")
    task: Text = absent("the task the lead gave it")
    writable: Any = absent("the paths it may write")
    lead_step: Int = absent("the lead's step that delegated it")
    delegated_at: Number = absent("when it was delegated")
    started_at: Number = absent("when it started")
    ended_at: Number | None = absent("when it ended (null while it runs)")
    offset: Number = absent("when it was delegated, since the team started")
    sessions: list[WorkerSession] = absent("its sessions (a continued worker has several)")
    state: Text = absent("running, reported, collected or stopped")
    exit_reason: Word[ExitReason] | None = absent("how its agent ended")
    error: Text | None = absent("what went wrong, if anything")
    steps: Int = absent("its steps")
    seconds: Number = absent("its wall time")
    cost: Number = absent("dollars its calls cost")
    input_tokens: Int = absent("its input tokens")
    output_tokens: Int = absent("its output tokens")
    changed_files: list[Text] = absent("files it changed")
    writes_outside: list[Text] = absent("files it wrote outside its writable paths")
    possibly_changed: dict[str, list[Text]] = absent("files a command of its may have changed -> the other agents "
                                                     "whose commands may have changed them instead")
    possible_writes_outside: dict[str, list[Text]] = absent("those files outside its writable paths")
    report: Text | None = absent("its report to the lead")
    collected: Any = absent("when the lead read its report")
    stopped_by: Text | None = absent("who stopped it, if anyone")
    lost_work: LostWorkRecord | None = absent("with the submit guard off: what it did after the lead submitted")


class TeamDelegations(Record):
    """The team's settings and every delegation the lead made, rewritten whenever one changes; a resumed task
    restores its workers from it (pipeline.team.roster.Team.save)."""

    FILE = str(TASK.team_files.delegations)

    mode: Text = absent("team.mode")
    stages: Any = absent("team.stages")
    size: Any = absent("team.team_size")
    sizing: Text = absent("team.sizing")
    started: Number = absent("when the team started (Unix seconds)")
    submit_guard: Flag = absent("team.submit_guard")
    directory: Flag = absent("team.directory: whether workers see each other")
    lead_prompt: Text = absent("team.lead_prompt")
    counts: Counts = absent("delegations by stage, and in all")
    lost_work: list[LostWorkRecord] = absent("with the submit guard off: what workers did after the lead submitted")
    delegations: list[WorkerRecord] = absent("the workers, in the order they were delegated")
