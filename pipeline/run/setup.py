"""Turning command-line choices into a resolved run, checking everything before any money is spent."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.config import RunConfig, load_config
from pipeline.config_overlay import Assignment
from pipeline.datasets import defaults_for
from pipeline.errors import SwepipeError
from pipeline.evaluation.logs import LOG_LIMIT
from pipeline.evaluation.profiles import DEFAULT_PROFILE
from pipeline.evaluation.runner import EvalSettings
from pipeline.layout import RunLayout
from pipeline.models.pricing import resolve_prices
from pipeline.run.executors import executor_for
from pipeline.run.lock import lock_run, repair_run
from pipeline.run.run_dataset import record_dataset
from pipeline.run.same_config import check_same_config
from pipeline.run.task import RunSettings
from pipeline.runtime.limits import container_limits, fill_defaults
from pipeline.storage import write_text_atomic
from pipeline.strategies.base import needed_roles, strategy_class

if TYPE_CHECKING:
    from pipeline.models.local_server import LocalModelServer


def resolve_config(config_path: Path | None, assignments: Iterable[Assignment] = (),
                   imports: Callable[[RunConfig], RunConfig] | None = None) -> RunConfig:
    """The config file with the command line's ``assignments`` on top (pipeline.config_overlay: the shortcut flags
    and every --set, checked as the file's values are), every plug-in it names loaded and checked. ``imports``
    adds the candidates taken in from elsewhere (--juniors-from) before the roles are checked, as they count as
    juniors: a vote over them alone, or the senior's choice among them, needs no junior model."""
    cfg = load_config(config_path, assignments)
    if imports is not None:
        cfg = imports(cfg)
    roles = needed_roles(strategy_class(cfg.strategy), cfg)  # loads every plug-in the config names
    switched_off = [role for role in roles if not cfg.plays(role)]
    if switched_off:
        role = switched_off[0]
        hint = "; for no juniors use -k 0" if role == "junior" else ""
        raise SwepipeError(f"the {cfg.strategy} strategy cannot run without its {role} model, which is none "
                           f"(only the pipeline's senior and principal can be switched off){hint}")
    return cfg


def prepare_run(*, dataset: str, config: RunConfig, run_id: str | None, runs_dir: Path, split: str = "test",
                evaluate: bool = False,
                reuse_juniors_from: str | None = None, run_scripts: Path | None = None,
                dockerfiles: Path | None = None, image_template: str | None = None, timeout: float | None = None,
                scoring_profile: str = DEFAULT_PROFILE,
                announce: Callable[[str], None] = print, eval_network: bool = False, workers: int = 1,
                eval_log_limit: int = LOG_LIMIT) -> tuple[RunSettings, LocalModelServer | None]:
    """The run's settings and the local model server started for roles with no model (or None).

    Stop the server (``.stop()``) when the run ends.
    """
    # Container limits the config leaves unset: sized for ``workers`` tasks at once, each with K rollouts
    # when the strategy has juniors, and written into the run's config.yaml.
    # (k = 0: the senior's and principal's one container at a time.)
    # With an executor that sizes them per node (ray) they are left unset here and sized on the node that runs each
    # task, from its machine and its docker_slots (pipeline.run.ray.executor; the task's limits.json records them).
    per_task = max(1, config.juniors.k) if "junior" in strategy_class(config.strategy).roles else 1
    if not executor_for(config.executor).limits_per_node:
        config = config.model_copy(update={"containers": fill_defaults(config.containers,
                                                                       max(1, workers) * per_task)})
    for role, spec in config.models.items():
        if not spec.is_none:  # a role switched off is never called, so it needs no price
            resolve_prices(spec, role)  # an unpriced model stops the run before its directory exists
    layout = RunLayout(runs_dir / (run_id or time.strftime("run-%Y%m%d-%H%M%S")))
    lock_run(layout)  # a second process on the same run stops here (RunLocked), before anything is written
    record_dataset(layout, dataset, split)  # a resume naming another dataset stops here
    repair_run(layout)  # lines a killed session cut short, its temporary files
    local_server = None
    # Roles with no model are played by the local model; a role switched off (model none) is not needed at all.
    unset = [role for role in needed_roles(strategy_class(config.strategy), config)
             if role not in config.models and config.plays(role)]
    if unset:
        from pipeline.models.local_server import LocalModelServer

        local_server = LocalModelServer(slots=max(1, workers) * per_task)  # one slot per request at once
        announce(f"no model configured for {', '.join(unset)}: starting the local model (Gemma 3 270M, "
                 "llama.cpp) on a loopback port; it costs nothing and will rarely resolve a task")
        local_server.start()
        config = config.model_copy(update={"models": {**config.models,
                                                      **{role: local_server.spec(role, config) for role in unset}}})
    try:
        for role, spec in config.models.items():
            if not spec.is_none:
                resolve_prices(spec, role)
        defaults = defaults_for(dataset)
        template = image_template or config.containers.image_template or defaults.image_template
        # recorded in config.yaml, so a resume can refuse another one and later commands use the run's own
        config = config.model_copy(update={"containers": config.containers.model_copy(
            update={"image_template": template})})
        # with the local model filled in, as the run's config.yaml holds it
        check_same_config(layout, config, eval_network=eval_network if evaluate else None,
                          eval_profile=scoring_profile if evaluate else None)
        write_text_atomic(layout.config, config.to_yaml())
        evaluation = None
        if evaluate:
            evaluation = EvalSettings(image_template=template, run_scripts=run_scripts or defaults.run_scripts,
                                      dockerfiles=dockerfiles, timeout=timeout, profile=scoring_profile,
                                      platform=config.containers.platform,
                                      run_id=layout.run_id, network=eval_network,
                                      limits=container_limits(config.containers), log_limit=eval_log_limit)
        reuse = None
        if reuse_juniors_from:
            candidate = Path(reuse_juniors_from)
            reuse = RunLayout(candidate if candidate.exists() else runs_dir / reuse_juniors_from)
            if not reuse.tasks.is_dir():
                raise SwepipeError(f"--reuse-juniors-from {reuse_juniors_from}: no run directory with tasks at "
                                   f"{reuse.root}")
    except BaseException:
        if local_server is not None:
            local_server.stop()
        raise
    settings = RunSettings(config=config, layout=layout, image_template=template, evaluation=evaluation,
                           reuse_juniors_from=reuse)
    return settings, local_server


