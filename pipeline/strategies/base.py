"""The protocols of the plug-ins: a Strategy, and the pipeline's SeniorStage and PrincipalStage; the registry of
built-in strategies, and loading a strategy or stage by name or import string."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from pipeline.errors import SwepipeError
from pipeline.job import TaskJob
from pipeline.settings.config import RunConfig

if TYPE_CHECKING:
    from pipeline.pool_rules import CandidatePool
    from pipeline.records import Brief, PrincipalResult
    from pipeline.strategies.answer import TaskAnswer

# Built-in strategies by name; each module is imported only when it is used.
REGISTRY = {
    "pipeline": "pipeline.strategies.pipeline:PipelineStrategy",
    "solo": "pipeline.strategies.solo:SoloStrategy",
    "team": "pipeline.strategies.team:TeamStrategy",
    "vote": "pipeline.strategies.vote:VoteStrategy",
    "replay": "pipeline.strategies.replay:ReplayStrategy",  # `swepipe replay`: recorded replies, not a model
}


class Strategy(Protocol):
    """Solves one task. Constructed with the run's config; ``run_task`` returns the prediction's own fields as a
    TaskAnswer (pipeline.strategies.answer: at least ``model_patch`` and ``source``; ``error`` when a stage
    failed). Dollars, tokens, timing and scoring are added by the caller from the task's ledger."""

    name: str
    roles: tuple[str, ...]  # the models it needs, e.g. ("junior", "senior", "principal")
    spend_by: str  # "stage" or "role": how the ledger's rows are summed into the prediction's cost

    def __init__(self, config: RunConfig) -> None: ...

    def run_task(self, job: TaskJob) -> TaskAnswer: ...


class SeniorStage(Protocol):
    """The pipeline's second stage (config ``senior.impl``; built in: pipeline.senior.stage:Senior). Constructed
    with the run's config. ``brief`` returns the brief record (pipeline.records.Brief: at least ``context``, the
    text the principal is sent; usually ``analysis``, ``spans``, ``source``, ``candidate``, the 1-based pool
    candidate it judges right or closest). A stage that writes senior/brief.json itself should write it through
    ``pipeline.job.once(path, make, Brief)``, so that an earlier session's is reused and reports read it; it may
    add keys of its own, which are kept."""

    role: str | None  # the model role it calls ("senior"); None: it calls no model, so none need be configured

    def __init__(self, config: RunConfig) -> None: ...

    def brief(self, job: TaskJob, pool: CandidatePool) -> Brief:
        """The brief of the task in ``job`` from its candidate pool (most-voted first)."""


class PrincipalStage(Protocol):
    """The pipeline's third stage (config ``principal.impl``; built in: pipeline.principal.stage:Principal, or
    pipeline.principal.choice:SubmitSeniorCandidate with the principal model none). Constructed with the run's config.
    ``write`` returns the result record (pipeline.records.PrincipalResult: at least ``patch``, the final patch,
    and ``source``, where it came from; ``error`` when there is none). The patch becomes the prediction. A stage
    that writes principal/result.json itself should write it through ``pipeline.job.once(path, make,
    PrincipalResult)``; it may add keys of its own, which are kept."""

    role: str | None  # the model role it calls ("principal"); None: it calls no model

    def __init__(self, config: RunConfig) -> None: ...

    def write(self, job: TaskJob, pool: CandidatePool, brief: Brief) -> PrincipalResult:
        """The final patch of the task in ``job``, from its pool and the senior's ``brief``."""


# What each configured stage must have: the config key that names it -> (its protocol, its method).
STAGE_PROTOCOLS: dict[str, tuple[type, str]] = {"senior.impl": (SeniorStage, "brief"),
                                                "principal.impl": (PrincipalStage, "write")}


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
    from pipeline.settings.plugins import load_object

    if name in REGISTRY:
        builtin: type[Strategy] = load_object(REGISTRY[name], "strategy")
        return builtin
    if ":" not in name:
        raise SwepipeError(f"unknown strategy {name!r}: use {', '.join(REGISTRY)}, or name a class as "
                           "package.module:Class")
    cls: type[Strategy] = load_object(name, "strategy")
    missing = [attribute for attribute in ("roles", "run_task") if not hasattr(cls, attribute)]
    if missing:
        raise SwepipeError(f"strategy {name!r} is not a Strategy: it has no {', '.join(missing)}")
    return cls


def stage_class(spec: str | None, default: str, what: str) -> type[Any]:
    """The stage class the config names (``senior.impl``, ``principal.impl``), else the built-in one; one without
    its protocol's method (SeniorStage.brief, PrincipalStage.write) is refused before anything is spent."""
    from pipeline.settings.plugins import load_object

    cls: type[Any] = load_object(spec or default, what)
    if what not in STAGE_PROTOCOLS:
        return cls
    protocol, method = STAGE_PROTOCOLS[what]
    if not callable(getattr(cls, method, None)):
        raise SwepipeError(f"{what} {spec or default!r} is not a {protocol.__name__}: it has no {method}(job, pool"
                           + (", brief" if method == "write" else "") + ") method")
    return cls
