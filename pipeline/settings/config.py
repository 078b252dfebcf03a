"""A run's configuration: models per role, budgets, agent limits, juniors, containers.

Read from YAML (``--config``), then overridden by command-line flags. It never holds a secret: API
keys come from the environment only, so the resolved config can be written next to the results.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pipeline.errors import SwepipeError
from pipeline.settings.config_overlay import Assignment, overlay, validation_problems
from pipeline.settings.model_spec import ModelSpec, Role

if TYPE_CHECKING:
    from pipeline.control.outages import Settings


class Budgets(BaseModel):
    """Dollar limits; None means no limit."""

    model_config = ConfigDict(extra="forbid")
    per_rollout: float | None = Field(default=None, ge=0, description="one agent: a junior rollout, a worker")
    per_task: float | None = Field(default=None, ge=0, description="all stages of one task")
    per_run: float | None = Field(default=None, ge=0, description="the whole run, across sessions")
    principal_reserve: float | None = Field(
        default=None, ge=0, description="of per_task, held back for the principal (strategies with one): "
                                        "juniors and the senior draw from the rest")

    @model_validator(mode="after")
    def _reserve_fits(self) -> Budgets:
        if self.principal_reserve is not None and self.per_task is not None and self.principal_reserve > self.per_task:
            raise ValueError(f"principal_reserve (${self.principal_reserve}) is more than per_task "
                             f"(${self.per_task}): the principal's reserve is a part of the task's budget")
        return self


class Limits(BaseModel):
    """What one agent session may use; every agent role gets these (the senior and workers adjust steps)."""

    model_config = ConfigDict(extra="forbid")
    max_steps: int = Field(default=50, gt=0, description="model replies per agent session")
    max_format_errors: int = Field(default=3, gt=0, description="unusable replies before the agent is ended")
    wall_time: float = Field(default=1800, gt=0, description="seconds per agent session")
    command_timeout: float = Field(default=120, gt=0, description="seconds one command may run")
    observation_limit: int = Field(default=10_000, gt=100, description="bytes of command output shown")
    action_format: Literal["text", "tools"] = Field(
        default="text", description="text: one ```bash block per reply; tools: bash/submit function calls")
    editor: bool = Field(default=True, description="the file editor beside bash (view, create, str_replace, insert, "
                         "undo_edit; the senior only views): text format ```edit and ```view blocks, tools format "
                         "the str_replace_editor function; false: bash only")
    compact_after: int | None = Field(default=None, ge=0, description="send only the last N observations whole, "
                                      "older ones cut to compact_chars at each end (the trajectory keeps them "
                                      "whole); unset: every observation whole")
    compact_chars: int = Field(default=1000, ge=50, description="characters kept at each end of an older "
                               "observation when compact_after is set")
    leave_out_scratch: bool = Field(default=False, description="a junior's and a solo agent's patch leaves out its "
                                    "scratch files, as the pool does (a new file no other edit imports or "
                                    "references, outside the source tree or named like a reproduction script); "
                                    "what was left out is recorded (scratch_left_out)")


class Containers(BaseModel):
    """Where agents' commands run, and what every container (agents, scoring) may use. Unset limits are
    sized from the machine and from how many containers run at once (K rollouts x task workers)."""

    model_config = ConfigDict(extra="forbid")
    image_template: str | None = Field(default=None, description="image name from task fields, e.g. "
                                       "jefzda/sweap-images:{dockerhub_tag} (default: the dataset's)")
    platform: str | None = Field(default=None, description="Docker platform, e.g. linux/amd64")
    cpus: float | None = Field(default=None, gt=0, description="CPUs per container (default: the machine's "
                               "CPUs shared by the containers running at once, at least 1)")
    memory: str | None = Field(default=None, description="memory per container, e.g. 4g, no swap on top "
                               "(default: 3/4 of the machine's memory shared by the containers running at once)")
    pids_limit: int | None = Field(default=None, ge=32, description="processes and threads per container: a fork "
                                   "bomb stops here (default: 1024, more on big machines, within the kernel's "
                                   "pid_max)")
    tmp_size: str | None = Field(default=None, description="size of each container's /tmp, a tmpfs counted in its "
                                 "memory, e.g. 1g (default: a quarter of memory, at most 2g)")
    file_size: str | None = Field(default=None, description="largest file a command may write anywhere "
                                  "(RLIMIT_FSIZE), e.g. 2g (default 2g)")
    disk: str | None = Field(default=None, description="writable layer per container where the storage driver has "
                             "quotas (overlay2 on xfs with pquota, btrfs, zfs), e.g. 10g (default 10g; elsewhere "
                             "file_size and the command timeout bound a runaway write)")
    network: bool = Field(default=False, description="give agents' containers the network")
    image_cache_gb: float | None = Field(default=None, gt=0, description="disk budget for the run's task images "
                                         "and their sanitised copies: after each task, those of finished tasks are "
                                         "removed least recently used first down to it (default: no limit)")
    impl: str | None = Field(default=None, description="import string of a replacement for "
                             "pipeline.runtime.factory:open_runtime (same signature)")


class ScheduleConfig(BaseModel):
    """Adaptive rollouts: start with `first`, add waves of `wave` up to K, stop once the pool has converged."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = Field(default=False, description="off: all K rollouts start at once (fixed K)")
    first: int = Field(default=3, ge=1, description="rollouts of the first wave (K0)")
    wave: int = Field(default=2, ge=1, description="rollouts added by each later wave, up to juniors.k")
    top_share: float | None = Field(default=0.6, gt=0, le=1, description="stop when the top source candidate holds "
                                    "at least this share of the submitted rollouts' votes (unset: rule off)")
    min_submitted: int = Field(default=3, ge=1, description="top_share needs at least this many submitted rollouts")
    no_new_files: bool = Field(default=True, description="stop when a wave's candidates add no file to the pool's "
                               "changed source files")


