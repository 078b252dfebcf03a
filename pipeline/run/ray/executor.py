"""Running a run's tasks on a Ray cluster (``swepipe run --executor ray``): one Ray task per swepipe task.

The stages do not know where they run: a Ray task calls the same ``run_one_task`` the thread executor
calls, in a scratch copy of the task's folder on its node. What it writes there also goes to the driver
(``pipeline.rundir.storage``'s mirror, through a Ray queue a driver thread drains), and the driver alone writes
the run directory, so no shared filesystem is needed. A task starts from what the driver holds of it (its
folder, shipped with the task), so a task whose node died is run again elsewhere and resumes from its
saved trajectories, paying no conversation position twice.

Ray resources express Docker capacity: each node declares ``docker_slots`` (``ray start
--resources='{"docker_slots": N}'``) and a task holds ``executor.slots_per_task`` of them (default its peak
containers, ``juniors.k``), so no node runs more containers than it declared. The run's budget
(``budgets.per_run``) is one Ray actor every task's budget reserves from; a stop (Ctrl-C, SIGTERM) on the
driver is a flag every worker watches, then the run's containers are removed on every node.

What a run and scoring (pipeline.run.ray.scoring) share: ``on_node`` (pipeline.run.ray.node: a Ray task's scratch
folder whose writes go to the driver) and ``RayDriver`` (pipeline.run.ray.driver: the write queue drained by the
driver, lost nodes, progress, stops, cleanup); joining is pipeline.run.ray.connect, the run's actors
pipeline.run.ray.actors. On each node, container limits the config leaves unset are sized from that node (its
machine and docker_slots, recorded in the task's limits.json), and with ``containers.image_cache_gb`` the node
prunes the run's finished tasks' images after each task (``NodeImages``); before the first task, every node runs
the image preflight (pipeline.run.ray.preflight). Images are not prefetched on nodes: a task pulls its own when
it starts.

``RayExecutor`` is this executor as pipeline.run.executors names it (``executor.kind: ray``): the run here, scoring
(pipeline.run.ray.scoring, pipeline.run.ray.candidates), the image preflight and the cleanup on every node.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import InfrastructureFault, SwepipeError
from pipeline.records import Prediction
from pipeline.run.bookkeeping import RunSummary, plan, record_prediction
from pipeline.run.ray import driver as driver_module
from pipeline.run.ray.actors import RunBudgetKeeper
from pipeline.run.ray.connect import CALL_TIMEOUT, RESOURCE, connect, head_affinity
from pipeline.run.ray.driver import STAGE_FOLDERS, RayDriver, eval_inputs, slots_per_task
from pipeline.run.ray.kept import marker
from pipeline.run.ray.node import AttemptOutcome, TaskShipment, snapshot, work_on_node
from pipeline.run.task import RunSettings, seeded_run_budget
from pipeline.rundir.layout import TaskPaths
from pipeline.rundir.storage import remove, write_json_atomic
from pipeline.tasks import Task

if TYPE_CHECKING:
    from pipeline.evaluation.batch import EvalSummary
    from pipeline.evaluation.candidates import CandidatesPlan, CandidatesSummary
    from pipeline.evaluation.runner import EvalSettings
    from pipeline.interop.predictions import PatchToScore
    from pipeline.settings.config import ExecutorConfig



class RayRun(RayDriver[Task]):
    """The driver of one run on the cluster: submits tasks, applies their writes, records predictions."""

    def __init__(self, ray: Any, tasks: list[Task], run: RunSettings, show_progress: bool,
                 log: Callable[[str], None] | None) -> None:
        self.run = run
        self.summary, self.todo = plan(tasks, run)
        self.total = len(tasks)
        super().__init__(ray, run.layout.root, run.layout.run_id, slots_per_task(run), show_progress, log,
                         has_work=bool(self.todo), hint=", or set executor.slots_per_task")
        # What a killed driver of this run had not applied is on the nodes: taken back before anything is counted.
        self.take_back(own=False)
        limit = run.config.budgets.per_run
        self.keeper = None
        if limit is not None:  # no budget, no actor: no call is made for it
            self.keeper = ray.remote(RunBudgetKeeper).options(**head_affinity()).remote(
                limit, seeded_run_budget(run).spent)
        self.remote_task = ray.remote(work_on_node).options(
            num_cpus=0, resources={RESOURCE: self.slots}, max_retries=0, retry_exceptions=False,
            scheduling_strategy="SPREAD")

    def item_id(self, task: Task) -> str:
        return task.instance_id

    keeps_attempts = True

    def recorded_attempts(self) -> dict[str, str]:
        """Each unfinished task's attempt last sent to a node (TaskPaths.ray_attempt), as kept attempts name it."""
        recorded = {}
        for path in self.run.layout.tasks.glob(f"*/{TaskPaths(Path()).ray_attempt.name}"):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                recorded[path.parent.name] = marker(str(data["session"]), str(data["key"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # unreadable: none of its kept attempts is taken back, and the task reruns from here
        return recorded

    def ship(self, task: Task, key: str) -> Any:
        instance_id = task.instance_id
        if self.run.reuse_juniors_from is not None and self.attempts[instance_id] == 1:
            from pipeline.juniors.stage import copy_rollouts

            # Another run's rollouts are copied here, where they are, so no node needs that run.
            copy_rollouts(self.run.reuse_juniors_from.task(instance_id).junior,
                          self.run.layout.task(instance_id).junior, self.run.config.juniors.k, task=task)
        paths = self.run.layout.task(instance_id)
        write_json_atomic(paths.ray_attempt, {"session": self.session, "key": key})  # before the node has any of it
        shipment = TaskShipment(task=task, run=self.run, key=key, session=self.session,
                                files=snapshot(paths.root, f"tasks/{instance_id}"),
                                eval_files=eval_inputs(task, self.run.evaluation), queue=self.queue,
                                budget=self.keeper, run_limit=self.run.config.budgets.per_run, stop=self.stop_flag,
                                ack_timeout=driver_module.FLUSH_TIMEOUT)
        return self.remote_task.remote(shipment)

    def stage_of(self, parts: list[str]) -> str | None:
        return parts[2] if len(parts) > 3 and parts[0] == "tasks" and parts[2] in STAGE_FOLDERS else None

    def summary_line(self) -> str:
        return self.summary.line()

    def execute(self) -> RunSummary:  # type: ignore[override]
        self.summary.stopped = not super().execute(self.todo, self.total, len(self.summary.skipped))
        return self.summary

    def lost(self, key: str) -> str:
        if self.keeper is None:
            return ""
        try:
            counted = self.ray.get(self.keeper.abandon.remote(key), timeout=CALL_TIMEOUT)
        except InfrastructureFault:
            raise
        except Exception:  # noqa: BLE001
            return ""
        return f"; ${counted:.4f} of calls in flight counted as spent" if counted else ""

    def completed(self, task: Task, result: AttemptOutcome) -> None:
        prediction = result["prediction"]
        node = self.node_label(result.get("node_id"))
        if node is not None:
            prediction.node = node
        record_prediction(self.summary, self.run, prediction, self.log)
        remove(self.run.layout.task(task.instance_id).ray_attempt)  # all it wrote is here: nothing to take back

    def give_up(self, task: Task, error: str) -> None:
        record_prediction(self.summary, self.run, Prediction.of({
            "instance_id": task.instance_id, "model_patch": "", "strategy": self.run.config.strategy,
            "source": "none", "models": self.run.models, "error": error, "infra_error": True}), self.log)



def run_tasks_on_ray(tasks: list[Task], run: RunSettings, show_progress: bool = True,
                     log: Callable[[str], None] | None = None) -> RunSummary:
    """``run_tasks`` on the cluster at ``executor.ray_address``; the same summary, predictions and files."""
    ray = connect(run.config.executor.ray_address)
    return RayRun(ray, tasks, run, show_progress, log).execute()


class RayExecutor:
    """The Executor (pipeline.run.executors) of a Ray cluster at ``executor.ray_address``: every task and scoring a
    Ray task on a node with docker_slots to spare; Ray imported only when one of these is called."""

    name = "ray"
    limits_per_node = True  # sized on the node that runs each task or scoring, from its machine and docker_slots

    def __init__(self, config: ExecutorConfig) -> None:
        self.config = config

    def connect(self) -> None:
        """Join the cluster now: Ray missing or no cluster there is said before anything is written."""
        connect(self.config.ray_address)

    def check_run_images(self, tasks: list[Task], run: RunSettings, announce: Callable[[str], None]) -> None:
        from pipeline.run.ray.preflight import check_run_images_on_nodes

        check_run_images_on_nodes(tasks, run, announce)  # on every node of the cluster

    def require_images(self, names: Iterable[str], announce: Callable[[str], None]) -> None:
        from pipeline.run.ray.preflight import check_images_on_nodes

        check_images_on_nodes(connect(self.config.ray_address), names, announce=announce)

    def run_tasks(self, tasks: list[Task], run: RunSettings, *, workers: int = 1, show_progress: bool = True,
                  log: Callable[[str], None] | None = None) -> RunSummary:
        # ``workers`` is not used: the nodes' docker_slots say how many tasks run at once
        return run_tasks_on_ray(tasks, run, show_progress=show_progress, log=log)

    def evaluate_predictions(self, predictions: list[PatchToScore], tasks: list[Task], output_dir: Path,
                             settings: EvalSettings, *, workers: int = 2, redo: bool = False, attempts: int = 1,
                             show_progress: bool = True) -> EvalSummary:
        from pipeline.run.ray.scoring import evaluate_predictions_on_ray

        return evaluate_predictions_on_ray(predictions, tasks, output_dir, settings, redo=redo, attempts=attempts,
                                           show_progress=show_progress, address=self.config.ray_address)

    def score_candidates(self, plan: CandidatesPlan, settings: EvalSettings, *, workers: int = 2, attempts: int = 1,
                         show_progress: bool = True) -> CandidatesSummary:
        from pipeline.run.ray.candidates import score_candidates_on_ray

        return score_candidates_on_ray(plan, settings, attempts=attempts, show_progress=show_progress,
                                       address=self.config.ray_address)

    def cleanup(self, run_id: str | None, images: bool, say: Callable[[str], None]) -> None:
        """A run's containers and scratch on every node (``images`` is not used: each node keeps its images)."""
        from pipeline.run.ray.driver import cleanup_nodes

        if not run_id:
            raise SwepipeError("swepipe cleanup --executor ray needs --run-id (the run whose containers go)")
        for node, (names, kept) in cleanup_nodes(connect(self.config.ray_address), run_id).items():
            say(f"{node}: removed {len(names)} container(s)" + (f": {', '.join(names)}" if names else ""))
            if kept:
                say(f"{node}: kept {kept} task attempt(s) of run {run_id} holding writes its driver may not have "
                    f"applied; rerun run {run_id} to take them back")
