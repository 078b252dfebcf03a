"""``swepipe eval --candidates RUN``: every distinct junior candidate of a run scored with the hidden tests.

Each candidate of a task's ``junior/pool.json`` is scored with its source ``patch`` exactly as a prediction is
(``pipeline.evaluation.batch.score_one``), into ``tasks/<id>/candidates/<key>/``: the same artefacts, and a
``result.json`` that is eval's record plus the candidate's ``key``, ``votes`` and ``rollouts``. A candidate with a
verdict is skipped on a rerun (``redo`` scores it again); one whose scoring could not run (``infra_error``) is
scored again, as it has no verdict. ``candidates/summary.json`` sums up a task: its candidates, which resolve, or
why its pool could not be read. ``swepipe whatif`` reads these files.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from pipeline.control.parallel import run_with_progress
from pipeline.evaluation.batch import has_verdict, read_result, score_one
from pipeline.evaluation.runner import EvalSettings
from pipeline.records import EvalResult, Pool, Unreadable, read_json
from pipeline.records.evaluation import EvalCategory
from pipeline.records.pool import Candidate
from pipeline.rundir.layout import TASK, RunLayout, TaskPaths, is_candidate_key
from pipeline.rundir.storage import write_json_atomic
from pipeline.tasks import Task


class MalformedPool(ValueError):
    """A pool.json that cannot be read as a list of candidates."""


@dataclass(frozen=True)
class CandidateJob:
    task: Task
    paths: TaskPaths
    key: str
    patch: str
    votes: int | None  # None: the pool does not say
    rollouts: list[int] | None


class CandidateRow(TypedDict):
    """A candidate in a task's candidates/summary.json."""

    key: str
    votes: int | None
    rollouts: list[int] | None
    resolved: bool | None
    category: str | None


class TaskCandidatesSummary(TypedDict):
    """A task's candidates/summary.json; the run's by_task."""

    instance_id: str
    error: str | None
    candidates: list[CandidateRow]
    total: int
    resolved: int
    infra_error: int


class CandidatesSummaryData(TypedDict):
    """The run's scoring of candidates, as ``swepipe eval --candidates --json`` and its summary give it."""

    run: str
    tasks: int
    candidates: int
    scored_now: int
    skipped: int
    resolved: int
    infra_error: int
    no_pool: list[str]
    unknown: list[str]
    failed: dict[str, str]
    by_task: dict[str, TaskCandidatesSummary]


@dataclass
class TaskCandidates:
    """One task's part of the scoring: its candidates' results, or why none could be scored."""

    instance_id: str
    keys: list[str] = field(default_factory=list)  # the pool's candidates, in its order (most votes first)
    results: dict[str, EvalResult] = field(default_factory=dict)  # key -> result.json's record
    skipped: list[str] = field(default_factory=list)  # keys with a verdict from an earlier invocation
    error: str | None = None  # the pool could not be read: nothing of this task is scored

    @property
    def resolved(self) -> list[str]:
        return [key for key in self.keys if key in self.results and self.results[key].resolved]

    @property
    def infra_errors(self) -> list[str]:
        return [key for key in self.keys
                if key in self.results and self.results[key].category == EvalCategory.INFRA_ERROR]

    def as_dict(self) -> TaskCandidatesSummary:
        rows: list[CandidateRow] = []
        for key in self.keys:
            result = self.results.get(key) or EvalResult()
            rows.append({"key": key, "votes": result.votes, "rollouts": result.rollouts,
                         "resolved": result.resolved, "category": result.category})
        return {"instance_id": self.instance_id, "error": self.error, "candidates": rows,
                "total": len(self.keys), "resolved": len(self.resolved), "infra_error": len(self.infra_errors)}


