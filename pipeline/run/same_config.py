"""A resumed run goes on with the config it started with: what decides its results (strategy, models, limits, the
stages' settings) may not change between sessions, or one run directory would hold tasks done two ways under one
config.yaml. Budgets, containers and the executor may change (more money, another machine, a cluster), and so may how
a model is reached or priced (its endpoint, timeouts, retries, prices, prompt cache), which changes no reply."""

from __future__ import annotations

import json

import yaml
from pydantic import ValidationError

from pipeline.config import RunConfig
from pipeline.errors import SwepipeError
from pipeline.layout import RunLayout

FREE_TO_CHANGE = ("budgets", "containers", "executor")
MODEL_FIELDS_FREE_TO_CHANGE = ("api_base", "timeout", "max_retries", "prices", "free", "prompt_cache")
SHOWN = 6  # differences named in the message


def check_same_config(layout: RunLayout, config: RunConfig) -> None:
    """Refuse ``config`` for a run that already has task folders, when it differs from the run's config.yaml in what
    decides results; the message names each difference, old and new. A config.yaml this version cannot read (or
    none) is not compared."""
    if not layout.config.exists() or not any((layout.root / "tasks").glob("*")):
        return
    try:
        before = RunConfig.model_validate(yaml.safe_load(layout.config.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError, ValidationError, TypeError):
        return
    changes = _differences(_identity(before), _identity(config))
    if changes:
        named = "; ".join(f"{key}: {_short(old)} -> {_short(new)}" for key, old, new in changes[:SHOWN])
        more = f" (and {len(changes) - SHOWN} more)" if len(changes) > SHOWN else ""
        raise SwepipeError(
            f"run {layout.run_id} ran with another config ({named}{more}); resuming would mix two configs in one run "
            f"directory. Resume with the config it ran with ({layout.config}), or start a new --run-id (with "
            f"--reuse-juniors-from {layout.run_id} to keep its paid rollouts)")


def _identity(config: RunConfig) -> dict:
    data = {key: value for key, value in config.model_dump(mode="json").items() if key not in FREE_TO_CHANGE}
    data["models"] = {role: {key: value for key, value in spec.items() if key not in MODEL_FIELDS_FREE_TO_CHANGE}
                      for role, spec in data.get("models", {}).items()}
    return data


def _differences(old, new, prefix: str = "") -> list[tuple[str, object, object]]:
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new), key=str):
            found += _differences(old.get(key), new.get(key), f"{prefix}.{key}" if prefix else str(key))
        return found
    return [] if old == new else [(prefix, old, new)]


def _short(value) -> str:
    text = "unset" if value is None else json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 120 else text[:57] + "..." + text[-60:]  # a long path keeps its end
