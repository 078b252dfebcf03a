"""`swepipe replay`'s record (pipeline.strategies.replay): a recorded trajectory replayed through swepipe's agent,
beside what its source recorded."""

from __future__ import annotations

from pipeline.records.base import Flag, Int, Record, Text, absent
from pipeline.records.retrieval import RetrievalFinding
from pipeline.rundir.layout import TASK


class ReplayResult(Record):
    """How the replay of one recorded trajectory compares with its record. The prediction is the replay's own
    patch (the working tree's diff, as for any swepipe agent); the recorded submission is kept here beside it."""

    FILE = str(TASK.replay_files.result)

    source: Text = absent("the trajectory file replayed")
    source_format: Text = absent("its format: mini-swe-agent-1, mini-swe-agent-2, swe-agent or swepipe")
    recorded_steps: Int = absent("the steps the source recorded")
    replayed_steps: Int = absent("the steps the replay took")
    patch_identical: Flag | None = absent("whether the replay's patch is the recorded submission, byte for byte; "
                                          "absent when the source recorded none")
    recorded_patch: Text | None = absent("the source's final patch, when it recorded one")
    only_replayed: list[Text] = absent("files the replay's patch changes and the recorded one does not (scratch "
                                       "files the source left out of its submission, say)")
    only_recorded: list[Text] = absent("files the recorded patch changes and the replay's does not")
    differing: list[Text] = absent("files both patches change, differently: 'path: N of M hunks differ'")
    not_submitted: list[Text] = absent("files of the replay's patch the source's agent did not list to submit "
                                       "(mini-swe-agent 2.x)")
    exit_codes_differ: list[Text] = absent("steps whose command's exit status differs from the record: "
                                           "'step N: recorded R, replayed P'")
    recorded_exit_status: Text | None = absent("how the source's agent ended, in its own words")
    recorded_resolved: Flag | None = absent("the source's verdict, when it recorded one")
    recorded_cost: float | None = absent("dollars the source recorded for the trajectory (none spent here)")
    retrieval: list[RetrievalFinding] = absent("the retrieval audit's findings on the recorded trajectory "
                                               "(pipeline.audit: its source's harness was not sealed); [] when none")
    notes: list[Text] = absent("what the reader or the replay had to leave out or change (a submit appended "
                               "after a trajectory that ended without one, paths mapped)")
