"""One run's lifecycle: what was asked for (``RunRequest``, made once from the command line and the config) and the
run that owns its resources from opening to closing (``Run``: the run directory and its lock, the repair of what a
killed session left, the local model's server).

    with Run.open(request) as run:
        run_tasks(tasks, run.settings, ...)

``Run.open`` checks what needs no resource (each model has a price), so a run that cannot start stops before its
directory exists; entering takes the resources, and leaving gives them back whatever ends the block (an exception,
a stop, SystemExit).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from pipeline.errors import SwepipeError
from pipeline.evaluation.options import ScoringOptions
from pipeline.evaluation.runner import EvalSettings
from pipeline.models.pricing import resolve_prices
from pipeline.run.executors import executor_for
from pipeline.run.lock import lock_run, repair_run, unlock_run
from pipeline.run.run_dataset import record_dataset
from pipeline.run.same_config import check_same_config
from pipeline.run.task import RunSettings
from pipeline.rundir.layout import RunLayout
from pipeline.rundir.storage import write_text_atomic
from pipeline.runtime.limits import container_limits, fill_defaults
from pipeline.settings.config import RunConfig
from pipeline.strategies.base import needed_roles, strategy_class
from pipeline.tasks.datasets import defaults_for

if TYPE_CHECKING:
    from pipeline.models.local_server import LocalModelServer


def new_run_id(kind: str = "run") -> str:
    """The id of a run the command line names none for: ``<kind>-<local time>``."""
    return time.strftime(f"{kind}-%Y%m%d-%H%M%S")


@dataclass(frozen=True)
class RunRequest:
    """What one run was asked for, resolved once: its config (the file with the command line on top), its id and
    where it goes, its tasks' dataset, whether and how it scores, and how many tasks run at once."""

    config: RunConfig
    run_id: str
    runs_dir: Path
    dataset: str
    split: str = "test"
    evaluate: bool = False
    scoring: ScoringOptions = field(default_factory=ScoringOptions)
    image_template: str | None = None  # None: the config's, else the dataset's
    reuse_juniors_from: str | None = None  # an earlier run (its directory, or its id under runs_dir)
    workers: int = 1


class _State(enum.Enum):
    UNOPENED = "unopened"
    OPENED = "opened"
    CLOSED = "closed"


