"""Reading one run directory (README, "A run on disk") into plain records; nothing is recomputed here."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pipeline.errors import SwepipeError
from pipeline.models.ledger import Ledger
from pipeline.layout import RunLayout, TaskPaths
from pipeline.tasks import check_instance_id

_ROLLOUT = re.compile(r"^rollout-(\d+)\.json$")
_ROLLOUT_FIELDS = ("index", "exit_reason", "error", "cost", "seconds", "steps", "reused_from")


@dataclass
class TaskRecord:
    """What a run left on disk for one finished task (a prediction exists)."""

    instance_id: str
    prediction: dict
    eval_result: dict | None = None  # eval/result.json (of the run, or of `swepipe eval` into <run>/eval/<id>/)
    rollouts: list[dict] = field(default_factory=list)  # junior/rollout-NN.json without the trajectory
    pool: dict | None = None  # junior/pool.json
    brief: dict | None = None  # senior/brief.json
    expansion_by_candidate: dict | None = None  # senior/expansion_by_candidate.json
    context_text: str | None = None  # senior/context.md

    @property
    def resolved(self) -> bool | None:
        """The verdict: the prediction's own, else the eval result's; None when never scored (or infra error)."""
        verdict = self.prediction.get("resolved")
        if verdict is not None:
            return bool(verdict)
        if self.eval_result is None or self.eval_result.get("category") == "infra_error":
            return None
        verdict = self.eval_result.get("resolved")
        return None if verdict is None else bool(verdict)

    @property
    def category(self) -> str:
        """Eval category; 'not scored' without a verdict, 'unresolved (no eval result)' with only a False."""
        verdict = self.resolved
        result = self.eval_result or {}
        if result.get("category") and (verdict is None or bool(result.get("resolved")) == verdict):
            return result["category"]  # (a result that contradicts the prediction's verdict is not its category)
        if verdict is None:
            return "not scored"
        return "resolved" if verdict else "unresolved (no eval result)"

    @property
    def fail_to_pass(self) -> tuple[int, int] | None:
        """(passed, required) FAIL_TO_PASS tests from the eval result's per-test outcome; None without one (a run
        scored before results kept per-test outcomes, an infrastructure error, a result that contradicts the
        prediction's verdict, a task with no FAIL_TO_PASS test)."""
        return self.tests_passed(("FAIL_TO_PASS",))

    @property
    def reward(self) -> tuple[int, int] | None:
        """The study's reward as (passed, required) over FAIL_TO_PASS and PASS_TO_PASS together; None as for
        ``fail_to_pass`` (and when either list is missing)."""
        return self.tests_passed(("FAIL_TO_PASS", "PASS_TO_PASS"))

    def tests_passed(self, kinds: tuple[str, ...]) -> tuple[int, int] | None:
        """(passed, required) over the eval result's per-test outcomes of ``kinds``: the one reader of them."""
        result = self.eval_result
        if not isinstance(result, dict) or result.get("category") == "infra_error":
            return None
        verdict = self.resolved
        if verdict is not None and result.get("resolved") is not None and bool(result["resolved"]) != verdict:
            return None
        passed = required = 0
        for kind in kinds:
            outcome = result.get(kind)
            if not isinstance(outcome, dict) or not isinstance(outcome.get("passed"), list):
                return None
            groups = [outcome.get(group) or [] for group in ("passed", "failed", "missing")]
            if not all(isinstance(group, list) for group in groups):
                return None
            passed += len(groups[0])
            required += sum(len(group) for group in groups)
        return (passed, required) if required else None

    def cost(self, stage: str) -> float:
        return _number(self._costs.get(stage))

    @property
    def total_cost(self) -> float:
        cost = self._costs
        if _is_number(cost.get("total")):
            return float(cost["total"])
        return float(sum(v for k, v in cost.items() if k != "total" and _is_number(v)))

    @property
    def seconds(self) -> float:
        seconds = self.prediction.get("seconds")
        return float(sum(v for v in seconds.values() if _is_number(v))) if isinstance(seconds, dict) else 0.0

    @property
    def _costs(self) -> dict:
        cost = self.prediction.get("cost")
        return cost if isinstance(cost, dict) else {}


