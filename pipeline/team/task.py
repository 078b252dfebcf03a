"""The team strategy for one task: a lead and its workers in one container; the final diff is the prediction."""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable

from pipeline.errors import RuntimeUnavailable
from pipeline.models.client import ModelClient
from pipeline.models.ledger import Ledger
from pipeline.prompts import render_task_prompt
from pipeline.run.task import RunContext, score_prediction, task_books
from pipeline.runtime.base import Runtime
from pipeline.storage import write_json_atomic
from pipeline.tasks import Task
from pipeline.team.lead import run_team
from pipeline.team.roster import TeamSettings

ROLES = ("lead", "worker")


def run_team_task(task: Task, ctx: RunContext, runtime_factory: Callable[[], Runtime] | None = None) -> dict:
    """Writes tasks/<id>/team/{lead,worker-N}.trajectory.json, delegations.json, messages.json, result.json
    and patch.diff; returns the prediction. ``runtime_factory`` replaces the task's container (tests)."""
    paths, ledger, budget = task_books(task, ctx, "team")
    directory = paths.root / "team"
    cfg = ctx.config
    prediction = {"instance_id": task.instance_id, "model_patch": "", "strategy": "team", "source": "none",
                  "models": {role: cfg.model_for(role).model for role in ROLES}, "error": None}
    started = time.monotonic()
    done = directory / "result.json"
    try:
        if done.exists():
            result = json.loads(done.read_text())
        else:
            scope = f"{ctx.layout.run_id}/{task.instance_id}"
            lead, worker = (ModelClient(cfg.model_for(role), role, ledger, stage="team", task=task.instance_id,
                                        scope=scope) for role in ROLES)
            runtime = (runtime_factory or _container(task, ctx))()
            try:
                result = run_team(render_task_prompt(task), runtime, lead, worker, budget,
                                  TeamSettings.from_config(cfg), directory)
            finally:
                runtime.stop()
            (directory / "patch.diff").write_text(result["patch"], encoding="utf-8")
            write_json_atomic(done, result)
        prediction.update(model_patch=result["patch"], source="team" if result["patch"].strip() else "none",
                          error=result.get("error"), exit_reason=result["exit_reason"],
                          workers=result.get("workers", 0), delegations=result.get("delegations"))
    except Exception as error:  # noqa: BLE001 - recorded for this task; the run goes on
        prediction["error"] = f"team: {type(error).__name__}: {error}"
        prediction["infra_error"] = isinstance(error, RuntimeUnavailable)  # Docker trouble: retried by a rerun
        (paths.root / "error.txt").write_text(traceback.format_exc(), encoding="utf-8")
    prediction.update(team_spend(Ledger.read(paths.ledger)), seconds={"team": round(time.monotonic() - started, 2)})
    if ctx.evaluation is not None:
        prediction["resolved"] = score_prediction(task, prediction["model_patch"], paths, ctx.evaluation)
    return prediction


def team_spend(rows) -> dict:
    """Dollars and tokens of the lead and of the workers, from the task's ledger."""
    cost = {role: 0.0 for role in ROLES}
    tokens = {role: {"input": 0, "cached": 0, "output": 0} for role in ROLES}
    for row in rows:
        if row.stage == "team" and row.role in cost:
            cost[row.role] += row.cost
            tokens[row.role]["input"] += row.input_tokens
            tokens[row.role]["cached"] += row.cached_tokens
            tokens[row.role]["output"] += row.output_tokens
    cost = {role: round(value, 8) for role, value in cost.items()}
    return {"cost": {**cost, "total": round(sum(cost.values()), 8)}, "tokens": tokens}


def _container(task: Task, ctx: RunContext) -> Callable[[], Runtime]:
    from pipeline.runtime.factory import open_runtime

    cfg = ctx.config

    def start() -> Runtime:
        return open_runtime(task, "team", cfg.containers, run_id=ctx.layout.run_id,
                            image_template=ctx.image_template, background=True)

    return start
