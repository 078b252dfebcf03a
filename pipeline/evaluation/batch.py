"""Scoring many predictions: workers, progress, skipping finished ones, attempts, the summary."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, TypeGuard

from pipeline.control.parallel import run_with_progress
from pipeline.errors import InfrastructureFault
from pipeline.evaluation.protocol import strip_binary_sections
from pipeline.evaluation.runner import EvalSettings, evaluate
from pipeline.interop.predictions import PatchToScore
from pipeline.records import EvalResult, Unreadable
from pipeline.records.evaluation import Attempt, EvalCategory, Finding, infrastructure_files
from pipeline.rundir.layout import EvalOutput, ScoringFiles
from pipeline.rundir.storage import write_json_atomic
from pipeline.tasks import Task
from pipeline.text import patchtext


class EvalSummaryData(TypedDict):
    """The scoring's summary.json (``EvalSummary.as_dict``)."""

    predictions_evaluated: int
    scored: int
    resolved: int
    resolve_rate_scored: float | None
    resolve_rate_dataset: float | None
    dataset_size: int
    categories: dict[str, int]
    flagged: int
    resolved_changing_test_infrastructure: dict[str, list[str]]
    unknown_instances: list[str]
    skipped_finished: list[str]
    rescored_changed_patch: list[str]


@dataclass
class EvalSummary:
    results: dict[str, EvalResult] = field(default_factory=dict)  # instance id -> first attempt's result
    unknown: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # given a verdict in an earlier run
    changed: list[str] = field(default_factory=list)  # scored again: not the patch an earlier run scored
    dataset_size: int = 0

    @property
    def counts(self) -> Counter[str]:
        return Counter(result.category for result in self.results.values())

    @property
    def resolved(self) -> int:
        return sum(1 for result in self.results.values() if result.resolved)

    @property
    def scored(self) -> int:
        return sum(1 for result in self.results.values() if result.category != EvalCategory.INFRA_ERROR)

    @property
    def flagged(self) -> dict[str, list[Finding]]:
        """instance id -> the integrity findings of its result, for those with any."""
        return {i: r.integrity for i, r in self.results.items() if r.integrity}

    @property
    def infrastructure(self) -> dict[str, list[str]]:
        """instance id -> the test infrastructure files its patch changes, for the resolved results that change
        any (a verdict to read with care: the patch touched what runs the tests)."""
        changed = {i: infrastructure_files(r.test_infrastructure) for i, r in self.results.items()
                   if r.resolved is True}
        return {i: files for i, files in changed.items() if files}

    def as_dict(self) -> EvalSummaryData:
        return {
            "predictions_evaluated": len(self.results), "scored": self.scored, "resolved": self.resolved,
            "resolve_rate_scored": self.resolved / self.scored if self.scored else None,
            "resolve_rate_dataset": self.resolved / self.dataset_size if self.dataset_size else None,
            "dataset_size": self.dataset_size, "categories": {c: self.counts.get(c, 0) for c in EvalCategory},
            "flagged": len(self.flagged), "resolved_changing_test_infrastructure": self.infrastructure,
            "unknown_instances": self.unknown, "skipped_finished": self.skipped,
            "rescored_changed_patch": self.changed,
        }


def evaluate_predictions(predictions: list[PatchToScore], tasks: list[Task], output_dir: Path,
                         settings: EvalSettings, *, workers: int = 2, redo: bool = False, attempts: int = 1,
                         show_progress: bool = True) -> EvalSummary:
    """Score the predictions not scored yet into ``output_dir`` on this machine, ``workers`` at a time (on a Ray
    cluster: pipeline.run.ray.scoring.evaluate_predictions_on_ray, the same files and summary)."""
    summary, todo = plan_eval(predictions, tasks, output_dir, redo)
    by_id = {task.instance_id: task for task in tasks}
    lock = threading.Lock()

    def one(prediction: PatchToScore) -> None:
        task = by_id[prediction.instance_id]
        result = score_one(task, prediction.patch, output_dir / task.instance_id, settings, attempts)
        with lock:
            record_result(output_dir, summary, result)

    run_with_progress("eval", todo, one, workers=workers, total=len(todo), describe=lambda: _rate(summary),
                      show=show_progress)
    finish_eval(output_dir, summary)
    return summary


def plan_eval(predictions: list[PatchToScore], tasks: list[Task], output_dir: Path,
              redo: bool) -> tuple[EvalSummary, list[PatchToScore]]:
    """The summary with the instances an earlier run scored (unless ``redo``), and the predictions left to score:
    those without a verdict (never scored, or an infra_error) and those whose patch is not the one scored before
    (an edited predictions file, or another file of the same name scored into the same folder)."""
    by_id = {task.instance_id: task for task in tasks}
    summary = EvalSummary(dataset_size=len(tasks),
                          unknown=[p.instance_id for p in predictions if p.instance_id not in by_id])
    todo = []
    for prediction in predictions:
        if prediction.instance_id not in by_id:
            continue
        files = EvalOutput(output_dir).task(prediction.instance_id)
        previous = None if redo else read_result(files.result)
        if has_verdict(previous) and not scored_this_patch(previous, files, prediction.patch):
            summary.changed.append(prediction.instance_id)
            previous = None
        if previous is not None:
            summary.results[prediction.instance_id] = previous  # an infra_error's stays until it is scored
        if has_verdict(previous):
            summary.skipped.append(prediction.instance_id)
        else:
            todo.append(prediction)
    return summary, todo