@dataclass
class CandidatesSummary:
    run_dir: Path
    tasks: dict[str, TaskCandidates] = field(default_factory=dict)  # instance id -> its candidates
    no_pool: list[str] = field(default_factory=list)  # run tasks that have not reached the junior stage's pool
    unknown: list[str] = field(default_factory=list)  # run tasks not in the dataset given
    scored_now: int = 0

    @property
    def failed(self) -> dict[str, str]:
        return {i: t.error for i, t in self.tasks.items() if t.error}

    @property
    def skipped(self) -> int:
        return sum(len(t.skipped) for t in self.tasks.values())

    @property
    def candidates(self) -> int:
        return sum(len(t.keys) for t in self.tasks.values())

    @property
    def resolved(self) -> int:
        return sum(len(t.resolved) for t in self.tasks.values())

    @property
    def infra_errors(self) -> int:
        return sum(len(t.infra_errors) for t in self.tasks.values())

    def as_dict(self) -> CandidatesSummaryData:
        return {"run": str(self.run_dir), "tasks": len(self.tasks), "candidates": self.candidates,
                "scored_now": self.scored_now, "skipped": self.skipped, "resolved": self.resolved,
                "infra_error": self.infra_errors, "no_pool": self.no_pool, "unknown": self.unknown,
                "failed": self.failed, "by_task": {i: t.as_dict() for i, t in sorted(self.tasks.items())}}


@dataclass
class CandidatesPlan:
    summary: CandidatesSummary
    todo: list[CandidateJob]


def read_pool(path: Path) -> list[Candidate]:
    """The candidates of a pool.json (pipeline.records.Pool), checked: MalformedPool says what is wrong with it."""
    read = read_json(path)
    if read.problem is not None:
        json_problem = read.problem.removeprefix("not valid JSON, ")
        raise MalformedPool(f"{path} is not JSON: {json_problem}" if json_problem != read.problem
                            else f"{path} cannot be read: {read.problem}")
    data = read.data
    if not isinstance(data, dict) or not isinstance(data.get("candidates"), list):
        raise MalformedPool(f"{path} has no \"candidates\" list")
    for number, candidate in enumerate(data["candidates"]):
        if not isinstance(candidate, dict):
            raise MalformedPool(f"{path}: candidate {number} is not an object")
    pool = Pool.from_data(data, path)
    if isinstance(pool, Unreadable):
        raise MalformedPool(f"{path} is {pool.why}")
    seen = set()
    for number, candidate in enumerate(pool.candidates):
        where, key = f"{path}: candidate {number}", candidate.key
        if not is_candidate_key(key):
            raise MalformedPool(f"{where} has no usable \"key\" (letters, digits, '.', '_', '-'): {key!r}")
        if key in seen:
            raise MalformedPool(f"{where}: key {key} appears twice")
        seen.add(key)
        if not isinstance(candidate.patch, str) or not candidate.patch.strip():
            raise MalformedPool(f"{where} ({key}) has no \"patch\" text")
    return list(pool.candidates)


def plan_candidates(run_dir: Path, tasks: list[Task], redo: bool = False) -> CandidatesPlan:
    """What there is to score in the run at ``run_dir``: every task folder of the run that the dataset (``tasks``)
    knows, its pool's candidates, and the results earlier invocations left (kept unless ``redo``)."""
    layout = RunLayout(run_dir)
    summary = CandidatesSummary(run_dir=run_dir)
    by_id = {task.instance_id: task for task in tasks}
    folders = sorted(p.name for p in layout.tasks.iterdir() if p.is_dir()) if layout.tasks.is_dir() else []
    todo = []
    for instance_id in folders:
        if instance_id not in by_id:
            summary.unknown.append(instance_id)
            continue
        paths = layout.task(instance_id)
        pool_file = paths.junior_files.pool
        if not pool_file.exists():
            summary.no_pool.append(instance_id)
            continue
        entry = summary.tasks[instance_id] = TaskCandidates(instance_id)
        try:
            candidates = read_pool(pool_file)
        except MalformedPool as error:
            entry.error = str(error)
            continue
        for candidate in candidates:
            key = candidate.key
            entry.keys.append(key)
            previous = read_result(paths.candidate_result(key))
            if has_verdict(previous) and not redo:
                entry.results[key] = previous
                entry.skipped.append(key)
                continue
            todo.append(CandidateJob(task=by_id[instance_id], paths=paths, key=key, patch=candidate.patch,
                                     votes=candidate.votes, rollouts=candidate.rollouts))
    return CandidatesPlan(summary, todo)


