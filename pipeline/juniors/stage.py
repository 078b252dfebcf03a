"""K rollouts of one task side by side; finished rollouts on disk are reused, not rerun."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from pipeline.juniors.rollout import RolloutSettings, rollout_path, run_rollout
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.tasks import Task


def run_juniors(task: Task, k: int, client: ModelClient, task_budget: Budget, settings: RolloutSettings,
                directory: Path, *, on_done=None) -> list[dict]:
    """Rollouts 0..k-1 for ``task`` in ``directory`` (junior/); returns their records in index order."""
    directory.mkdir(parents=True, exist_ok=True)
    records: dict[int, dict] = {}
    todo = []
    for index in range(k):
        previous = rollout_path(directory, index)
        if previous.exists():
            records[index] = json.loads(previous.read_text(encoding="utf-8"))
        else:
            todo.append(index)
    if todo:
        with ThreadPoolExecutor(max_workers=len(todo), thread_name_prefix=f"junior-{task.instance_id[:20]}") as pool:
            futures = {pool.submit(run_rollout, task, index, client, task_budget, settings, directory): index
                       for index in todo}
            for future in as_completed(futures):
                index = futures[future]
                records[index] = future.result()
                if on_done:
                    on_done(records[index])
    return [records[index] for index in range(k)]


def junior_settings(config, image: str, run_id: str) -> RolloutSettings:
    """Rollout settings from a RunConfig."""
    return RolloutSettings(image=image, run_id=run_id, limits=config.limits.agent_limits(),
                           temperatures=config.juniors.temperatures, seed=config.juniors.seed,
                           per_rollout_budget=config.budgets.per_rollout, platform=config.containers.platform,
                           cpus=config.containers.cpus, memory=config.containers.memory,
                           network=config.containers.network)
