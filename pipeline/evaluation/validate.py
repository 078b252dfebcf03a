"""Checking a dataset's tasks before a model sees them, and which of them can be trusted to score the same twice.

Each task's gold patch and the empty patch are scored ``replicas`` times (replica r gives the tests the seed r, as
SWEPIPE_SCORING_SEED). From those runs every hidden test is, for that task:

- stable: the same outcome on every run of a patch, the one it should have (gold: passes; empty: FAIL_TO_PASS
  fails, PASS_TO_PASS passes);
- flaky: different outcomes on runs of the same patch;
- broken: the same wrong outcome on every run (never passes with the gold patch, or a FAIL_TO_PASS test that
  already passes at the base commit).

A run that hit an infrastructure error has no verdict: it is counted apart (``unevaluable``) and scored again when
the same command runs again. A task is reliable when every replica has a verdict, its gold patch resolved on every
gold run with every test passing, and its FAIL_TO_PASS tests failed on every empty run; reliable.txt lists those.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypedDict

from pipeline.evaluation.batch import has_verdict
from pipeline.evaluation.runner import EvalSettings
from pipeline.interop.predictions import PatchToScore
from pipeline.records import EvalResult
from pipeline.rundir.storage import write_text_atomic
from pipeline.tasks import Task
from pipeline.text.prompts import render_task_prompt

STATUSES = ("reliable", "flaky", "broken", "unevaluable")
PATCHES = ("gold", "empty")
INSTANCES = "instances.jsonl"
RELIABLE = "reliable.txt"
# (patch, should the test pass) -> what it is when it does the opposite on every run
_WRONG = {("gold", True): "not passing with the gold patch", ("empty", True): "PASS_TO_PASS not passing at base",
          ("empty", False): "FAIL_TO_PASS passing at base"}


class PatchRuns(TypedDict):
    resolved: int
    unevaluable: int


class HiddenTestsByOutcome(TypedDict):
    stable: list[str]
    flaky: list[str]
    broken: list[str]


class TaskCheckRow(TypedDict):
    """A task's line of the validation's instances file."""

    instance_id: str
    repo: str
    language: str
    status: str
    replicas: int
    gold: PatchRuns
    empty: PatchRuns
    tests: HiddenTestsByOutcome
    problems: list[str]


@dataclass
class TaskCheck:
    """One task's validation, from its replicas."""

    instance_id: str
    repo: str
    language: str
    replicas: int
    status: str = "unevaluable"
    gold_resolved: int = 0  # gold runs that resolved
    empty_resolved: int = 0  # empty runs that resolved (a sound task has none)
    unevaluable: dict[str, int] = field(default_factory=dict)  # patch -> runs with no verdict
    stable_tests: list[str] = field(default_factory=list)  # right on every run ([] until both patches scored)
    flaky_tests: list[str] = field(default_factory=list)
    broken_tests: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Sound: reliable, and nothing else wrong with it (a hidden test named in the prompt)."""
        return self.status == "reliable" and not self.problems

    def row(self) -> TaskCheckRow:
        return {"instance_id": self.instance_id, "repo": self.repo, "language": self.language,
                "status": self.status, "replicas": self.replicas,
                "gold": {"resolved": self.gold_resolved, "unevaluable": self.unevaluable.get("gold", 0)},
                "empty": {"resolved": self.empty_resolved, "unevaluable": self.unevaluable.get("empty", 0)},
                "tests": {"stable": self.stable_tests, "flaky": self.flaky_tests, "broken": self.broken_tests},
                "problems": self.problems}


def leaked_test_names(task: Task) -> list[str]:
    """Hidden test names (or their last part, e.g. the function) that the agent's prompt mentions."""
    prompt = render_task_prompt(task)
    leaked = []
    for name in task.hidden_test_names:
        last = re.split(r"::| \| |/", name)[-1].strip()
        last = re.sub(r"\[.*\]$", "", last)
        if name in prompt or (len(last) >= 6 and re.search(rf"(?<![\w]){re.escape(last)}(?![\w])", prompt)):
            leaked.append(name)
    return leaked


def replica_dir(output_dir: Path, patch: str, replica: int) -> Path:
    return output_dir / patch / f"r{replica}"


def validate_tasks(tasks: list[Task], settings: EvalSettings, output_dir: Path, *, replicas: int = 1,
                   score: Callable[..., Any] | None = None, workers: int = 2, redo: bool = False,
                   show_progress: bool = True, announce: Callable[[str], None] = lambda _: None) -> list[TaskCheck]:
    """Score each task's gold and empty patch ``replicas`` times into ``output_dir`` (what an earlier session of
    the same command scored is kept unless ``redo``), judge each task, and write instances.jsonl and reliable.txt.

    ``score`` is an executor's ``evaluate_predictions`` (this machine's thread pool by default, or a Ray
    cluster's): the same files either way."""
    if score is None:
        from pipeline.evaluation.batch import evaluate_predictions

        score = evaluate_predictions
    patches = {"gold": [PatchToScore(t.instance_id, t.patch) for t in tasks],
               "empty": [PatchToScore(t.instance_id, "") for t in tasks]}
    # patch -> per replica, by id
    results: dict[str, list[dict[str, EvalResult]]] = {patch: [] for patch in PATCHES}
    for replica in range(1, replicas + 1):
        for patch in PATCHES:
            announce(f"replica {replica}/{replicas}, the {patch} patch: scoring {len(tasks)} task(s)")
            replica_settings = dataclasses.replace(settings, seed=replica,
                                                   run_id=f"{settings.run_id}-{patch}-r{replica}")
            summary = score(patches[patch], tasks, replica_dir(output_dir, patch, replica), replica_settings,
                            workers=workers, redo=redo, attempts=1, show_progress=show_progress)
            results[patch].append(summary.results)  # earlier sessions' results included
            unevaluable = len(tasks) - summary.scored
            announce(f"replica {replica}/{replicas}, the {patch} patch: resolved {summary.resolved} of "
                     f"{summary.scored} scored" + (f", {unevaluable} unevaluable" if unevaluable else "")
                     + (f" ({len(summary.skipped)} scored in an earlier session)" if summary.skipped else ""))
    checks = [judge_task(task, {patch: [scored.get(task.instance_id) for scored in results[patch]]
                                for patch in PATCHES})
              for task in tasks]
    write_validation(output_dir, checks)
    return checks