class Run:
    """One run directory, held by this process from ``__enter__`` to ``__exit__``."""

    def __init__(self, request: RunRequest, config: RunConfig, slots: int, announce: Callable[[str], None]):
        """Made by ``Run.open``: ``config`` is the request's with the container limits filled in, ``slots`` the
        model requests its tasks may make at once."""
        self.request, self.layout = request, RunLayout(request.runs_dir / request.run_id)
        self._config, self._slots, self._announce = config, slots, announce
        self._server: LocalModelServer | None = None
        self._settings: RunSettings | None = None
        self._state = _State.UNOPENED

    @classmethod
    def open(cls, request: RunRequest, announce: Callable[[str], None] = print) -> Run:
        """The run of ``request``, checked before anything is written: every model it names has a price (a role
        switched off needs none; the local model is free); enter it to take its resources."""
        config = request.config
        # Container limits the config leaves unset: sized for ``workers`` tasks at once, each with K rollouts when
        # the strategy has juniors (k = 0: the senior's and principal's one container at a time), and written into
        # the run's config.yaml. An executor that sizes them per node (ray) leaves them unset here; the node that
        # runs a task sizes them from its machine and its docker_slots (the task's limits.json records them).
        per_task = max(1, config.juniors.k) if "junior" in strategy_class(config.strategy).roles else 1
        slots = max(1, request.workers) * per_task
        if not executor_for(config.executor).limits_per_node:
            config = config.model_copy(update={"containers": fill_defaults(config.containers, slots)})
        for role, spec in config.models.items():
            if not spec.is_none:
                resolve_prices(spec, role)  # an unpriced model stops the run before its directory exists
        return cls(request, config, slots, announce)

    @property
    def settings(self) -> RunSettings:
        """What every task of the run needs (plain values, sent to a cluster's nodes as they are); asked of an open
        run (the value stays good after it closes, for what is printed of it)."""
        if self._settings is None or self._state is not _State.OPENED:
            raise RuntimeError(f"run {self.layout.run_id} is {self._state.value}: use it inside `with`")
        return self._settings

    @property
    def local_model(self) -> LocalModelServer | None:
        """The local model's server, started on entry for the roles that name no model; None when none does."""
        return self._server

    def __enter__(self) -> Run:
        if self._state is not _State.UNOPENED:
            raise RuntimeError(f"run {self.layout.run_id} is {self._state.value}: open a new one")
        lock_run(self.layout)  # a second process on the same run stops here (RunLocked), before anything is written
        self._state = _State.OPENED
        try:
            record_dataset(self.layout, self.request.dataset, self.request.split)  # a resume naming another stops
            repair_run(self.layout)  # lines a killed session cut short, its temporary files
            self._settings = self._settled(self._with_local_model(self._config))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Stop the local model's server and let the run directory go; again, nothing more."""
        if self._state is not _State.OPENED:
            return
        self._state = _State.CLOSED
        try:
            if self._server is not None:
                self._server.stop()
        finally:
            unlock_run(self.layout)

    def _with_local_model(self, config: RunConfig) -> RunConfig:
        """``config`` with the local model in each role it needs and names no model for (a role switched off,
        model none, needs none), its server started."""
        unset = [role for role in needed_roles(strategy_class(config.strategy), config)
                 if role not in config.models and config.plays(role)]
        if not unset:
            return config
        from pipeline.models.local_server import LocalModelServer

        self._server = LocalModelServer(slots=self._slots)  # one slot per request at once
        self._announce(f"no model configured for {', '.join(unset)}: starting the local model (Gemma 3 270M, "
                       "llama.cpp) on a loopback port; it costs nothing and will rarely resolve a task")
        self._server.start()
        return config.model_copy(update={"models": {**config.models,
                                                    **{role: self._server.spec(role, config) for role in unset}}})

    def _settled(self, config: RunConfig) -> RunSettings:
        """The run's settings, its config checked against an earlier session's and written to config.yaml."""
        request, layout = self.request, self.layout
        defaults = defaults_for(request.dataset)
        template = request.image_template or config.containers.image_template or defaults.image_template
        # recorded in config.yaml, so a resume can refuse another one and later commands use the run's own
        config = config.model_copy(update={"containers": config.containers.model_copy(
            update={"image_template": template})})
        scoring = request.scoring
        # with the local model filled in, as the run's config.yaml holds it
        check_same_config(layout, config, eval_network=scoring.eval_network if request.evaluate else None,
                          eval_profile=scoring.scoring_profile if request.evaluate else None)
        write_text_atomic(layout.config, config.to_yaml())
        evaluation = None
        if request.evaluate:
            evaluation = EvalSettings(image_template=template,
                                      run_scripts=scoring.run_scripts or defaults.run_scripts,
                                      dockerfiles=scoring.dockerfiles, timeout=scoring.timeout,
                                      profile=scoring.scoring_profile, platform=config.containers.platform,
                                      run_id=layout.run_id, network=scoring.eval_network,
                                      limits=container_limits(config.containers), log_limit=scoring.log_limit)
        return RunSettings(config=config, layout=layout, image_template=template, evaluation=evaluation,
                           reuse_juniors_from=self._reused())

    def _reused(self) -> RunLayout | None:
        """The earlier run whose junior rollouts this one takes (--reuse-juniors-from), checked to hold tasks."""
        source = self.request.reuse_juniors_from
        if not source:
            return None
        candidate = Path(source)
        reuse = RunLayout(candidate if candidate.exists() else self.request.runs_dir / source)
        if not reuse.tasks.is_dir():
            raise SwepipeError(f"--reuse-juniors-from {source}: no run directory with tasks at {reuse.root}")
        return reuse
