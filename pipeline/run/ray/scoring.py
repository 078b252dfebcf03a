"""Scoring on a Ray cluster (``swepipe eval --executor ray``): one Ray task per instance, holding one docker_slot.

Each Ray task scores one prediction as the thread path does (``pipeline.evaluation.batch.score_one``: the official
protocol in a fresh container of the task's image, reruns for ``--attempts``), in a scratch folder on its node,
with the run scripts and Dockerfiles the driver shipped; its artefacts go back to the driver through the run's
write queue (pipeline.run.ray.driver), and the driver alone writes the output folder: the artefacts, then
``result.json`` once they are all in place, so an instance with a result.json is whole and a rerun skips it. A
scoring whose node dies is run again elsewhere (a few times at most, then recorded as infra_error). Container
limits are sized on the node, from its machine and its docker_slots (each result.json records them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from pipeline.control import stopping
from pipeline.errors import InfrastructureFault
from pipeline.evaluation.batch import (
    EvalSummary,
    _rate,
    finish_eval,
    infra_error,
    plan_eval,
    record_result,
    score_one,
)
from pipeline.evaluation.runner import EvalSettings
from pipeline.interop.predictions import PatchToScore
from pipeline.run.ray.connect import RESOURCE, connect
from pipeline.run.ray.driver import Item, RayDriver, eval_inputs
from pipeline.run.ray.node import AttemptOutcome, ended_by, local_eval_settings, node_sizing, on_node, stopped_here
from pipeline.runtime.limits import container_limits
from pipeline.tasks import Task

LABEL_SUFFIX = "-eval"


@dataclasses.dataclass
class ScoringShipment:
    """One attempt of one scoring, sent with its Ray task."""

    task: Task
    patch: str
    settings: EvalSettings  # the driver's; run scripts and Dockerfiles come as eval_files
    attempts: int
    key: str
    session: str  # the driver's nonce (pipeline.run.ray.node)
    folder: str  # where the scoring's files go, relative to the driver's output folder
    eval_files: dict[str, bytes]
    queue: object
    stop: object


def score_on_node(shipment: ScoringShipment) -> AttemptOutcome:
    """A Ray task's body: the instance scored in a scratch folder, its artefacts sent to the driver; the result
    record comes back as the task's value (the driver writes result.json). It never raises (``ended_by``)."""
    task, settings = shipment.task, shipment.settings
    try:
        with on_node(settings.run_id, shipment.session, shipment.key, shipment.queue, shipment.stop, {},
                     shipment.folder, name="scoring") as node:
            local = local_eval_settings(settings, shipment.eval_files, node.base)
            if local.limits is None:  # sized here, for the containers this node runs at once
                local = dataclasses.replace(local, limits=container_limits(
                    concurrent=node_sizing(node.node_id)["docker_slots"]))
            try:
                result = score_one(task, shipment.patch, node.scratch / shipment.folder, local, shipment.attempts)
            except stopping.Stopped:
                return stopped_here(node.node_id)
            return {"result": result, "node_id": node.node_id}
    except (stopping.Stopped, InfrastructureFault) as error:
        return ended_by(error)


Summary = TypeVar("Summary")


class RayScorings(RayDriver[Item], Generic[Item, Summary]):
    """Scorings, each a Ray task holding one docker_slot: an ``Item`` is what one scores (``RayEval``: a task and
    its patch; pipeline.run.ray.candidates: a junior candidate), the ``Summary`` what their results add up to."""

    noun = "scoring"

    def __init__(self, ray: Any, items: list[Item], summary: Summary, output_dir: Path, settings: EvalSettings,
                 attempts: int, show_progress: bool, log: Callable[[str], None] | None = None) -> None:
        self.summary, self.output_dir, self.settings, self.scoring_attempts = summary, output_dir, settings, attempts
        super().__init__(ray, output_dir, settings.run_id, 1, show_progress, log, has_work=bool(items))
        self.remote = ray.remote(score_on_node).options(
            num_cpus=0, resources={RESOURCE: 1}, max_retries=0, retry_exceptions=False, scheduling_strategy="SPREAD")

    def stage_of(self, parts: list[str]) -> str | None:
        return "scoring"


class RayEval(RayScorings[tuple[Task, str], EvalSummary]):
    label = "eval"

    def item_id(self, item: tuple[Task, str]) -> str:
        return item[0].instance_id

    def ship(self, item: tuple[Task, str], key: str) -> Any:
        task, patch = item
        return self.remote.remote(ScoringShipment(
            task=task, patch=patch, settings=self.settings, attempts=self.scoring_attempts, key=key,
            session=self.session, folder=task.instance_id, eval_files=eval_inputs(task, self.settings),
            queue=self.queue, stop=self.stop_flag))

    def summary_line(self) -> str:
        return _rate(self.summary)

    def completed(self, item: tuple[Task, str], result: AttemptOutcome) -> None:
        record = result["result"]
        record.node = self.node_label(result.get("node_id"))
        record_result(self.output_dir, self.summary, record)

    def give_up(self, item: tuple[Task, str], error: str) -> None:
        record_result(self.output_dir, self.summary, infra_error(item[0].instance_id, error))


def evaluate_predictions_on_ray(predictions: list[PatchToScore], tasks: list[Task], output_dir: Path,
                                settings: EvalSettings, *, redo: bool = False, attempts: int = 1,
                                show_progress: bool = True, address: str = "auto") -> EvalSummary:
    """``evaluate_predictions`` on the cluster at ``address``: the same plan, files and summary."""
    summary, todo = plan_eval(predictions, tasks, output_dir, redo)
    by_id = {task.instance_id: task for task in tasks}
    evaluate_on_ray([(by_id[p.instance_id], p.patch) for p in todo], summary, output_dir, settings,
                    attempts=attempts, show_progress=show_progress, address=address)
    finish_eval(output_dir, summary)
    return summary


def evaluate_on_ray(items: list[tuple[Task, str]], summary: EvalSummary, output_dir: Path, settings: EvalSettings,
                    *, attempts: int = 1, show_progress: bool = True, address: str = "auto",
                    log: Callable[[str], None] | None = None) -> None:
    """Score ``items`` (task, patch) on the cluster at ``address`` into ``output_dir``, filling ``summary``;
    KeyboardInterrupt once the cluster's scoring has stopped (Ctrl-C, SIGTERM), as on one machine."""
    ray = connect(address)
    # Its own container label: a stop, or the cleanup at the end, removes this scoring's containers on every node,
    # never those of a run of the same id still going on the cluster (`swepipe cleanup --run-id <id>-eval`).
    settings = dataclasses.replace(settings, run_id=f"{settings.run_id}{LABEL_SUFFIX}")
    driver = RayEval(ray, items, summary, output_dir, settings, attempts, show_progress, log)
    output_dir.mkdir(parents=True, exist_ok=True)
    if not driver.execute(items, total=len(items)):
        raise KeyboardInterrupt
