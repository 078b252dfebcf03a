"""The solo baseline: one ReAct agent, one model, end to end; its final diff is the prediction."""

from __future__ import annotations

import json
import time
import traceback

from pipeline.models.client import ModelClient
from pipeline.models.ledger import Ledger
from pipeline.prompts import render_task_prompt
from pipeline.run.task import RunContext, score_prediction, task_books
from pipeline.storage import write_json_atomic
from pipeline.tasks import Task


def run_solo_task(task: Task, ctx: RunContext) -> dict:
    """Writes tasks/<id>/solo/{trajectory.json, result.json, patch.diff} and returns the prediction."""
    from pipeline.agent.loop import run_agent
    from pipeline.runtime.factory import open_runtime

    paths, ledger, budget = task_books(task, ctx, "solo")
    directory = paths.root / "solo"
    prediction = {"instance_id": task.instance_id, "model_patch": "", "strategy": "solo", "source": "none",
                  "models": {"solo": ctx.config.model_for("solo").model}, "error": None}
    started = time.monotonic()
    done = directory / "result.json"
    try:
        if done.exists():
            result = json.loads(done.read_text())
        else:
            client = ModelClient(ctx.config.model_for("solo"), "solo", ledger, task=task.instance_id,
                                 scope=f"{ctx.layout.run_id}/{task.instance_id}")
            cfg = ctx.config
            runtime = open_runtime(task, "solo", cfg.containers, run_id=ctx.layout.run_id,
                                   image_template=ctx.image_template, background=True)
            try:
                agent = run_agent(client, runtime, render_task_prompt(task), budget, cfg.limits.agent_limits(),
                                  name="solo", trajectory_path=directory / "trajectory.json")
                patch = runtime.diff()
            finally:
                runtime.stop()
            result = {"exit_reason": agent.exit_reason, "error": agent.error, "steps": len(agent.steps),
                      "cost": agent.cost, "patch": patch}
            (directory / "patch.diff").write_text(patch, encoding="utf-8")
            write_json_atomic(done, result)
        prediction.update(model_patch=result["patch"], source="solo" if result["patch"].strip() else "none",
                          error=result.get("error"), exit_reason=result["exit_reason"])
    except Exception as error:  # noqa: BLE001 - recorded for this task; the run goes on
        prediction["error"] = f"solo: {type(error).__name__}: {error}"
        (paths.root / "error.txt").write_text(traceback.format_exc(), encoding="utf-8")
    rows = Ledger.read(paths.ledger)
    cost = round(sum(r.cost for r in rows), 8)
    prediction.update(cost={"solo": cost, "total": cost},
                      tokens={"solo": {"input": sum(r.input_tokens for r in rows),
                                       "cached": sum(r.cached_tokens for r in rows),
                                       "output": sum(r.output_tokens for r in rows)}},
                      seconds={"solo": round(time.monotonic() - started, 2)})
    if ctx.evaluation is not None:
        prediction["resolved"] = score_prediction(task, prediction["model_patch"], paths, ctx.evaluation)
    return prediction
