"""A finished task's prediction (pipeline.run.task.run_one_task, recorded by pipeline.run.bookkeeping), a line of
predictions.jsonl, and ``read_predictions``, the reader of that file."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from pipeline.records.base import Flag, Int, Number, Part, Record, Text, Unreadable, Word, absent
from pipeline.records.brief import SkipDecision
from pipeline.records.sealing import ContainerSeal
from pipeline.records.trajectory import ExitReason
from pipeline.rundir.layout import RUN


class Tokens(Part):
    """Tokens of a stage's (or role's) calls."""

    input: Int = absent("input tokens (the cached ones among them)")
    cached: Int = absent("input tokens read from a prompt cache")
    output: Int = absent("output tokens")


class Calls(Part):
    """The task's model calls, from its ledger (earlier sessions too)."""

    made: Int = absent("calls made")
    failed: Int = absent("calls that failed")


class Prediction(Record):
    """A task the run finished: its patch, where the patch came from, the models, dollars, tokens and time by stage
    (by role for the team), and the verdict when the run scored it. A rerun appends a line; the last line of an
    instance is its prediction. infra_errors.jsonl holds the same record for tasks left unfinished by an
    infrastructure fault (infra_error true), retried by a rerun."""

    FILE = f"{RUN.predictions} (one a line); {RUN.infra_errors} (tasks left unfinished, one a line)"

    instance_id: str = Field(description="the task")
    model_patch: str | None = absent("the patch submitted (bytes that are not UTF-8 as \\udcXX "
                                     "escapes); empty for none")
    strategy: Text = absent("pipeline, solo, team, vote, or a plug-in's name")
    source: Text = absent("where the patch came from: the principal result's source (pipeline), "
                          "solo, team, vote, or none")
    models: dict[str, Text] = absent("role -> model string, for the roles the strategy uses")
    error: Text | None = absent("the failure that ended the task (\"<stage> stage: <error>\"), or a "
                                "stage's own error")
    skip_check: SkipDecision = absent("pipeline with principal.skip_when: the rule's decision")
    juniors_reused_from: Text | None = absent("the run the rollouts were reused from, if any")
    imported_from: list[Text] | None = absent("the sources of the candidates taken in (run --juniors-from) "
                                              "that are in this task's pool")
    imported_cost: Number | None = absent("dollars those sources recorded for their candidates: spent there, "
                                          "not counted in cost")
    exit_reason: Word[ExitReason] | None = absent("solo and team: how the agent (the lead) ended")
    workers: Int = absent("team: the workers started")
    delegations: dict[str, Int] | None = absent("team: delegations by stage")
    lost_work: list[dict[str, Any]] | dict[str, Any] | None = absent(
        "team with the submit guard off: what workers did after the lead submitted (older records: a mapping by "
        "worker)")
    votes: Int = absent("vote: the votes of the submitted candidate")
    infra_retries: list[Text] = absent("infrastructure faults the task's stages were retried "
                                       "after")
    infra_error: Flag = absent("true: no answer (infra_errors.jsonl), the task stays unfinished")
    cost: dict[str, Number] = absent("dollars by stage (by role for the team), and total; rollouts "
                                     "reused from another run count as paid there")
    tokens: dict[str, Tokens] = absent("tokens by stage (by role for the team)")
    calls: Calls = absent("the task's model calls")
    seconds: dict[str, Number] = absent("wall time by stage")
    resolved: Flag | None = absent("with --evaluate: the hidden tests' verdict")
    node: Text = absent("with the ray executor: the machine that ran the task")
    containers: list[ContainerSeal] = absent("the agents' containers the task opened (earlier sessions' too), how "
                                             "each was sealed and whether it had the network; absent: not recorded "
                                             "(a run before swepipe recorded it)")


@dataclass
class PredictionLines:
    """A predictions.jsonl file as read back: the last line of each instance wins (as a rerun's does)."""

    records: dict[str, Prediction] = field(default_factory=dict)
    # The instances whose last line is no prediction: instance id -> (line number, why).
    unreadable: dict[str, tuple[int, str]] = field(default_factory=dict)
    nameless: list[int] = field(default_factory=list)  # lines that are no prediction of any instance
    torn: bool = False  # the last line was cut short by a killed write


def read_predictions(path: Path) -> PredictionLines:
    """The predictions in the JSON Lines file at ``path`` (none when it is absent)."""
    found = PredictionLines()
    try:
        text = path.read_bytes().decode("utf-8", errors="surrogateescape")
    except FileNotFoundError:
        return found
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            if number == len(lines) and not text.endswith("\n"):
                found.torn = True
            else:
                found.nameless.append(number)
            continue
        instance_id = data.get("instance_id") if isinstance(data, dict) else None
        if not isinstance(instance_id, str) or not instance_id:
            found.nameless.append(number)
            continue
        record = Prediction.from_data(data, path)
        found.records.pop(instance_id, None)
        found.unreadable.pop(instance_id, None)
        if isinstance(record, Unreadable):
            found.unreadable[instance_id] = (number, record.why)
        else:
            found.records[instance_id] = record
    return found


def finished_predictions(path: Path) -> dict[str, dict[str, Any]]:
    """The tasks a run's predictions.jsonl at ``path`` finished, by instance id, as the dicts the run's bookkeeping
    holds (``Prediction.to_dict``). Lenient on purpose, through ``read_predictions``: a task with any line is not
    run (and paid for) again, one whose last line is no readable prediction too (its dict says why); a last line
    cut short by a kill is no line."""
    lines = read_predictions(path)
    finished: dict[str, dict[str, Any]] = {
        instance_id: {"instance_id": instance_id, "error": f"{path.name} line {number}: {why}"}
        for instance_id, (number, why) in lines.unreadable.items()}
    finished.update((instance_id, record.to_dict()) for instance_id, record in lines.records.items())
    return finished