class Juniors(BaseModel):
    """The junior stage: K independent rollouts of the cheap model."""

    model_config = ConfigDict(extra="forbid")
    k: int = Field(default=10, ge=0, le=64, description="rollouts per task (0: no juniors, the senior explores "
                   "alone)")
    temperatures: list[float] | None = Field(
        default=None, description="rollout i uses temperatures[i mod n]; unset: the junior model's own temperature "
                                  "when models.junior.temperature is set, else a spread that does not repeat for K<=10")
    seed: int = Field(default=0, description="rollout i uses seed + i")
    max_patch_bytes: int = Field(default=4_000_000, ge=1000, description="largest candidate patch kept, in bytes; a "
                                 "rollout whose diff is bigger ends patch_too_large and its patch is dropped")
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    imported: list[str] = Field(default_factory=list, description="candidates taken in as rollouts after this run's "
                                "own (run --juniors-from): swepipe runs, predictions files or folders of "
                                "trajectories, as absolute paths; each source's patch for a task is one rollout")

    @model_validator(mode="after")
    def _imports_come_after_the_rollouts(self) -> Juniors:
        if self.imported and self.schedule.enabled and self.k > 0:
            raise ValueError("juniors.schedule with imported candidates (--juniors-from): the schedule decides how "
                             "many rollouts to run from the pool so far, which the imports would change; turn the "
                             "schedule off or run no juniors of this run's own (-k 0)")
        return self


class SeniorConfig(BaseModel):
    """The senior stage: the candidates' code expanded, a mid-tier model's brief, the principal's context."""

    model_config = ConfigDict(extra="forbid")
    impl: str | None = Field(default=None, description="import string of a replacement senior stage "
                             "(a class like pipeline.senior.stage:Senior)")
    max_steps: int = Field(default=15, gt=0, description="read-only commands the senior may run")
    context_tokens: int = Field(default=12_000, gt=100, description="budget of the context the principal gets")
    expansion_tokens: int = Field(default=6_000, gt=100, description="related code shown to the senior")


class SkipWhen(BaseModel):
    """Submit the top junior candidate without the senior and principal calls when the juniors agree strongly."""

    model_config = ConfigDict(extra="forbid")
    top_share: float | None = Field(default=None, gt=0, le=1, description="skip when the top source candidate holds "
                                    "at least this share of the submitted rollouts' votes (unset: never skip)")
    min_submitted: int = Field(default=3, ge=1, description="and at least this many rollouts submitted")