def read_result(path: Path) -> EvalResult | None:
    """An earlier scoring's result.json; None when there is none or it cannot be read (it is scored again)."""
    record = EvalResult.read(path)
    if isinstance(record, Unreadable) or "resolved" not in record.model_fields_set:
        return None
    return record


def scored_this_patch(result: EvalResult, files: ScoringFiles, patch: str) -> bool:
    """Whether an earlier result is the verdict on ``patch``: by the hash it records, or (a result from before
    swepipe recorded it) by the patch its scoring saved beside it."""
    recorded = result.patch_sha256
    if recorded is not None:
        return bool(recorded == patchtext.digest(patch))
    try:
        return patchtext.read(files.patch) == strip_binary_sections(patch)
    except OSError:
        return False


def has_verdict(result: EvalResult | None) -> TypeGuard[EvalResult]:
    """Whether a result is a verdict: an infra_error is none (the scoring could not run), so a rerun scores it
    again, without --redo."""
    return result is not None and result.category != EvalCategory.INFRA_ERROR


def infra_error(instance_id: str, error: str) -> EvalResult:
    """The result of a scoring that could not run: no verdict, scored again on the next invocation."""
    return EvalResult.of({"instance_id": instance_id, "resolved": False, "category": EvalCategory.INFRA_ERROR,
                          "error": error})


def score_one(task: Task, patch: str, instance_dir: Path, settings: EvalSettings, attempts: int = 1) -> EvalResult:
    """One instance's result record (its artefacts written under ``instance_dir``, not its result.json): an
    error is an infra_error, never raised (a stop is no Exception); unresolved ones rerun up to ``attempts``."""
    try:
        result = evaluate(task, patch, instance_dir, settings)
    except InfrastructureFault:
        raise
    except Exception as error:  # noqa: BLE001 - one broken instance must not end the run (a stop is no Exception)
        result = infra_error(task.instance_id, f"{type(error).__name__}: {error}")
    if not result.resolved and attempts > 1 and result.category != EvalCategory.INFRA_ERROR:
        result.attempts = _reattempt(task, patch, instance_dir, settings, result, attempts)
        result.flaky_tests = _flaky(result.attempts)
    return result


def record_result(output_dir: Path, summary: EvalSummary, result: EvalResult) -> None:
    """A scored instance: its result.json, the summary, the official files. One caller at a time."""
    result.write(EvalOutput(output_dir).task(result.instance_id).result)
    summary.results[result.instance_id] = result
    _write_official(output_dir, summary)


def finish_eval(output_dir: Path, summary: EvalSummary) -> None:
    _write_official(output_dir, summary)
    write_json_atomic(EvalOutput(output_dir).summary, summary.as_dict())


def _reattempt(task: Task, patch: str, instance_dir: Path, settings: EvalSettings, first: EvalResult,
               attempts: int) -> list[Attempt]:
    """Run again (official verdict unchanged) to tell flaky tests from real failures."""
    history = [_attempt(1, first)]
    for number in range(2, attempts + 1):
        again = evaluate(task, patch, ScoringFiles(instance_dir).attempt(number).root, settings)
        history.append(_attempt(number, again))
        if again.resolved:
            break
    return history


def _attempt(number: int, result: EvalResult) -> Attempt:
    return Attempt(attempt=number, resolved=result.resolved, category=result.category,
                   statuses=result.statuses if result.statuses is not None else {})


def _flaky(attempts: list[Attempt]) -> list[str]:
    runs = [attempt.statuses or {} for attempt in attempts]
    names = set().union(*runs)
    return sorted(name for name in names if len({run.get(name, "MISSING") for run in runs}) > 1)


def _write_official(output_dir: Path, summary: EvalSummary) -> None:
    """eval_results.json ({instance_id: bool}) and infra_errors.json, as the official harness writes them."""
    scored = {i: r.resolved for i, r in sorted(summary.results.items()) if r.category != EvalCategory.INFRA_ERROR}
    infra = {i: r.error if "error" in r.model_fields_set else "" for i, r in sorted(summary.results.items())
             if r.category == EvalCategory.INFRA_ERROR}
    write_json_atomic(EvalOutput(output_dir).results, scored)
    write_json_atomic(EvalOutput(output_dir).infra_errors, infra)


def _rate(summary: EvalSummary) -> str:
    if not summary.scored:
        return "resolved: n/a"
    return f"resolved {summary.resolved}/{summary.scored} ({summary.resolved / summary.scored:.0%})"
