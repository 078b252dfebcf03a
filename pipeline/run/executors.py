"""Where tasks run and are scored: the Executor protocol and the registry of executors, one chosen by name
(``executor.kind`` in the config, ``--executor`` on the command line).

Two are built in: ``threads`` (this machine, a thread pool: pipeline.run.thread_executor) and ``ray`` (a Ray
cluster, one Docker host per node: pipeline.run.ray.executor). Each module is imported only when its executor is
chosen, and the ray one imports Ray only inside its functions, so the thread executor never loads Ray. This is
the one place that knows the executors by name: callers ask ``executor_for(config)`` and use what it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pipeline.errors import SwepipeError
from pipeline.settings.config import ExecutorConfig

if TYPE_CHECKING:
    from pipeline.evaluation.batch import EvalSummary
    from pipeline.evaluation.candidates import CandidatesPlan, CandidatesSummary
    from pipeline.evaluation.runner import EvalSettings
    from pipeline.interop.predictions import PatchToScore
    from pipeline.run.bookkeeping import RunSummary
    from pipeline.run.task import RunSettings
    from pipeline.tasks import Task

# Built-in executors by name (the values ExecutorConfig.kind allows); each module is imported only when it is used.
REGISTRY = {
    "threads": "pipeline.run.thread_executor:ThreadExecutor",
    "ray": "pipeline.run.ray.executor:RayExecutor",
}


class Executor(Protocol):
    """Runs a run's tasks and scores patches somewhere. Constructed with the config's ``executor`` section; the
    summaries and files it leaves are the same whichever executor made them."""

    name: str
    # True: container limits the config leaves unset are sized on each node, from its machine and its
    # docker_slots (each task's limits.json records them); False: here, for this machine and the work run at once.
    limits_per_node: bool

    def __init__(self, config: ExecutorConfig) -> None: ...

    def connect(self) -> None:
        """Say now (SwepipeError), before anything is written or spent, when this executor cannot run: Ray
        missing, no cluster answering."""

    def check_run_images(self, tasks: list[Task], run: RunSettings, announce: Callable[[str], None]) -> None:
        """The image preflight of a run's unfinished tasks, where they will run; RuntimeUnavailable when an image
        cannot be had."""

    def require_images(self, names: Iterable[str], announce: Callable[[str], None]) -> None:
        """Every image in ``names`` present or on its registry, where scoring will run; else RuntimeUnavailable."""

    def run_tasks(self, tasks: list[Task], run: RunSettings, *, workers: int = 1, show_progress: bool = True,
                  log: Callable[[str], None] | None = None) -> RunSummary:
        """Run the tasks not finished yet (``workers`` at a time, where the executor decides that itself)."""

    def evaluate_predictions(self, predictions: list[PatchToScore], tasks: list[Task], output_dir: Path,
                             settings: EvalSettings, *, workers: int = 2, redo: bool = False, attempts: int = 1,
                             show_progress: bool = True) -> EvalSummary:
        """Score the predictions not scored yet into ``output_dir``."""

    def score_candidates(self, plan: CandidatesPlan, settings: EvalSettings, *, workers: int = 2,
                         attempts: int = 1, show_progress: bool = True) -> CandidatesSummary:
        """Score a run's junior candidates (pipeline.evaluation.candidates) into the run's directory."""

    def cleanup(self, run_id: str | None, images: bool, say: Callable[[str], None]) -> None:
        """Remove the containers swepipe left (of ``run_id`` when given) and, with ``images``, where the executor
        can, the cached sanitised images; one line to ``say`` per place cleaned."""


def executor_class(name: str) -> type[Executor]:
    """The executor registered under ``name``; a SwepipeError naming the choices for any other name."""
    from pipeline.settings.plugins import load_object

    if name not in REGISTRY:
        raise SwepipeError(f"unknown executor {name!r}: use {' or '.join(REGISTRY)}")
    executor: type[Executor] = load_object(REGISTRY[name], "executor")
    return executor


def executor_for(config: ExecutorConfig) -> Executor:
    """The executor the config's ``executor`` section names, made with it."""
    return executor_class(config.kind)(config)