class PrincipalConfig(BaseModel):
    """The principal stage: one call to the frontier model, its edits made a clean diff."""

    model_config = ConfigDict(extra="forbid")
    impl: str | None = Field(default=None, description="import string of a replacement principal stage "
                             "(a class like pipeline.principal.stage:Principal)")
    show_candidates: int | None = Field(
        default=None, ge=0, description="most-voted distinct junior candidates shown to the principal (unset: all "
                                        "that fit candidate_tokens; 0: none)")
    candidate_tokens: int = Field(default=8_000, gt=100, description="budget of the candidates shown to the principal")
    fallback: Literal["junior_top", "none"] = Field(
        default="junior_top", description="when the edits stay unusable after one retry: the most-voted "
                                          "applicable junior candidate, or nothing")
    skip_when: SkipWhen = Field(default_factory=SkipWhen)


class TeamConfig(BaseModel):
    """The team strategy: a lead agent delegating subtasks to worker agents in its workspace."""

    model_config = ConfigDict(extra="forbid")
    stages: Literal["planning", "implementation", "verification", "all"] = Field(
        default="all", description="which stage workers serve")
    mode: Literal["blocking", "async"] = Field(
        default="blocking", description="blocking: the lead waits for the workers it delegated to; async: they run "
                                        "on threads while the lead works")
    size: int | None = Field(default=None, ge=1, le=16, description="workers at a time: the whole team when sizing "
                             "is fixed (default 3); the most the lead may run at once when sizing is lead (default 16, "
                             "the study's range)")
    sizing: Literal["fixed", "lead"] = Field(
        default="lead", description="fixed: every delegation uses the whole team; lead: the lead picks 1..size")
    submit_guard: bool = Field(default=True, description="refuse the lead's submit while workers run or reports are "
                               "unread (off: the lead may finish early and the workers' later work is lost, the "
                               "study's async failure mode)")
    directory: bool = Field(default=True, description="workers see the team directory (the other workers and their "
                            "tasks); off: each worker is unaware of the others, the study's baseline")
    lead_prompt: Literal["minimal", "piv"] = Field(
        default="minimal", description="the lead's system prompt: minimal, or piv (plan, implement, verify)")
    messages: bool = Field(default=True, description="agents may message each other")
    worker_max_steps: int | None = Field(default=None, gt=0, description="commands per worker (default max_steps)")
    report_chars: int = Field(default=4000, gt=100, description="longest worker report the lead reads")

    @property
    def team_size(self) -> int:
        """The team's size: ``size``, else 3 for a fixed team and 16 for a lead that sizes its own."""
        return self.size or (3 if self.sizing == "fixed" else 16)

    @property
    def allowed_stages(self) -> tuple[str, ...]:
        return ("planning", "implementation", "verification") if self.stages == "all" else (self.stages,)


class SoloConfig(BaseModel):
    """The solo baseline: one agent end to end."""

    model_config = ConfigDict(extra="forbid")
    prompt: Literal["minimal", "piv"] = Field(
        default="minimal", description="the agent's system prompt: minimal, or piv (plan, implement, verify)")


