"""Scheduling tasks: several at a time, predictions appended as they finish, progress on screen.

Kept apart from run_one_task so another executor (a Ray cluster, one Docker host per node:
pipeline.run.ray.executor) drives the same per-task function and the same bookkeeping (``plan``,
``record_prediction``: pipeline.run.records).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

from pipeline import stopping
from pipeline.outages import BREAKERS
from pipeline.parallel import run_with_progress
from pipeline.run.records import RunSummary, plan, record_prediction
from pipeline.run.task import RunSettings, run_one_task, seeded_run_budget
from pipeline.runtime.image_cache import RunImageCache
from pipeline.tasks import Task


def run_tasks(tasks: list[Task], run: RunSettings, workers: int = 1, show_progress: bool = True,
              log: Callable[[str], None] | None = None) -> RunSummary:
    """Run the tasks not finished yet; ``log`` gets one plain line per finished task (for logs, where
    no progress bar is drawn). The config's executor says where: threads here, or a Ray cluster."""
    if run.config.executor.kind == "ray":
        from pipeline.run.ray.executor import run_tasks_on_ray

        return run_tasks_on_ray(tasks, run, show_progress=show_progress, log=log)
    summary, todo = plan(tasks, run)
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
        prediction.update(node=node, wall_seconds=round(time.monotonic() - started, 2))
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
