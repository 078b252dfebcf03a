"""One task through the four stages; each stage's output on disk is reused, never paid for twice."""

from __future__ import annotations

import json
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.config import RunConfig
from pipeline.evaluation.runner import EvalSettings, evaluate
from pipeline.juniors.pool import CandidatePool, build_pool
from pipeline.juniors.rollout import rollout_path
from pipeline.juniors.stage import junior_settings, run_juniors
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.models.ledger import Ledger
from pipeline.principal.stage import PrincipalSettings, run_principal
from pipeline.run.layout import RunLayout, TaskPaths
from pipeline.errors import RuntimeUnavailable
from pipeline.runtime.images import ensure_image, image_name
from pipeline.senior.stage import SeniorSettings, load_brief, run_senior
from pipeline.storage import write_json_atomic
from pipeline.tasks import Task

STAGES = ("junior", "senior", "principal")


@dataclass
class RunContext:
    config: RunConfig
    layout: RunLayout
    run_budget: Budget
    image_template: str
    senior: SeniorSettings
    principal: PrincipalSettings
    evaluation: EvalSettings | None = None
    reuse_juniors_from: RunLayout | None = None
    models: dict[str, str] = field(default_factory=dict)
    strategy: str = "pipeline"  # or "solo"
    local_server: object | None = None  # a LocalModelServer this run started, stopped by close()

    def close(self) -> None:
        if self.local_server is not None:
            self.local_server.stop()


def task_books(task: Task, ctx: RunContext, folder: str | None = None) -> tuple[TaskPaths, Ledger, Budget]:
    """A task's paths (its ``folder`` created), its ledger and its budget under the run's: every strategy's start."""
    paths = ctx.layout.task(task.instance_id)
    (paths.root / folder if folder else paths.root).mkdir(parents=True, exist_ok=True)
    budget = ctx.run_budget.child(f"task {task.instance_id}", ctx.config.budgets.per_task)
    return paths, Ledger(paths.ledger), budget


def run_task(task: Task, ctx: RunContext) -> dict:
    """The prediction record for ``task``; a failing stage ends the task with its reason recorded."""
    paths, ledger, budget = task_books(task, ctx)
    seconds: dict[str, float] = {}
    prediction = {"instance_id": task.instance_id, "model_patch": "", "strategy": "pipeline", "source": "none",
                  "models": ctx.models, "error": None, "juniors_reused_from": None}
    records: list[dict] = []
    stage = "junior"
    try:
        # An image that cannot be had fails the task before any model is paid.
        ensure_image(image_name(ctx.image_template, task.to_row()), platform=ctx.config.containers.platform,
                     show_progress=False)
        records = _juniors(task, ctx, paths, ledger, budget, seconds, prediction)
        pool = build_pool(task.instance_id, records)
        write_json_atomic(paths.junior / "pool.json", pool.to_dict())
        stage = "senior"
        brief = _senior(task, ctx, paths, ledger, budget, pool, seconds)
        stage = "principal"
        result = _principal(task, ctx, paths, ledger, budget, pool, brief, seconds)
        prediction.update(model_patch=result["patch"], source=result["source"], error=result["error"])
    except Exception as error:  # noqa: BLE001 - one task's failure is recorded; the run goes on
        prediction["error"] = f"{stage} stage: {type(error).__name__}: {error}"
        # Docker trouble is not an answer: the task stays unfinished, so a rerun tries it again.
        prediction["infra_error"] = isinstance(error, RuntimeUnavailable)
        (paths.root / "error.txt").write_text(traceback.format_exc(), encoding="utf-8")
    prediction.update(_spend(Ledger.read(paths.ledger), records), seconds=seconds)
    if ctx.evaluation is not None:
        prediction["resolved"] = score_prediction(task, prediction["model_patch"], paths, ctx.evaluation)
    return prediction


def _juniors(task, ctx, paths: TaskPaths, ledger, budget, seconds, prediction) -> list[dict]:
    cfg = ctx.config
    if ctx.reuse_juniors_from is not None:
        copied = _copy_rollouts(ctx.reuse_juniors_from.task(task.instance_id).junior, paths.junior, cfg.juniors.k)
        if copied:
            prediction["juniors_reused_from"] = ctx.reuse_juniors_from.run_id
    client = ModelClient(cfg.model_for("junior"), "junior", ledger, task=task.instance_id,
                         scope=f"{ctx.layout.run_id}/{task.instance_id}")
    started = time.monotonic()
    settings = junior_settings(cfg, image_name(ctx.image_template, task.to_row()), ctx.layout.run_id)
    records = run_juniors(task, cfg.juniors.k, client, budget, settings, paths.junior)
    seconds["junior"] = round(time.monotonic() - started, 2)
    return records


