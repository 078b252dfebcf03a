"""Checking that a dataset's tasks are sound: gold resolves, base fails as it should, no test name leaks."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.evaluation.batch import evaluate_predictions
from pipeline.evaluation.predictions import Prediction
from pipeline.evaluation.runner import EvalSettings
from pipeline.prompts import render_task_prompt
from pipeline.tasks import Task


@dataclass
class TaskCheck:
    instance_id: str
    gold_resolves: bool = False
    empty_unresolved: bool = False
    f2p_fail_at_base: bool = False
    p2p_pass_at_base: bool = False
    prompt_clean: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


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


def validate_tasks(tasks: list[Task], settings: EvalSettings, output_dir: Path, workers: int = 2,
                   show_progress: bool = True) -> list[TaskCheck]:
    gold = evaluate_predictions([Prediction(t.instance_id, t.patch) for t in tasks], tasks, output_dir / "gold",
                                settings, workers=workers, redo=True, show_progress=show_progress)
    empty = evaluate_predictions([Prediction(t.instance_id, "") for t in tasks], tasks, output_dir / "empty",
                                 settings, workers=workers, redo=True, show_progress=show_progress)
    checks = []
    for task in tasks:
        check = TaskCheck(task.instance_id)
        with_gold, at_base = gold.results[task.instance_id], empty.results[task.instance_id]
        statuses = at_base.get("statuses", {})
        check.gold_resolves = with_gold["resolved"]
        check.empty_unresolved = not at_base["resolved"] and at_base["category"] != "infra_error"
        passing_f2p = [n for n in task.fail_to_pass if statuses.get(n) == "PASSED"]
        failing_p2p = [n for n in task.pass_to_pass if statuses.get(n) != "PASSED"]
        check.f2p_fail_at_base = check.empty_unresolved and not passing_f2p
        check.p2p_pass_at_base = at_base["category"] != "infra_error" and not failing_p2p
        leaks = leaked_test_names(task)
        check.prompt_clean = not leaks
        if not check.gold_resolves:
            check.problems.append(f"gold patch: {with_gold['category']} {with_gold.get('error', '')}".strip())
        if not check.empty_unresolved:
            check.problems.append(f"empty patch: {at_base['category']} {at_base.get('error', '')}".strip())
        if passing_f2p:
            check.problems.append(f"FAIL_TO_PASS passing at base: {', '.join(passing_f2p[:3])}")
        if failing_p2p and at_base["category"] != "infra_error":
            check.problems.append(f"PASS_TO_PASS not passing at base: {', '.join(failing_p2p[:3])}")
        if leaks:
            check.problems.append(f"prompt mentions hidden tests: {', '.join(leaks[:3])}")
        checks.append(check)
    return checks