@dataclass
class RunData:
    root: Path
    tasks: list[TaskRecord]
    config: dict = field(default_factory=dict)
    unfinished: list[str] = field(default_factory=list)  # task directories without a prediction yet
    refused: dict[str, str] = field(default_factory=dict)  # instance id -> why it cannot be one (left out)

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def strategies(self) -> list[str]:
        return sorted({t.prediction.get("strategy") or "?" for t in self.tasks})


def load_run(path: str | Path) -> RunData:
    """Every finished task of the run at ``path``; a missing or unreadable artefact is just left as None."""
    root = Path(path)
    if not root.is_dir():
        raise SwepipeError(f"run directory {root} does not exist (pass runs/<run-id>)")
    layout = RunLayout(root)
    predictions, refused = _checked(layout.finished())
    tasks = [_task(layout, root, instance_id, prediction) for instance_id, prediction in sorted(predictions.items())]
    task_dirs = sorted(p.name for p in (root / "tasks").iterdir() if p.is_dir()) if (root / "tasks").is_dir() else []
    unfinished, refused_dirs = _checked({name: None for name in task_dirs if name not in predictions})
    refused.update(refused_dirs)
    for instance_id, problem in refused.items():
        print(f"swepipe: {root}: {problem}; left out of the report (a run directory's files are read as "
              "untrusted input)", file=sys.stderr, flush=True)
    return RunData(root=root, tasks=tasks, config=_read_yaml(layout.config), unfinished=list(unfinished),
                   refused=refused)


def _checked(by_id: dict) -> tuple[dict, dict[str, str]]:
    """``by_id`` without the ids that are no safe instance id (a plain file name, as a dataset's must be: such an
    id would name files outside the report's folder), and those ids with why."""
    kept, refused = {}, {}
    for instance_id, value in by_id.items():
        try:
            kept[check_instance_id(instance_id)] = value
        except ValueError as error:
            refused[str(instance_id)] = f"instance id {error}"
    return kept, refused


def _task(layout: RunLayout, root: Path, instance_id: str, prediction: dict) -> TaskRecord:
    paths = layout.task(instance_id)
    eval_result = _read_json(paths.eval / "result.json")
    if eval_result is None:
        eval_result = _read_json(root / "eval" / instance_id / "result.json")  # `swepipe eval`'s default place
    context = paths.senior / "context.md"
    if not isinstance(prediction.get("cost"), dict):
        prediction = {**prediction, **_ledger_spend(paths.ledger)}
    return TaskRecord(
        instance_id=instance_id, prediction=prediction, eval_result=eval_result, rollouts=_rollouts(paths),
        pool=_read_json(paths.junior / "pool.json"), brief=_read_json(paths.senior / "brief.json"),
        expansion_by_candidate=_read_json(paths.senior / "expansion_by_candidate.json"),
        context_text=context.read_text(encoding="utf-8", errors="replace") if context.is_file() else None)


def _ledger_spend(path: Path) -> dict:
    """Cost and tokens by stage from the task's ledger, for predictions that do not carry them."""
    cost: dict[str, float] = {}
    tokens: dict[str, dict[str, int]] = {}
    for row in Ledger.read(path):
        cost[row.stage] = cost.get(row.stage, 0.0) + row.cost
        used = tokens.setdefault(row.stage, {"input": 0, "cached": 0, "output": 0})
        used["input"] += row.input_tokens
        used["cached"] += row.cached_tokens
        used["output"] += row.output_tokens
    cost = {stage: round(value, 8) for stage, value in cost.items()}
    return {"cost": {**cost, "total": round(sum(cost.values()), 8)}, "tokens": tokens, "cost_from": "ledger"}


def _rollouts(paths: TaskPaths) -> list[dict]:
    if not paths.junior.is_dir():
        return []
    found = []
    for path in sorted(paths.junior.iterdir()):
        match = _ROLLOUT.match(path.name)
        record = _read_json(path) if match else None
        if isinstance(record, dict):
            kept = {key: record.get(key) for key in _ROLLOUT_FIELDS}
            kept["index"] = int(match.group(1)) if kept["index"] is None else kept["index"]
            found.append(kept)
    return sorted(found, key=lambda r: r["index"])


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value) -> float:
    """A number read back from a run file; anything else (a file someone else wrote may hold any text) is 0."""
    return float(value) if _is_number(value) else 0.0


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}
