"""A run's configuration: models per role, budgets, agent limits, juniors, containers.

Read from YAML (``--config``), then overridden by command-line flags. It never holds a secret: API
keys come from the environment only, so the resolved config can be written next to the results.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipeline.agent.loop import AgentLimits
from pipeline.errors import SwepipeError
from pipeline.models.spec import ROLES, ModelSpec


class Budgets(BaseModel):
    """Dollar limits; None means no limit."""

    model_config = ConfigDict(extra="forbid")
    per_rollout: float | None = Field(default=None, ge=0)
    per_task: float | None = Field(default=None, ge=0)
    per_run: float | None = Field(default=None, ge=0)


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_steps: int = Field(default=50, gt=0)
    max_format_errors: int = Field(default=3, gt=0)
    wall_time: float = Field(default=1800, gt=0, description="seconds per agent")
    command_timeout: float = Field(default=120, gt=0)
    observation_limit: int = Field(default=10_000, gt=100, description="bytes of command output shown")
    action_format: Literal["text", "tools"] = Field(
        default="text", description="text: one ```bash block per reply; tools: bash/submit function calls")

    def agent_limits(self) -> AgentLimits:
        return AgentLimits(**self.model_dump())


class Containers(BaseModel):
    model_config = ConfigDict(extra="forbid")
    image_template: str | None = None
    platform: str | None = None
    cpus: float | None = Field(default=None, gt=0)
    memory: str | None = Field(default=None, description="e.g. 4g")
    network: bool = False


class Juniors(BaseModel):
    model_config = ConfigDict(extra="forbid")
    k: int = Field(default=4, ge=1, le=64)
    temperatures: list[float] = Field(default_factory=lambda: [0.0, 0.4, 0.7, 1.0],
                                      description="rollout i uses temperatures[i mod n]")
    seed: int = 0


class SeniorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_steps: int = Field(default=15, gt=0, description="read-only commands the senior may run")
    context_tokens: int = Field(default=12_000, gt=100, description="budget of the context the principal gets")
    expansion_tokens: int = Field(default=6_000, gt=100, description="related code shown to the senior")


class PrincipalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    show_candidates: int = Field(default=0, ge=0, description="top junior candidates shown to the principal")
    fallback: Literal["junior_top", "none"] = "junior_top"


class TeamConfig(BaseModel):
    """The team strategy: a lead agent delegating subtasks to worker agents in its workspace."""

    model_config = ConfigDict(extra="forbid")
    stages: Literal["planning", "implementation", "verification", "all"] = Field(
        default="all", description="which stage workers serve")
    mode: Literal["blocking", "async"] = Field(
        default="blocking", description="blocking: the lead waits for the workers it delegated to; async: they run "
                                        "on threads while the lead works")
    size: int = Field(default=3, ge=1, le=16, description="workers at a time (the cap when sizing is lead)")
    sizing: Literal["fixed", "lead"] = Field(
        default="lead", description="fixed: every delegation uses the whole team; lead: the lead picks 1..size")
    messages: bool = Field(default=True, description="agents may message each other")
    worker_max_steps: int | None = Field(default=None, gt=0, description="commands per worker (default max_steps)")
    report_chars: int = Field(default=4000, gt=100, description="longest worker report the lead reads")


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    models: dict[str, ModelSpec] = Field(default_factory=dict)
    budgets: Budgets = Field(default_factory=Budgets)
    limits: Limits = Field(default_factory=Limits)
    juniors: Juniors = Field(default_factory=Juniors)
    containers: Containers = Field(default_factory=Containers)
    senior: SeniorConfig = Field(default_factory=SeniorConfig)
    principal: PrincipalConfig = Field(default_factory=PrincipalConfig)
    team: TeamConfig = Field(default_factory=TeamConfig)

    def model_for(self, role: str) -> ModelSpec:
        if role not in self.models:
            raise SwepipeError(f"no model configured for the {role} role: pass --{role}-model MODEL "
                               f"or set models.{role}.model in the config file")
        return self.models[role]

    def with_model(self, role: str, model: str | None) -> RunConfig:
        """The config with ``role`` played by ``model`` (other options of that role kept)."""
        if not model:
            return self
        current = self.models.get(role)
        spec = current.model_copy(update={"model": model}) if current else ModelSpec(model=model)
        if current and current.model != model:
            spec = spec.model_copy(update={"prices": None})  # a new model's price is not the old one's
        return self.model_copy(update={"models": {**self.models, role: spec}})

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def load_config(path: Path | None) -> RunConfig:
    if path is None:
        return RunConfig()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as error:
        raise SwepipeError(f"cannot read the config file {path}: {error}") from None
    except yaml.YAMLError as error:
        raise SwepipeError(f"the config file {path} is not valid YAML: {error}") from None
    unknown_roles = sorted(set((data.get("models") or {})) - set(ROLES))
    if unknown_roles:
        raise SwepipeError(f"{path}: unknown role(s) {', '.join(unknown_roles)} under models; roles are "
                           f"{', '.join(ROLES)}")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise SwepipeError(f"{path}: {problems}") from None
