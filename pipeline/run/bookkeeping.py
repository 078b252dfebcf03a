"""A run's bookkeeping, whichever executor runs its tasks (the thread pool, pipeline.run.thread_executor; a Ray cluster,
pipeline.run.ray.executor): the tasks left to run (``plan``), each finished task recorded (``record_prediction``),
the summary of the session (``RunSummary``) and a finished task as one line of a log."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.control.outages import BREAKERS
from pipeline.records import Prediction, read_predictions
from pipeline.run.pace import Pace
from pipeline.run.task import RunSettings
from pipeline.rundir.storage import append_jsonl, write_json_atomic
from pipeline.tasks import Task
from pipeline.text.printable import clean, short_id, whole_paragraphs
from pipeline.text.secrets import redact


@dataclass
class RunSummary:
    roles: tuple[str, ...] = ()
    # instance id -> its prediction; an earlier session's as read back (one whose last line cannot be read: the
    # instance id alone, so that it is not run and paid for again)
    predictions: dict[str, Prediction] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    infra_errors: dict[str, str | None] = field(default_factory=dict)  # left unfinished, retried by a rerun
    stopped: bool = False  # a stop (Ctrl-C, SIGTERM) cut the run short; the rest resumes on a rerun
    pace: Pace = field(default_factory=lambda: Pace(total=0, done_before=0))

    def spend(self, stage: str) -> float:
        costs = (p.cost.get(stage) for p in self.predictions.values() if isinstance(p.cost, dict))
        spent: float = sum(cost for cost in costs if cost is not None and dollars_of(cost) != "$?")
        return spent

    @property
    def scored(self) -> list[bool]:
        """Each scored task's verdict: only a JSON true is resolved (a file written by hand may say "false")."""
        return [p.resolved is True for p in self.predictions.values() if p.resolved is not None]

    def line(self) -> str:
        stages = [s for s in self.roles if self.spend(s)] or list(self.roles)
        dollars = ", ".join(f"{stage} {dollars_of(self.spend(stage))}" for stage in stages)
        scored = self.scored
        rate = f" | resolved {sum(scored)}/{len(scored)}" if scored else ""
        pace = ", ".join(self.pace.estimate())  # the bar shows done of total itself
        paused = BREAKERS.status()
        return f"{dollars}{rate}" + (f" | {pace}" if pace else "") + (f" | waiting: {paused}" if paused else "")

    def calls(self) -> tuple[int, int]:
        """Model calls made and failed by the tasks of this session (their ledgers, earlier sessions too)."""
        mine = [self.predictions[i].calls for i in self.predictions if i not in self.skipped]
        return sum(calls.made or 0 for calls in mine if calls is not None), \
            sum(calls.failed or 0 for calls in mine if calls is not None)

    @property
    def no_model_answered(self) -> bool:
        """Calls were made and every one failed: whatever was resolved says nothing about the models."""
        made, failed = self.calls()
        return made > 0 and failed == made


def _unreadable(instance_id: str, file_name: str, where: tuple[int, str]) -> Prediction:
    """A task whose last prediction line is unreadable: skipped all the same (it was paid for), its row saying why."""
    number, why = where
    return Prediction(instance_id=instance_id, error=f"{file_name} line {number}: {why}")


def plan(tasks: list[Task], run: RunSettings) -> tuple[RunSummary, list[Task]]:
    """The run's summary with the tasks an earlier session finished, and the tasks left to run."""
    summary = RunSummary(roles=run.roles)
    lines = read_predictions(run.layout.predictions)
    todo = []
    for task in tasks:
        if task.instance_id in lines.records or task.instance_id in lines.unreadable:  # any line: not run again
            summary.predictions[task.instance_id] = lines.records.get(task.instance_id) or \
                _unreadable(task.instance_id, run.layout.predictions.name, lines.unreadable[task.instance_id])
            summary.skipped.append(task.instance_id)
        else:
            todo.append(task)
    summary.pace = Pace(total=len(tasks), done_before=len(summary.skipped))
    return summary, todo


def record_prediction(summary: RunSummary, run: RunSettings, prediction: Prediction,
                      log: Callable[[str], None] | None = None) -> None:
    """A finished task, whichever executor ran it: its line in predictions.jsonl (or infra_errors.jsonl: left
    unfinished for a rerun), the summary, eval_results.json. One caller at a time."""
    summary.pace.add((prediction.cost or {}).get("total"))
    if log:
        log(f"{task_line(prediction, summary.roles)} | {summary.pace.line()}")
    line = prediction.to_disk()
    if prediction.infra_error:
        append_jsonl(run.layout.infra_errors, line)
        summary.infra_errors[prediction.instance_id] = prediction.error
        return
    append_jsonl(run.layout.predictions, line)
    summary.predictions[prediction.instance_id] = prediction
    if run.evaluation is not None:
        write_json_atomic(run.layout.eval_results,
                          {i: p.resolved for i, p in sorted(summary.predictions.items()) if p.resolved is not None})


def task_line(prediction: Prediction, roles: tuple[str, ...]) -> str:
    """One line for a log: the task, how it ended, what it cost, and its error's first paragraph (with the one it
    introduces, when it ends in ":")."""
    cost = prediction.cost if isinstance(prediction.cost, dict) else {}
    resolved = verdict_word(prediction.resolved, "resolved", "not resolved", "")
    status = "not run (infra error, retried by a rerun)" if prediction.infra_error else \
        f"source {prediction.source if 'source' in prediction.model_fields_set else 'none'}"
    error, _ = whole_paragraphs(clean(redact(prediction.error or "")), lines=1)  # as its files hold it: no key
    parts = [f"task {short_id(prediction.instance_id)}: {status}",
             ", ".join(f"{role} {dollars_of(cost.get(role, 0.0))}" for role in roles), resolved,
             "error: " + " ".join(error.split()) if error else ""]
    return " | ".join(part for part in parts if part)


def verdict_word(verdict: object, yes: str, no: str, none: str) -> str:
    """A prediction's verdict in words: only a JSON true is resolved (a file written by hand may say "false")."""
    return none if verdict is None else yes if verdict is True else no


def dollars_of(value: object) -> str:
    """A cost as a line shows it; "$?" for one that is no finite number (a hand-edited predictions file)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1e15 < value < 1e15:
        return "$?"
    return f"${value:.4f}"