class ExecutorConfig(BaseModel):
    """Where a run's tasks run: threads on this machine, or Ray across a cluster (``pip install 'swepipe[ray]'``).
    One task is the unit either way; its stages run in order on one machine, which holds its image."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["threads", "ray"] = Field(default="threads", description="threads (this machine) or ray")
    ray_address: str = Field(default="auto", description="the Ray cluster to join: auto (the one `ray start` "
                             "began on this machine) or ray://host:port")
    slots_per_task: int | None = Field(default=None, ge=1, description="docker_slots one task holds on its node "
                                       "(default: its most containers at once, juniors.k, at least 1)")


class Faults(BaseModel):
    """Waiting out infrastructure faults: a model endpoint (a provider, a model server) that keeps failing past
    its retries pauses its calls, then stops the run for a rerun to resume."""

    model_config = ConfigDict(extra="forbid")
    pause_after: int = Field(default=3, ge=1, description="consecutive failures on one endpoint before its calls "
                             "pause (one call at a time then probes it, after growing waits)")
    outage_seconds: float = Field(default=300, gt=0, description="an endpoint failing this long stops the run "
                                  "(exit 1; the same --run-id resumes it without paying twice)")
    max_wait: float = Field(default=60, gt=0, description="the longest wait between two probes of a paused endpoint")

    def breaker_settings(self) -> Settings:
        from pipeline.control.outages import Settings

        return Settings(pause_after=self.pause_after, outage_seconds=self.outage_seconds, max_wait=self.max_wait,
                        first_wait=min(self.max_wait, Settings.first_wait))


class RunConfig(BaseModel):
    """Everything a run is configured with; stages receive these models as they are."""

    model_config = ConfigDict(extra="forbid")
    strategy: str = Field(default="pipeline", description="pipeline, solo, team, vote, or the import string "
                                                         "of a Strategy class (mypkg.mod:MyStrategy)")
    models: dict[str, ModelSpec] = Field(default_factory=dict, description="the model of each role")
    budgets: Budgets = Field(default_factory=Budgets)
    limits: Limits = Field(default_factory=Limits)
    juniors: Juniors = Field(default_factory=Juniors)
    containers: Containers = Field(default_factory=Containers)
    senior: SeniorConfig = Field(default_factory=SeniorConfig)
    principal: PrincipalConfig = Field(default_factory=PrincipalConfig)
    team: TeamConfig = Field(default_factory=TeamConfig)
    solo: SoloConfig = Field(default_factory=SoloConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    faults: Faults = Field(default_factory=Faults)

    @model_validator(mode="after")
    def _something_finds_the_code(self) -> RunConfig:
        if self.strategy == "pipeline" and self.juniors.k == 0 and not self.plays(Role.SENIOR):
            raise ValueError("juniors.k is 0 and the senior model is none: nothing would look at the code; "
                             "keep juniors (-k N) or a senior model")
        return self

    def plays(self, role: str) -> bool:
        """False when the role is switched off (model ``none``: an ablation), True otherwise (also when unset:
        the local model plays it)."""
        spec = self.models.get(role)
        return spec is None or not spec.is_none

    def senior_limits(self) -> Limits:
        return self.limits.model_copy(update={"max_steps": self.senior.max_steps})

    def worker_limits(self) -> Limits:
        return self.limits.model_copy(update={"max_steps": self.team.worker_max_steps or self.limits.max_steps})

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


def commented_yaml(config: BaseModel, indent: int = 0) -> str:
    """``config`` as YAML with every option, its value and its description as a comment."""
    lines = []
    pad = "  " * indent
    for name, field in type(config).model_fields.items():
        value = getattr(config, name)
        note = f"  # {field.description}" if field.description else ""
        if isinstance(value, BaseModel):
            doc = (type(value).__doc__ or "").strip().splitlines()
            lines.append(f"{pad}{name}:{'  # ' + doc[0] if doc else ''}")
            lines.append(commented_yaml(value, indent + 1).rstrip("\n"))
        elif isinstance(value, dict) and value and all(isinstance(v, BaseModel) for v in value.values()):
            lines.append(f"{pad}{name}:{note}")
            for key, item in value.items():
                lines.append(f"{pad}  {key}:")
                lines.append(commented_yaml(item, indent + 2).rstrip("\n"))
        else:
            dumped = yaml.safe_dump({name: value if not isinstance(value, BaseModel)
                                     else value.model_dump(mode="json")},
                                    default_flow_style=True, width=10_000).strip()
            lines.append(f"{pad}{dumped[1:-1] if dumped.startswith('{') else dumped}{note}")
    return "\n".join(lines) + "\n"


def load_config(path: Path | None, assignments: Iterable[Assignment] = ()) -> RunConfig:
    """The config file (none: the defaults) with the command line's ``assignments`` on top
    (pipeline.settings.config_overlay), checked once."""
    data: dict = {}
    if path is not None:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except OSError as error:
            raise SwepipeError(f"cannot read the config file {path}: {error}") from None
        except yaml.YAMLError as error:
            raise SwepipeError(f"the config file {path} is not valid YAML: {error}") from None
        if not isinstance(data, dict):
            raise SwepipeError(f"the config file {path} is not a mapping of options (it holds a "
                               f"{type(data).__name__})")
        unknown_roles = sorted(set((data.get("models") or {})) - set(Role))
        if unknown_roles:
            raise SwepipeError(f"{path}: unknown role(s) {', '.join(unknown_roles)} under models; roles are "
                               f"{', '.join(Role)}")
    assignments = list(assignments)
    merged = overlay(data, assignments, RunConfig)
    try:
        return RunConfig.model_validate(merged)
    except ValidationError as error:
        raise SwepipeError(validation_problems(error, assignments, str(path) if path else None)) from None
