"""A team member's ReAct loop: the agent loop's steps, plus team actions and messages that arrive meanwhile.

Like ``pipeline.agent.loop.run_agent`` (same Step and AgentRun records, same templates for command
output), with three additions: a reply may hold a team action instead of a bash block, whose
handler's text is the observation; items put in the agent's inbox by other threads are shown to it
before its next turn; and a run can be stopped from outside, or resumed with new instructions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.agent.actions import FormatError
from pipeline.agent.loop import AgentLimits, AgentRun, Step
from pipeline.errors import RuntimeUnavailable
from pipeline.models.budget import Budget, CostLimitExceeded
from pipeline.models.client import ModelCallFailed, ModelClient
from pipeline.prompts import render
from pipeline.storage import write_json_atomic
from pipeline.team.actions import ActionError, TeamAction, parse_team_action


@dataclass
class TeamStep(Step):
    action: str = ""  # bash, submit, delegate, message, ...
    changed_files: list[str] = field(default_factory=list)  # paths this step's command changed (workers)


@dataclass
class InboxItem:
    sender: str
    kind: str  # message or report
    text: str
    on_delivery: Callable[[], None] | None = None


class Inbox:
    """What other threads left for an agent; read at its next turn (or taken by an action)."""

    def __init__(self) -> None:
        self._items: list[InboxItem] = []
        self._lock = threading.Lock()

    def put(self, item: InboxItem) -> None:
        with self._lock:
            self._items.append(item)

    def take(self, match: Callable[[InboxItem], bool] = lambda item: True) -> list[InboxItem]:
        with self._lock:
            taken = [item for item in self._items if match(item)]
            self._items = [item for item in self._items if not match(item)]
        for item in taken:
            if item.on_delivery:
                item.on_delivery()
        return taken

    def peek(self) -> list[InboxItem]:
        with self._lock:
            return list(self._items)


class _Stop(Exception):
    def __init__(self, reason: str, error: str | None = None):
        super().__init__(reason)
        self.reason, self.error = reason, error


@dataclass
class Hooks:
    """What makes an agent a lead or a worker."""

    actions: dict[str, Callable[[str], str]]  # team action kind -> handler(body) -> observation
    check_submission: Callable[[str], str | None] | None = None  # a problem counts as a format error
    guard_submission: Callable[[], str | None] | None = None  # a refusal does not
    track_writes: bool = False  # name the files each command changed (workers)


class TeamAgent:
    def __init__(self, name: str, client: ModelClient, workspace, budget: Budget, limits: AgentLimits,
                 messages: list[dict], hooks: Hooks, *, agent_index: int = 0, trajectory_path: Path | None = None,
                 inbox: Inbox | None = None):
        self.client, self.workspace, self.budget, self.limits, self.hooks = client, workspace, budget, limits, hooks
        self.agent_index, self.trajectory_path = agent_index, trajectory_path
        self.run = AgentRun(name=name, messages=messages)
        self.inbox = inbox or Inbox()
        self.stop_event = threading.Event()
        self.changed_files: set[str] = set()
        self._format_errors = 0
        self._lock = threading.Lock()  # guards the run record against readers on other threads

    @property
    def allowed(self) -> tuple[str, ...]:
        return ("bash", *self.hooks.actions)

    def go(self) -> AgentRun:
        """Run a session: until the agent submits, a limit ends it, or it is stopped."""
        self.run.exit_reason, self.run.error = "", None
        first_step, started = len(self.run.steps), time.monotonic()
        spent_before = self.run.seconds
        try:
            while True:
                if self.stop_event.is_set():
                    raise _Stop("stopped")
                if len(self.run.steps) - first_step >= self.limits.max_steps:
                    raise _Stop("step_limit")
                if time.monotonic() - started > self.limits.wall_time:
                    raise _Stop("time_limit")
                self.deliver()
                step_started = time.monotonic()
                step = self._ask()
                self.save(spent_before, started)
                self._handle(step, step_started)
                self.save(spent_before, started)
        except _Stop as stop:
            self.run.exit_reason, self.run.error = stop.reason, stop.error
        self.save(spent_before, started)
        return self.run

    def add_user_message(self, text: str) -> None:
        """Shown before the next turn; joined to the last user message so roles keep alternating."""
        with self._lock:
            last = self.run.messages[-1] if self.run.messages else None
            if last is not None and last["role"] == "user":
                last["content"] = f"{last['content']}\n\n{text}"
            else:
                self.run.messages.append({"role": "user", "content": text})

    def deliver(self) -> None:
        for item in self.inbox.take():
            self.add_user_message(item.text)

    def save(self, spent_before: float = 0.0, started: float | None = None) -> None:
        with self._lock:
            if started is not None:
                self.run.seconds = round(spent_before + time.monotonic() - started, 3)
            if self.trajectory_path is not None:
                write_json_atomic(self.trajectory_path, self.run.to_dict())

    def _ask(self) -> TeamStep:
        try:
            completion = self.client.complete(self.run.messages, self.budget, agent=self.run.name,
                                              agent_index=self.agent_index)
        except CostLimitExceeded as error:
            raise _Stop("cost_limit", str(error)) from None
        except ModelCallFailed as error:
            raise _Stop("model_error", str(error)) from None
        step = TeamStep(index=len(self.run.steps), reply=completion.content,
                        model_seconds=round(completion.latency, 4), cost=completion.cost,
                        input_tokens=completion.input_tokens, output_tokens=completion.output_tokens)
        with self._lock:
            self.run.steps.append(step)
            self.run.cost += completion.cost
            self.run.input_tokens += completion.input_tokens
            self.run.output_tokens += completion.output_tokens
            self.run.messages.append({"role": "assistant", "content": completion.content})
        return step

    def _handle(self, step: TeamStep, step_started: float) -> None:
        try:
            action = parse_team_action(step.reply, self.allowed)
        except FormatError as error:
            self._reject(step, str(error))
            return
        step.command, step.action = action.body, "submit" if action.is_submit else action.kind
        try:
            if action.is_submit:
                self._submit(step)
            elif action.kind == "bash":
                self._execute(step)
            else:
                self._team_action(step, action)
        finally:
            step.seconds = round(time.monotonic() - step_started, 4)

    def _submit(self, step: TeamStep) -> None:
        problem = self.hooks.check_submission(step.reply) if self.hooks.check_submission else None
        if problem:
            self._reject(step, problem)
            return
        refusal = self.hooks.guard_submission() if self.hooks.guard_submission else None
        if refusal:
            step.output = refusal
            self.add_user_message(refusal)
            return
        raise _Stop("submitted")

    def _team_action(self, step: TeamStep, action: TeamAction) -> None:
        try:
            observation = self.hooks.actions[action.kind](action.body)
        except FormatError as error:
            self._reject(step, str(error))
            return
        except ActionError as error:
            observation = f"error: {error}"
        step.output = observation
        self.add_user_message(observation)

    def _execute(self, step: TeamStep) -> None:
        limits = self.limits
        try:
            if self.hooks.track_writes:
                result, changed = self.workspace.run_tracked(step.command, timeout=limits.command_timeout,
                                                             output_limit=limits.observation_limit)
                step.changed_files = sorted(changed)
                self.changed_files |= changed
            else:
                result = self.workspace.run(step.command, timeout=limits.command_timeout,
                                            output_limit=limits.observation_limit)
        except (RuntimeUnavailable, OSError) as error:
            raise _Stop("runtime_error", str(error)) from None
        step.exit_code, step.output, step.timed_out = result.exit_code, result.output, result.timed_out
        step.command_seconds = round(result.duration, 4)
        self.add_user_message(render("observation.md.j2", exit_code=result.exit_code, output=result.output,
                                     timed_out=result.timed_out, timeout=int(limits.command_timeout),
                                     cut_bytes=result.cut_bytes))

    def _reject(self, step: TeamStep, problem: str) -> None:
        self._format_errors += 1
        step.format_error = problem
        self.add_user_message(render("team_format_error.md.j2", error=problem, actions=self.allowed))
        if self._format_errors >= self.limits.max_format_errors:
            raise _Stop("format_errors", f"{self._format_errors} unusable replies, the last: {problem}")
