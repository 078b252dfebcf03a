"""Turning command-line choices into a RunContext, checking everything before any money is spent."""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import ValidationError

from pipeline.config import TeamConfig, load_config
from pipeline.datasets import defaults_for
from pipeline.errors import SwepipeError
from pipeline.evaluation.runner import EvalSettings
from pipeline.models.budget import Budget
from pipeline.models.pricing import resolve_prices
from pipeline.principal.stage import PrincipalSettings
from pipeline.run.layout import RunLayout
from pipeline.run.task import RunContext
from pipeline.senior.stage import SeniorSettings

STRATEGY_ROLES = {"pipeline": ("junior", "senior", "principal"), "solo": ("solo",), "team": ("lead", "worker")}


def prepare_run(*, dataset: str, config_path: Path | None, overrides: dict[str, str | None], k: int | None,
                run_id: str | None, runs_dir: Path, evaluate: bool, reuse_juniors_from: str | None,
                run_scripts: Path | None, dockerfiles: Path | None, image_template: str | None,
                timeout: float, strategy: str = "pipeline", team: dict | None = None, announce=print) -> RunContext:
    cfg = load_config(config_path)
    for role, model in overrides.items():
        cfg = cfg.with_model(role, model)
    if k is not None:
        cfg = cfg.model_copy(update={"juniors": cfg.juniors.model_copy(update={"k": k})})
    if strategy not in STRATEGY_ROLES:
        raise SwepipeError(f"unknown strategy {strategy!r}: use pipeline, solo or team")
    cfg = _with_team_options(cfg, team or {})
    local_server = None
    roles = STRATEGY_ROLES[strategy]
    unset = [role for role in roles if role not in cfg.models]
    if unset:
        from pipeline.models.local_server import LocalModelServer

        local_server = LocalModelServer()
        announce(f"no model configured for {', '.join(unset)}: starting the local model (Gemma 3 270M, "
                 "llama-cpp-python) on a loopback port; it costs nothing and will rarely resolve a task")
        local_server.start()
        cfg = cfg.model_copy(update={"models": {**cfg.models, **{role: local_server.spec() for role in unset}}})
    for role, spec in cfg.models.items():
        resolve_prices(spec, role)
    layout = RunLayout(runs_dir / (run_id or time.strftime("run-%Y%m%d-%H%M%S")))
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.config.write_text(cfg.to_yaml(), encoding="utf-8")
    defaults = defaults_for(dataset)
    template = image_template or cfg.containers.image_template or defaults.image_template
    evaluation = None
    if evaluate:
        evaluation = EvalSettings(image_template=template, run_scripts=run_scripts or defaults.run_scripts,
                                  dockerfiles=dockerfiles, timeout=timeout, platform=cfg.containers.platform,
                                  run_id=layout.run_id)
    reuse = None
    if reuse_juniors_from:
        candidate = Path(reuse_juniors_from)
        reuse = RunLayout(candidate if candidate.exists() else runs_dir / reuse_juniors_from)
        if not (reuse.root / "tasks").is_dir():
            raise SwepipeError(f"--reuse-juniors-from {reuse_juniors_from}: no run directory with tasks at {reuse.root}")
    principal_model = cfg.models[roles[-1]].model
    senior = SeniorSettings(limits=cfg.limits.model_copy(update={"max_steps": cfg.senior.max_steps, "action_format": "text"}).agent_limits(),
                            context_tokens=cfg.senior.context_tokens, expansion_tokens=cfg.senior.expansion_tokens,
                            count_tokens=_token_counter(principal_model))
    principal = PrincipalSettings(show_candidates=cfg.principal.show_candidates, fallback=cfg.principal.fallback)
    models = {role: cfg.models[role].model for role in roles}
    return RunContext(config=cfg, layout=layout, run_budget=Budget("run", cfg.budgets.per_run),
                      image_template=template, senior=senior, principal=principal, evaluation=evaluation,
                      reuse_juniors_from=reuse, models=models, strategy=strategy, local_server=local_server)


def _with_team_options(cfg, options: dict):
    """The config with the team options given on the command line (None: keep the config's)."""
    given = {key: value for key, value in options.items() if value is not None}
    if not given:
        return cfg
    try:
        team = TeamConfig.model_validate({**cfg.team.model_dump(), **given})
    except ValidationError as error:
        problems = "; ".join(f"team.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise SwepipeError(problems) from None
    return cfg.model_copy(update={"team": team})


def _token_counter(model: str):
    """Counts with the principal model's tokenizer where litellm knows it, else about 4 characters a token."""
    from pipeline.models.litellm_setup import litellm

    def count(text: str) -> int:
        try:
            return int(litellm.token_counter(model=model, text=text))
        except Exception:  # noqa: BLE001 - unknown model or tokenizer: estimate
            return max(1, len(text) // 4)

    return count
