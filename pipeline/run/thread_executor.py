"""The thread executor (``executor.kind: threads``, the default): a run's tasks several at a time on this machine,
predictions appended as they finish, progress on screen; scoring and cleanup here too (``ThreadExecutor``).

Kept apart from run_one_task so another executor (a Ray cluster, one Docker host per node:
pipeline.run.ray.executor) drives the same per-task function and the same bookkeeping (``plan``,
``record_prediction``: pipeline.run.bookkeeping). Executors are chosen by name in pipeline.run.executors.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.control import stopping
from pipeline.control.outages import BREAKERS
from pipeline.control.parallel import run_with_progress
from pipeline.run.bookkeeping import RunSummary, plan, record_prediction
from pipeline.run.task import RunSettings, run_one_task, seeded_run_budget
from pipeline.runtime.images.cache import RunImageCache
from pipeline.tasks import Task

if TYPE_CHECKING:
    from pipeline.evaluation.batch import EvalSummary
    from pipeline.evaluation.candidates import CandidatesPlan, CandidatesSummary
    from pipeline.evaluation.runner import EvalSettings
    from pipeline.interop.predictions import PatchToScore
    from pipeline.settings.config import ExecutorConfig


def run_tasks(tasks: list[Task], run: RunSettings, workers: int = 1, show_progress: bool = True,
              log: Callable[[str], None] | None = None) -> RunSummary:
    """Run the tasks not finished yet here, ``workers`` at a time; ``log`` gets one plain line per finished task
    (for logs, where no progress bar is drawn). Whichever executor the config names: ``executor_for(...).run_tasks``
    (pipeline.run.executors)."""
    summary, todo = plan(tasks, run)
    if todo and run.config.containers.impl is None:
        _remove_orphans(run.layout.run_id, log)
    BREAKERS.announce = log  # an endpoint's pause and recovery, as lines of the log (the progress line shows them)
    run_budget = seeded_run_budget(run)  # what earlier sessions of this run spent still counts against it
    lock = threading.Lock()
    # Prefetches the next queued task's image and, with containers.image_cache_gb, prunes (None for a runtime plug-in)
    image_cache = RunImageCache.for_run(run, log=log, queue=todo)
    node = socket.gethostname()

    def one(task: Task) -> None:
        started = time.monotonic()
        if image_cache is None:
            prediction = run_one_task(task, run, run_budget, log=log)
        else:
            image_cache.start(task)
            try:
                prediction = run_one_task(task, run, run_budget, log=log)
            finally:
                image_cache.finish(task)  # prune the finished tasks' images down to the budget
        prediction = prediction.model_copy(update={"node": node,
                                                   "wall_seconds": round(time.monotonic() - started, 2)})
        with lock:
            record_prediction(summary, run, prediction, log)

    try:
        run_with_progress("run", todo, one, workers=workers, total=len(tasks), done_already=len(summary.skipped),
                          describe=summary.line, show=show_progress)
    except (KeyboardInterrupt, stopping.Stopped):
        summary.stopped = True
    finally:
        if image_cache is not None:
            image_cache.close()
    return summary


def _remove_orphans(run_id: str, log: Callable[[str], None] | None) -> None:
    """The containers an earlier session of this run left when it was killed outright (kill -9: no handler ran)."""
    from pipeline.runtime import containers

    removed = containers.remove_orphans(run_id)
    if removed:
        (log or print)(f"removed {len(removed)} container(s) a killed session of run {run_id} left behind: "
                       f"{', '.join(removed)}")


class ThreadExecutor:
    """The Executor (pipeline.run.executors) of this machine: tasks and scorings in a thread pool, Docker here."""

    name = "threads"
    limits_per_node = False  # sized here, for this machine and the work run at once

    def __init__(self, config: ExecutorConfig) -> None:
        self.config = config

    def connect(self) -> None:
        """Nothing to join: this machine is always there."""

    def check_run_images(self, tasks: list[Task], run: RunSettings, announce: Callable[[str], None]) -> None:
        from pipeline.runtime.images.preflight import check_run_images

        check_run_images(tasks, run, announce)

    def require_images(self, names: Iterable[str], announce: Callable[[str], None]) -> None:
        from pipeline.runtime.images.preflight import require_images

        require_images(names, announce=announce)

    def run_tasks(self, tasks: list[Task], run: RunSettings, *, workers: int = 1, show_progress: bool = True,
                  log: Callable[[str], None] | None = None) -> RunSummary:
        return run_tasks(tasks, run, workers=workers, show_progress=show_progress, log=log)

    def evaluate_predictions(self, predictions: list[PatchToScore], tasks: list[Task], output_dir: Path,
                             settings: EvalSettings, *, workers: int = 2, redo: bool = False, attempts: int = 1,
                             show_progress: bool = True) -> EvalSummary:
        from pipeline.evaluation.batch import evaluate_predictions

        return evaluate_predictions(predictions, tasks, output_dir, settings, workers=workers, redo=redo,
                                    attempts=attempts, show_progress=show_progress)

    def score_candidates(self, plan: CandidatesPlan, settings: EvalSettings, *, workers: int = 2, attempts: int = 1,
                         show_progress: bool = True) -> CandidatesSummary:
        from pipeline.evaluation.candidates import score_candidates

        return score_candidates(plan, settings, workers=workers, attempts=attempts, show_progress=show_progress)

    def cleanup(self, run_id: str | None, images: bool, say: Callable[[str], None]) -> None:
        from pipeline.runtime import containers

        removed = containers.remove_labelled(run_id)
        say(f"removed {len(removed)} container(s)" + (f": {', '.join(removed)}" if removed else ""))
        if images:
            tags = containers.remove_sanitised_images()
            say(f"removed {len(tags)} sanitised image(s)")