def score_candidates(plan: CandidatesPlan, settings: EvalSettings, *, workers: int = 2, attempts: int = 1,
                     show_progress: bool = True) -> CandidatesSummary:
    """Score the plan's candidates, ``workers`` at a time; each result.json is written as soon as it is known, so a
    stop loses nothing already scored. Writes every task's candidates/summary.json."""
    summary = plan.summary
    lock = threading.Lock()

    def one(job: CandidateJob) -> None:
        result = score_one(job.task, job.patch, job.paths.candidates / job.key, settings, attempts)
        with lock:
            record_candidate(summary, job, result)

    try:
        run_with_progress("candidates", plan.todo, one, workers=workers, total=len(plan.todo),
                          describe=lambda: f"{summary.resolved} resolve", show=show_progress)
    finally:  # also on a stop: the summaries say what was scored so far
        write_task_summaries(summary)
    return summary


def record_candidate(summary: CandidatesSummary, job: CandidateJob, result: EvalResult) -> None:
    """One candidate's verdict: eval's record plus the candidate's key, votes and rollouts, as its result.json and
    in ``summary`` (an infra_error too: it is scored again on the next invocation)."""
    result.key, result.votes, result.rollouts = job.key, job.votes, job.rollouts
    result = EvalResult.of(result.to_dict())  # checked as its file is
    result.write(job.paths.candidate_result(job.key))
    summary.tasks[job.task.instance_id].results[job.key] = result
    summary.scored_now += 1


def write_task_summaries(summary: CandidatesSummary) -> None:
    for instance_id, entry in summary.tasks.items():
        write_json_atomic(RunLayout(summary.run_dir).task(instance_id).candidates_summary, entry.as_dict())


def run_containers(run_dir: Path) -> dict[str, Any]:
    """The run's ``containers`` settings from its config.yaml ({} when it has none or it cannot be read), so that
    candidates are scored in the image and on the platform the run's agents had."""
    import yaml

    try:
        config = yaml.safe_load(RunLayout(run_dir).config.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    containers = config.get("containers") if isinstance(config, dict) else None
    return containers if isinstance(containers, dict) else {}


def summary_lines(summary: CandidatesSummary) -> list[str]:
    """The run-level summary ``swepipe eval --candidates`` prints, one line each."""
    lines = [f"run {summary.run_dir}: {len(summary.tasks)} task(s) with a pool, {summary.candidates} candidate(s): "
             f"{summary.scored_now} scored now, {summary.skipped} already had a verdict (--redo to score them "
             f"again); {summary.resolved} resolve"
             + (f", {summary.infra_errors} could not be scored (infra_error; rerun to retry)"
                if summary.infra_errors else "")]
    for instance_id, entry in sorted(summary.tasks.items()):
        if entry.error:
            lines.append(f"  {instance_id}: FAILED, pool not scored: {entry.error}")
            continue
        counted = f"{len(entry.resolved)} of {len(entry.keys)} candidates resolve"
        if entry.infra_errors:
            counted += f" ({len(entry.infra_errors)} infra_error)"
        if entry.resolved:
            counted += f": {', '.join(entry.resolved)}"
        lines.append(f"  {instance_id}: {counted}")
    if summary.no_pool:
        lines.append(f"no {TASK.relative(TASK.junior_files.pool)} yet (skipped): {', '.join(summary.no_pool)}")
    if summary.unknown:
        lines.append(f"not in the dataset (skipped; pass the run's --dataset): {', '.join(summary.unknown)}")
    return lines