def _senior(task, ctx, paths: TaskPaths, ledger, budget, pool: CandidatePool, seconds) -> dict:
    from pipeline.runtime.factory import open_runtime

    brief = load_brief(paths.senior)
    if brief is not None:
        return brief
    cfg = ctx.config
    client = (ModelClient(cfg.models["senior"], "senior", ledger, task=task.instance_id,
                          scope=f"{ctx.layout.run_id}/{task.instance_id}") if "senior" in cfg.models else None)
    started = time.monotonic()
    with open_runtime(task, "senior", cfg.containers, run_id=ctx.layout.run_id, image_template=ctx.image_template,
                      read_only=True) as runtime:
        brief = run_senior(task, pool, client, budget, runtime, ctx.senior, paths.senior)
    seconds["senior"] = round(time.monotonic() - started, 2)
    return brief


def _principal(task, ctx, paths: TaskPaths, ledger, budget, pool, brief: dict, seconds) -> dict:
    from pipeline.runtime.factory import open_runtime

    done = paths.principal / "result.json"
    if done.exists():
        return {**json.loads(done.read_text()), "patch": (paths.principal / "patch.diff").read_text()}
    client = ModelClient(ctx.config.model_for("principal"), "principal", ledger, task=task.instance_id,
                         scope=f"{ctx.layout.run_id}/{task.instance_id}")
    context = (paths.senior / "context.md").read_text(encoding="utf-8")
    started = time.monotonic()
    with open_runtime(task, "principal", ctx.config.containers, run_id=ctx.layout.run_id,
                      image_template=ctx.image_template) as runtime:
        result = run_principal(task, brief, context, pool, client, budget, runtime, ctx.principal, paths.principal)
    seconds["principal"] = round(time.monotonic() - started, 2)
    return result


def _copy_rollouts(source: Path, target: Path, k: int) -> int:
    """Finished rollouts of another run, taken as they are: their cost was paid there."""
    target.mkdir(parents=True, exist_ok=True)
    copied = 0
    for index in range(k):
        theirs, ours = rollout_path(source, index), rollout_path(target, index)
        if theirs.exists() and not ours.exists():
            record = json.loads(theirs.read_text(encoding="utf-8"))
            record["reused_from"] = str(source)
            write_json_atomic(ours, record)
            copied += 1
    return copied


def _spend(rows, records: list[dict]) -> dict:
    """Dollars and tokens per stage. Junior spend comes from the rollouts (reused ones included)."""
    cost = {stage: 0.0 for stage in STAGES}
    tokens = {stage: {"input": 0, "cached": 0, "output": 0} for stage in STAGES}
    for record in records:
        cost["junior"] += record.get("cost", 0.0)
        tokens["junior"]["input"] += record.get("input_tokens", 0)
        tokens["junior"]["output"] += record.get("output_tokens", 0)
    for row in rows:
        if row.stage in ("senior", "principal"):
            cost[row.stage] += row.cost
            tokens[row.stage]["input"] += row.input_tokens
            tokens[row.stage]["cached"] += row.cached_tokens
            tokens[row.stage]["output"] += row.output_tokens
        elif row.stage == "junior":
            tokens["junior"]["cached"] += row.cached_tokens
    cost = {stage: round(value, 8) for stage, value in cost.items()}
    return {"cost": {**cost, "total": round(sum(cost.values()), 8)}, "tokens": tokens}


def score_prediction(task: Task, patch: str, paths: TaskPaths, settings: EvalSettings) -> bool | None:
    """Score with the hidden tests into tasks/<id>/eval (reused when done); None for an infrastructure error."""
    done = paths.eval / "result.json"
    if done.exists():
        return json.loads(done.read_text()).get("resolved")
    result = evaluate(task, patch, paths.eval, settings)
    write_json_atomic(done, result)
    return result["resolved"] if result["category"] != "infra_error" else None
