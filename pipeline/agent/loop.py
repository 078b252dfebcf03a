"""The ReAct loop: ask the model, run its one bash command, show it the result, until it submits."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline.agent.actions import FormatError, parse_action
from pipeline.errors import RuntimeUnavailable
from pipeline.storage import write_json_atomic
from pipeline.models.budget import Budget, CostLimitExceeded
from pipeline.models.client import ModelCallFailed, ModelClient
from pipeline.prompts import render
from pipeline.runtime.base import Runtime

EXIT_REASONS = ("submitted", "step_limit", "cost_limit", "time_limit", "format_errors", "model_error",
                "runtime_error")


@dataclass
class AgentLimits:
    max_steps: int = 50
    max_format_errors: int = 3
    wall_time: float = 1800.0
    command_timeout: float = 120.0
    observation_limit: int = 10_000


@dataclass
class Step:
    index: int
    reply: str
    command: str | None = None
    exit_code: int | None = None
    output: str | None = None
    timed_out: bool = False
    format_error: str | None = None
    model_seconds: float = 0.0
    command_seconds: float = 0.0
    seconds: float = 0.0  # the whole step: model, command, bookkeeping
    cost: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass
class AgentRun:
    name: str
    exit_reason: str = ""
    error: str | None = None
    messages: list[dict] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    cost: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    started: float = field(default_factory=time.time)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


class _Stop(Exception):
    def __init__(self, reason: str, error: str | None = None):
        super().__init__(reason)
        self.reason, self.error = reason, error


def run_agent(client: ModelClient, runtime: Runtime, task_text: str, budget: Budget, limits: AgentLimits, *,
              name: str = "agent", agent_index: int = 0, temperature: float | None = None, seed: int | None = None,
              trajectory_path: Path | None = None) -> AgentRun:
    """Run until the model submits or a limit ends it; the trajectory is saved after every step."""
    run = AgentRun(name=name)
    variables = dict(workdir=str(runtime.workdir), command_timeout=int(limits.command_timeout),
                     max_steps=limits.max_steps, task_text=task_text)
    run.messages = [{"role": "system", "content": render("agent_system.md.j2", **variables)},
                    {"role": "user", "content": render("agent_instance.md.j2", **variables)}]
    started = time.monotonic()
    format_errors = 0

    def save() -> None:
        run.seconds = round(time.monotonic() - started, 3)
        if trajectory_path is not None:
            write_json_atomic(trajectory_path, run.to_dict())

    try:
        while True:
            if len(run.steps) >= limits.max_steps:
                raise _Stop("step_limit")
            if time.monotonic() - started > limits.wall_time:
                raise _Stop("time_limit")
            step_started = time.monotonic()
            step = _ask(client, run, budget, agent_index, temperature, seed, name)
            try:
                action = parse_action(step.reply)
            except FormatError as error:
                format_errors += 1
                step.format_error = str(error)
                run.messages.append({"role": "user", "content": render("format_error.md.j2", error=str(error))})
                step.seconds = round(time.monotonic() - step_started, 4)
                save()
                if format_errors >= limits.max_format_errors:
                    raise _Stop("format_errors", f"{format_errors} replies without exactly one bash block")
                continue
            step.command = action.command
            if action.is_submit:
                step.seconds = round(time.monotonic() - step_started, 4)
                save()
                raise _Stop("submitted")
            _execute(runtime, step, run, limits)
            step.seconds = round(time.monotonic() - step_started, 4)
            save()
    except _Stop as stop:
        run.exit_reason, run.error = stop.reason, stop.error
    save()
    return run


def _ask(client, run: AgentRun, budget, agent_index, temperature, seed, name) -> Step:
    try:
        completion = client.complete(run.messages, budget, agent=name, agent_index=agent_index,
                                     temperature=temperature, seed=seed)
    except CostLimitExceeded as error:
        raise _Stop("cost_limit", str(error)) from None
    except ModelCallFailed as error:
        raise _Stop("model_error", str(error)) from None
    step = Step(index=len(run.steps), reply=completion.content, model_seconds=round(completion.latency, 4),
                cost=completion.cost, input_tokens=completion.input_tokens, output_tokens=completion.output_tokens)
    run.steps.append(step)
    run.cost += completion.cost
    run.input_tokens += completion.input_tokens
    run.output_tokens += completion.output_tokens
    run.messages.append({"role": "assistant", "content": completion.content})
    return step


def _execute(runtime: Runtime, step: Step, run: AgentRun, limits: AgentLimits) -> None:
    try:
        result = runtime.run(step.command, timeout=limits.command_timeout, output_limit=limits.observation_limit)
    except (RuntimeUnavailable, OSError) as error:
        raise _Stop("runtime_error", str(error)) from None
    step.exit_code, step.output, step.timed_out = result.exit_code, result.output, result.timed_out
    step.command_seconds = round(result.duration, 4)
    observation = render("observation.md.j2", exit_code=result.exit_code, output=result.output,
                         timed_out=result.timed_out, timeout=int(limits.command_timeout), cut_bytes=result.cut_bytes)
    run.messages.append({"role": "user", "content": observation})
