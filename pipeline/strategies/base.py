"""The Strategy protocol, the registry of built-in strategies, and loading one by name or import string."""

from __future__ import annotations

from typing import Protocol

from pipeline.config import RunConfig
from pipeline.errors import SwepipeError
from pipeline.job import TaskJob

# Built-in strategies by name; each module is imported only when it is used.
REGISTRY = {
    "pipeline": "pipeline.strategies.pipeline:PipelineStrategy",
    "solo": "pipeline.strategies.solo:SoloStrategy",
    "team": "pipeline.strategies.team:TeamStrategy",
    "vote": "pipeline.strategies.vote:VoteStrategy",
}


class Strategy(Protocol):
    """Solves one task. Constructed with the run's config; ``run_task`` returns the prediction's own fields
    (at least ``model_patch`` and ``source``; ``error`` when a stage failed). Dollars, tokens, timing and
    scoring are added by the caller from the task's ledger."""

    name: str
    roles: tuple[str, ...]  # the models it needs, e.g. ("junior", "senior", "principal")
    spend_by: str  # "stage" or "role": how the ledger's rows are summed into the prediction's cost

    def __init__(self, config: RunConfig) -> None: ...

    def run_task(self, job: TaskJob) -> dict: ...


class BaseStrategy:
    """What most strategies share: the config kept, spend summed by stage."""

    spend_by = "stage"

    def __init__(self, config: RunConfig):
        self.config = config


def needed_roles(strategy: type[Strategy], config: RunConfig) -> tuple[str, ...]:
    """The roles that must have a model for ``strategy`` under ``config`` (a strategy may say fewer than its
    ``roles``, e.g. when a plug-in stage calls no model)."""
    needs = getattr(strategy, "needed_roles", None)
    return tuple(needs(config)) if needs else tuple(strategy.roles)


def strategy_class(name: str) -> type[Strategy]:
    """A built-in strategy by name, or any class named by import string (``mypkg.mod:MyStrategy``)."""
    from pipeline.plugins import load_object

    if name in REGISTRY:
        return load_object(REGISTRY[name], "strategy")
    if ":" not in name:
        raise SwepipeError(f"unknown strategy {name!r}: use {', '.join(REGISTRY)}, or name a class as "
                           "package.module:Class")
    cls = load_object(name, "strategy")
    missing = [attribute for attribute in ("roles", "run_task") if not hasattr(cls, attribute)]
    if missing:
        raise SwepipeError(f"strategy {name!r} is not a Strategy: it has no {', '.join(missing)}")
    return cls


def stage_class(spec: str | None, default: str, what: str):
    """The stage class the config names (``senior.impl``, ``principal.impl``), else the built-in one."""
    from pipeline.plugins import load_object

    return load_object(spec or default, what)