def judge_task(task: Task, runs: dict[str, list[EvalResult | None]]) -> TaskCheck:
    """One task's check from its gold and empty runs (``runs[patch]``: one result per replica, None or an
    infra_error where it has no verdict)."""
    replicas = len(runs["gold"])
    check = TaskCheck(task.instance_id, task.repo, task.repo_language, replicas)
    scored = {patch: [r for r in results if has_verdict(r)] for patch, results in runs.items()}
    check.unevaluable = {patch: replicas - len(scored[patch]) for patch in PATCHES}
    check.gold_resolved = sum(1 for r in scored["gold"] if r.resolved)
    check.empty_resolved = sum(1 for r in scored["empty"] if r.resolved)
    passing = {patch: {name: [(r.statuses or {}).get(name) == "PASSED" for r in scored[patch]]
                       for name in task.hidden_test_names} for patch in PATCHES}
    should_pass_at_base = set(task.pass_to_pass)
    flaky: set[str] = set()
    broken: dict[str, set[str]] = {}
    for name in task.hidden_test_names:
        for patch, expected in (("gold", True), ("empty", name in should_pass_at_base)):
            outcomes = set(passing[patch][name])
            if len(outcomes) > 1:
                flaky.add(name)
            elif outcomes == {not expected}:
                broken.setdefault(name, set()).add(_WRONG[patch, expected])
    broken = {name: why for name, why in broken.items() if name not in flaky}
    check.flaky_tests, check.broken_tests = sorted(flaky), sorted(broken)
    if all(scored.values()):
        check.stable_tests = sorted(set(task.hidden_test_names) - flaky - broken.keys())
    gold_mixed = 0 < check.gold_resolved < len(scored["gold"])
    if flaky or gold_mixed:
        check.status = "flaky"
    elif broken or (scored["gold"] and not check.gold_resolved) or check.empty_resolved:
        check.status = "broken"
    elif any(check.unevaluable.values()):
        check.status = "unevaluable"
    else:
        check.status = "reliable"
    check.problems = _problems(task, check, runs, broken)
    return check


def _problems(task: Task, check: TaskCheck, runs: dict[str, list[EvalResult | None]],
              broken: dict[str, set[str]]) -> list[str]:
    """What is wrong with the task, in words."""
    problems = []
    gold_scored, empty_scored = (check.replicas - check.unevaluable[patch] for patch in PATCHES)
    if check.gold_resolved < gold_scored:
        unresolved = _first(runs["gold"], lambda r: has_verdict(r) and not r.resolved)
        problems.append(f"gold patch: resolved {check.gold_resolved} of {gold_scored} run(s) ({unresolved})")
    if check.empty_resolved:
        problems.append(f"empty patch: resolved {check.empty_resolved} of {empty_scored} run(s)")
    for patch in PATCHES:
        if check.unevaluable[patch]:
            problems.append(f"{patch} patch: {check.unevaluable[patch]} of {check.replicas} run(s) unevaluable "
                            f"({_first(runs[patch], lambda r: not has_verdict(r))}); run the same command again "
                            "to score them")
    if check.flaky_tests:
        problems.append(f"flaky tests: {', '.join(check.flaky_tests[:3])}")
    for why in _WRONG.values():
        names = sorted(name for name, reasons in broken.items() if why in reasons)
        if names:
            problems.append(f"{why}: {', '.join(names[:3])}")
    leaks = leaked_test_names(task)
    if leaks:
        problems.append(f"prompt mentions hidden tests: {', '.join(leaks[:3])}")
    return problems


def _first(results: list[EvalResult | None], chosen: Callable[[EvalResult | None], bool]) -> str:
    """The category and error of the first of ``results`` that ``chosen`` picks, in a few words."""
    for result in results:
        if chosen(result):
            if not result:
                return "not scored"
            findings = " ".join(f"{f.kind}: {f.detail}" for f in result.integrity or [])
            return " ".join(f"{result.category} {result.error or ''} {findings}".split())[:200]
    return ""


def write_validation(output_dir: Path, checks: list[TaskCheck]) -> None:
    """instances.jsonl (one row per task, by instance id) and reliable.txt (the reliable tasks' ids)."""
    ordered = sorted(checks, key=lambda c: c.instance_id)
    write_text_atomic(output_dir / INSTANCES, "".join(json.dumps(c.row(), sort_keys=True) + "\n" for c in ordered))
    write_text_atomic(output_dir / RELIABLE, "".join(c.instance_id + "\n" for c in ordered if c.status == "reliable"))


def by_repository(checks: list[TaskCheck]) -> list[tuple[str, str, Counter[str]]]:
    """(repository, language, count of each status) for each repository, by name."""
    groups: dict[tuple[str, str], Counter[str]] = {}
    for check in checks:
        groups.setdefault((check.repo, check.language), Counter())[check.status] += 1
    return [(repo, language, counts) for (repo, language), counts in sorted(groups.items())]
