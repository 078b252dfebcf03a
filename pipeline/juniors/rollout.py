"""One junior rollout: a sanitised container, the ReAct loop, and the candidate `git diff`."""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path

from pipeline.agent.loop import AgentLimits, run_agent
from pipeline.errors import SwepipeError
from pipeline.storage import write_json_atomic
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.prompts import render_task_prompt
from pipeline.tasks import Task


@dataclass
class RolloutSettings:
    image: str
    run_id: str
    limits: AgentLimits
    temperatures: list[float]
    seed: int = 0
    per_rollout_budget: float | None = None
    platform: str | None = None
    cpus: float | None = None
    memory: str | None = None
    network: bool = False


def rollout_path(directory: Path, index: int) -> Path:
    return directory / f"rollout-{index:02d}.json"


def run_rollout(task: Task, index: int, client: ModelClient, task_budget: Budget, settings: RolloutSettings,
                directory: Path) -> dict:
    """Run rollout ``index`` and write ``rollout-NN.json``; failures are recorded, never raised."""
    from pipeline.config import Containers
    from pipeline.runtime.factory import open_runtime

    name = f"rollout-{index:02d}"
    path = rollout_path(directory, index)
    budget = task_budget.child(f"{name} of {task.instance_id}", settings.per_rollout_budget)
    temperature = settings.temperatures[index % len(settings.temperatures)] if settings.temperatures else None
    record = {"instance_id": task.instance_id, "index": index, "model": client.spec.model,
              "temperature": temperature, "seed": settings.seed + index, "patch": "", "patch_source": None}
    runtime = None
    try:
        runtime = open_runtime(task, name, Containers(platform=settings.platform, cpus=settings.cpus,
                                                     memory=settings.memory, network=settings.network),
                               run_id=settings.run_id, image_template=settings.image, background=True)
        agent = run_agent(client, runtime, render_task_prompt(task), budget, settings.limits, name=name,
                          agent_index=index, temperature=temperature, seed=settings.seed + index,
                          trajectory_path=directory / f"{name}.trajectory.json")
        record.update(exit_reason=agent.exit_reason, error=agent.error, trajectory=agent.to_dict())
        _take_patch(runtime, record)
    except SwepipeError as error:
        record.update(exit_reason="runtime_error", error=str(error))
    except Exception as error:  # noqa: BLE001 - one broken rollout must not end the task
        record.update(exit_reason="runtime_error", error=f"{type(error).__name__}: {error}",
                      traceback=traceback.format_exc(limit=8))
    finally:
        if runtime is not None:
            runtime.stop()
    trajectory = record.get("trajectory") or {}
    record.update(cost=trajectory.get("cost", 0.0), input_tokens=trajectory.get("input_tokens", 0),
                  output_tokens=trajectory.get("output_tokens", 0), seconds=trajectory.get("seconds", 0.0),
                  steps=len(trajectory.get("steps", [])))
    write_json_atomic(path, record)
    (directory / f"{name}.trajectory.json").unlink(missing_ok=True)  # now inside the rollout record
    return record


def _take_patch(runtime, record: dict) -> None:
    """The candidate is the working tree's diff, whatever ended the rollout."""
    try:
        record["patch"] = runtime.diff()
        record["patch_source"] = "git diff"
    except SwepipeError as error:
        record["patch_error"] = str(error)
