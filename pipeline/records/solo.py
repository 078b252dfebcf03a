"""The solo baseline's record (pipeline.strategies.solo.SoloStrategy)."""

from __future__ import annotations

from pipeline.records.base import Int, Number, Record, Text, Word, absent
from pipeline.records.retrieval import RetrievalFinding
from pipeline.records.trajectory import ExitReason
from pipeline.rundir.layout import TASK


class SoloResult(Record):
    """One agent's whole attempt at the task: how it ended, what it cost, and the working tree's final diff, which
    is the prediction. patch.diff beside it holds the same patch; trajectory.json the agent's record."""

    FILE = str(TASK.solo_files.result)

    exit_reason: Word[ExitReason] | None = absent("how the agent ended (submitted, step_limit, cost_limit, ...)")
    error: Text | None = absent("what went wrong, if anything")
    steps: Int = absent("the agent's steps")
    cost: Number = absent("dollars its calls cost")
    prompt: Text = absent("solo.prompt: the system prompt it was given")
    patch: Text = absent("the working tree's diff against the base commit; empty for none")
    retrieval: list[RetrievalFinding] = absent("the retrieval audit's findings on the agent's trajectory "
                                               "(pipeline.audit); [] when none; absent when not audited")
    scratch_left_out: dict[str, Text] = absent("with limits.leave_out_scratch: the files left out of the patch, each "
                                               "with the reason")
