"""A resumed run goes on with the config it started with: what decides its results (strategy, models, limits, the
stages' settings, the image and network its containers have, the network its scoring has) may not change between
sessions, or one run directory would hold tasks done two ways under one config.yaml. Budgets, the other container
settings, the executor and the fault settings may change (more money, another machine, a cluster), and so may how a
model is reached, priced or cached (its endpoint, timeouts, retries, prices, prompt-cache markers), which changes no
reply; the reply journal is keyed by the conversation without its cache markers, so none is paid twice."""

from __future__ import annotations

import json
from typing import Any

import yaml
from pydantic import ValidationError

from pipeline.errors import SwepipeError
from pipeline.records import EvalResult, Unreadable
from pipeline.rundir.layout import RunLayout, TaskPaths
from pipeline.settings.config import RunConfig

FREE_TO_CHANGE = ("budgets", "executor", "faults")
CONTAINER_FIELDS_DECIDING = ("image_template", "network")  # the other container settings may change
MODEL_FIELDS_FREE_TO_CHANGE = ("api_base", "timeout", "max_retries", "prices", "free", "prompt_cache")
SCORING_NETWORK = "scoring network (--eval-network)"
SCORING_PROFILE = "scoring profile (--scoring-profile)"
SHOWN = 6  # differences named in the message


def check_same_config(layout: RunLayout, config: RunConfig, eval_network: bool | None = None,
                      eval_profile: str | None = None) -> None:
    """Refuse ``config`` for a run that already has task folders, when it differs from the run's config.yaml in what
    decides results; the message names each difference, old and new. A config.yaml this version cannot read (or
    none) is not compared. ``eval_network``: the network this session scores with (None: it does not score),
    refused when it is not the one the run's scored tasks had; so is ``eval_profile``, the scoring profile."""
    if not layout.config.exists() or not any(layout.tasks.glob("*")):
        return
    try:
        before = RunConfig.model_validate(yaml.safe_load(layout.config.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError, ValidationError, TypeError):
        return
    was, now = _identity(before), _identity(config)
    if before.containers.image_template is None:  # a run from before the template was recorded: unknown
        was["containers"].pop("image_template")
        now["containers"].pop("image_template")
    changes = _differences(was, now)
    scored_network, scored_profile = _scored_with(layout)
    if eval_network is not None and scored_network is not None and scored_network != eval_network:
        changes.append((SCORING_NETWORK, _on(scored_network), _on(eval_network)))
    if eval_profile is not None and scored_profile is not None and scored_profile != eval_profile:
        changes.append((SCORING_PROFILE, scored_profile, eval_profile))
    if changes:
        named = "; ".join(f"{key}: {_short(old)} -> {_short(new)}" for key, old, new in changes[:SHOWN])
        more = f" (and {len(changes) - SHOWN} more)" if len(changes) > SHOWN else ""
        raise SwepipeError(
            f"run {layout.run_id} ran with another config ({named}{more}); resuming would mix two configs in one run "
            f"directory. Resume with the config it ran with ({layout.config}), or start a new --run-id (with "
            f"--reuse-juniors-from {layout.run_id} to keep its paid rollouts)")


def _identity(config: RunConfig) -> dict[str, Any]:
    data = {key: value for key, value in config.model_dump(mode="json").items() if key not in FREE_TO_CHANGE}
    data["containers"] = {key: data["containers"][key] for key in CONTAINER_FIELDS_DECIDING}
    data["models"] = {role: {key: value for key, value in spec.items() if key not in MODEL_FIELDS_FREE_TO_CHANGE}
                      for role, spec in data.get("models", {}).items()}
    return data


def _differences(old: object, new: object, prefix: str = "") -> list[tuple[str, object, object]]:
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new), key=str):
            found += _differences(old.get(key), new.get(key), f"{prefix}.{key}" if prefix else str(key))
        return found
    return [] if old == new else [(prefix, old, new)]


def _scored_with(layout: RunLayout) -> tuple[bool | None, str | None]:
    """Whether the run's scored tasks had the network, and their scoring profile (from a scored task's
    eval/result.json); None for what no scored task records yet."""
    for folder in sorted(layout.tasks.glob("*")):
        record = EvalResult.read(TaskPaths(folder).eval_files.result)
        if not isinstance(record, Unreadable) and "network" in record.model_fields_set:
            profile = record.scorer.get("profile") if isinstance(record.scorer, dict) else None
            return bool(record.network), profile
    return None, None


def _on(network: bool) -> str:
    return "on" if network else "off"


def _short(value: object) -> str:
    text = "unset" if value is None else json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 120 else text[:57] + "..." + text[-60:]  # a long path keeps its end
