"""The command line's choices over the config file: the config a run is asked for (pipeline.run.lifecycle opens
the run), every plug-in it names loaded and checked before any money is spent."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from pipeline.errors import SwepipeError
from pipeline.settings.config import RunConfig, load_config
from pipeline.settings.config_overlay import Assignment
from pipeline.settings.model_spec import Role
from pipeline.strategies.base import needed_roles, strategy_class


def resolve_config(config_path: Path | None, assignments: Iterable[Assignment] = (),
                   imports: Callable[[RunConfig], RunConfig] | None = None) -> RunConfig:
    """The config file with the command line's ``assignments`` on top (pipeline.settings.config_overlay: the shortcut
    flags and every --set, checked as the file's values are), every plug-in it names loaded and checked. ``imports``
    adds the candidates taken in from elsewhere (--juniors-from) before the roles are checked, as they count as
    juniors: a vote over them alone, or the senior's choice among them, needs no junior model."""
    cfg = load_config(config_path, assignments)
    if imports is not None:
        cfg = imports(cfg)
    roles = needed_roles(strategy_class(cfg.strategy), cfg)  # loads every plug-in the config names
    switched_off = [role for role in roles if not cfg.plays(role)]
    if switched_off:
        role = switched_off[0]
        hint = "; for no juniors use -k 0" if role == Role.JUNIOR else ""
        raise SwepipeError(f"the {cfg.strategy} strategy cannot run without its {role} model, which is none "
                           f"(only the pipeline's senior and principal can be switched off){hint}")
    return cfg
