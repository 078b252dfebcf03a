"""The ReAct loop: ask the model, run its one bash command, show it the result, until it submits."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline.agent.actions import TOOLS, FormatError, parse_action, parse_tool_action
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
    action_format: str = "text"  # or "tools": the model calls bash/submit functions instead


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
    tool_calls: list = field(default_factory=list)  # in the tool-call format
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
    resumed: bool = False  # continued from a trajectory an interrupted run left

    def to_dict(self) -> dict:
        return asdict(self)


class _Stop(Exception):
    def __init__(self, reason: str, error: str | None = None):
        super().__init__(reason)
        self.reason, self.error = reason, error


@dataclass
class Prompts:
    """Which templates frame the agent; both get ``workdir``, ``command_timeout``, ``max_steps``,
    ``task_text`` and any ``extra`` variables."""

    system: str = "agent_system.md.j2"
    instance: str = "agent_instance.md.j2"
    extra: dict = field(default_factory=dict)


def run_agent(client: ModelClient, runtime: Runtime, task_text: str, budget: Budget, limits: AgentLimits, *,
              name: str = "agent", agent_index: int = 0, temperature: float | None = None, seed: int | None = None,
              trajectory_path: Path | None = None, prompts: Prompts | None = None,
              check_submission: Callable[[str], str | None] | None = None) -> AgentRun:
    """Run until the model submits or a limit ends it; the trajectory is saved after every step.

    ``check_submission`` sees the submitting reply and returns what is wrong with it (the agent is
    told and goes on, as for a format error), or None to accept it. A trajectory left at
    ``trajectory_path`` by an interrupted run is resumed: its commands are replayed in the fresh
    workspace and the conversation goes on from there, so no model call is paid for twice.
    """
    prompts = prompts or Prompts()
    tools = limits.action_format == "tools"
    if tools and prompts.system == Prompts.system:
        prompts = Prompts("agent_system_tools.md.j2", prompts.instance, prompts.extra)
    run = _resume(trajectory_path, runtime, limits, budget) if trajectory_path else None
    if run is None:
        run = AgentRun(name=name)
        variables = dict(workdir=str(runtime.workdir), command_timeout=int(limits.command_timeout),
                         max_steps=limits.max_steps, task_text=task_text, **prompts.extra)
        run.messages = [{"role": "system", "content": render(prompts.system, **variables)},
                        {"role": "user", "content": render(prompts.instance, **variables)}]
    if run.exit_reason:  # it had finished; only its workspace needed rebuilding
        return run
    started = time.monotonic() - run.seconds
    format_errors = sum(1 for step in run.steps if step.format_error)

    def save() -> None:
        run.seconds = round(time.monotonic() - started, 3)
        if trajectory_path is not None:
            write_json_atomic(trajectory_path, run.to_dict())

    def reject(step: Step, problem: str) -> None:
        nonlocal format_errors
        format_errors += 1
        step.format_error = problem
        _answer(run, step, render("format_error_tools.md.j2" if tools else "format_error.md.j2", error=problem))
        save()
        if format_errors >= limits.max_format_errors:
            raise _Stop("format_errors", f"{format_errors} unusable replies, the last: {problem}")

    def handle(step: Step, step_started: float) -> None:
        """Act on a reply: correct its format, accept its submission, or run its command."""
        try:
            action = parse_tool_action(step.tool_calls) if tools else parse_action(step.reply)
        except FormatError as error:
            step.seconds = round(time.monotonic() - step_started, 4)
            reject(step, str(error))
            return
        step.command = action.command
        if action.is_submit:
            problem = check_submission(step.reply) if check_submission else None
            step.seconds = round(time.monotonic() - step_started, 4)
            if problem:
                reject(step, problem)
                return
            save()
            raise _Stop("submitted")
        _execute(runtime, step, run, limits)
        step.seconds = round(time.monotonic() - step_started, 4)
        save()

    try:
        if run.messages[-1]["role"] == "assistant":  # resumed right after a paid reply: act on it
            handle(run.steps[-1], time.monotonic())
        while True:
            if len(run.steps) >= limits.max_steps:
                raise _Stop("step_limit")
            if time.monotonic() - started > limits.wall_time:
                raise _Stop("time_limit")
            step_started = time.monotonic()
            step = _ask(client, run, budget, agent_index, temperature, seed, name, tools)
            save()  # the reply is paid for: a crash from here on must not lose it
            handle(step, step_started)
    except _Stop as stop:
        run.exit_reason, run.error = stop.reason, stop.error
    save()
    return run


def _resume(path: Path, runtime: Runtime, limits: AgentLimits, budget: Budget) -> AgentRun | None:
    """The saved run at ``path`` with its commands replayed, or None when there is nothing to resume."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not saved.get("messages"):
        return None
    steps = [Step(**step) for step in saved.get("steps", [])]
    run = AgentRun(name=saved["name"], messages=saved["messages"], steps=steps, cost=saved.get("cost", 0.0),
                   input_tokens=saved.get("input_tokens", 0), output_tokens=saved.get("output_tokens", 0),
                   seconds=saved.get("seconds", 0.0), resumed=True, exit_reason=saved.get("exit_reason") or "",
                   error=saved.get("error"))
    budget.charge(run.cost)  # already spent, so it still counts against the limits
    for step in run.steps:  # rebuild the workspace: the commands that ran, in order
        if step.command and step.exit_code is not None:
            runtime.run(step.command, timeout=limits.command_timeout, output_limit=1000)
    return run


def _ask(client, run: AgentRun, budget, agent_index, temperature, seed, name, tools: bool = False) -> Step:
    try:
        completion = client.complete(run.messages, budget, agent=name, agent_index=agent_index,
                                     temperature=temperature, seed=seed, tools=TOOLS if tools else None)
    except CostLimitExceeded as error:
        raise _Stop("cost_limit", str(error)) from None
    except ModelCallFailed as error:
        raise _Stop("model_error", str(error)) from None
    step = Step(index=len(run.steps), reply=completion.content, model_seconds=round(completion.latency, 4),
                cost=completion.cost, input_tokens=completion.input_tokens, output_tokens=completion.output_tokens,
                tool_calls=completion.tool_calls)
    run.steps.append(step)
    run.cost += completion.cost
    run.input_tokens += completion.input_tokens
    run.output_tokens += completion.output_tokens
    message = {"role": "assistant", "content": completion.content}
    if completion.tool_calls:
        message["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}}
                                 for c in completion.tool_calls]
    run.messages.append(message)
    return step


def _answer(run: AgentRun, step: Step, text: str) -> None:
    """What the agent is told after a step: a tool result for each of its calls, else a user message."""
    if step.tool_calls:
        run.messages.extend({"role": "tool", "tool_call_id": call["id"], "content": text} for call in step.tool_calls)
    else:
        run.messages.append({"role": "user", "content": text})


def _execute(runtime: Runtime, step: Step, run: AgentRun, limits: AgentLimits) -> None:
    try:
        result = runtime.run(step.command, timeout=limits.command_timeout, output_limit=limits.observation_limit)
    except (RuntimeUnavailable, OSError) as error:
        raise _Stop("runtime_error", str(error)) from None
    step.exit_code, step.output, step.timed_out = result.exit_code, result.output, result.timed_out
    step.command_seconds = round(result.duration, 4)
    observation = render("observation.md.j2", exit_code=result.exit_code, output=result.output,
                         timed_out=result.timed_out, timeout=int(limits.command_timeout), cut_bytes=result.cut_bytes)
    _answer(run, step, observation)
