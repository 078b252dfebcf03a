"""The one ReAct agent every role uses: query the model, parse its action, execute it, check limits.

Juniors, senior and solo are this agent with their own prompts; the team's lead and workers add
actions (``actions``), rules for submitting, an inbox of messages from other threads and a stop
flag. Every role gets both action formats, temperature and seed, the same limits and records, and
resume: the trajectory is saved after every paid reply, and a saved one is continued instead of
asked for again.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline import stopping
from pipeline.agent.actions import (
    BASH,
    EDIT,
    EDITOR,
    EDITOR_KINDS,
    VIEW,
    Action,
    ActionError,
    FormatError,
    parse_action,
    parse_tool_action,
    tools_for,
)
from pipeline.agent.compact import compact_history
from pipeline.agent.edit_actions import editor_calls
from pipeline.agent.inbox import Inbox
from pipeline.config import Limits
from pipeline.edits.editor import COMMANDS as EDITOR_COMMANDS
from pipeline.edits.editor import open_editor
from pipeline.errors import ContainerDied, RuntimeUnavailable, describe, is_transport_error
from pipeline.layout import reply_journal
from pipeline.models.budget import Budget, CostLimitExceeded
from pipeline.models.client import ModelCallFailed, ModelClient
from pipeline.prompts import render
from pipeline.runtime.limits import ResourceLimitHit
from pipeline.storage import write_json_atomic

STEPS_LEFT_NOTES = (3, 1)  # the agent is told how many replies remain when this many do (1: the last one)
# The agent's own outcomes (pipeline.errors): model_error is a request the provider refused (bad request, content
# policy), context_window one too long for the model. An endpoint that does not answer ends no agent: it raises
# ModelUnavailable, or stops the run, and the trajectory is resumed by a rerun.
EXIT_REASONS = ("submitted", "step_limit", "cost_limit", "time_limit", "format_errors", "model_error",
                "context_window", "runtime_error", "resource_limit", "stopped")


@dataclass
class AgentStep:
    index: int
    reply: str
    command: str | None = None
    action: str = ""  # bash, submit or another action's name
    exit_code: int | None = None
    output: str | None = None
    timed_out: bool = False
    format_error: str | None = None
    model_seconds: float = 0.0
    command_seconds: float = 0.0
    seconds: float = 0.0  # the whole step: model, command, bookkeeping
    tool_calls: list = field(default_factory=list)  # in the tool-call format
    changed_files: list[str] = field(default_factory=list)  # paths the command changed (when tracked)
    edits: list[dict] = field(default_factory=list)  # an editor action's calls: command, path, ok or the error
    cost: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass
class AgentRun:
    name: str
    exit_reason: str = ""
    error: str | None = None
    submission: str | None = None  # the text handed in with submit (a brief, a report)
    messages: list[dict] = field(default_factory=list)
    steps: list[AgentStep] = field(default_factory=list)
    cost: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    started: float = field(default_factory=time.time)
    seconds: float = 0.0
    session_step: int = 0  # where the current session began: limits count from here
    session_seconds: float = 0.0
    resumed: bool = False  # continued from a trajectory an interrupted run left

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, saved: dict) -> AgentRun:
        known = {name for name in cls.__dataclass_fields__}
        run = cls(**{key: value for key, value in saved.items() if key in known and key != "steps"})
        step_fields = set(AgentStep.__dataclass_fields__)
        run.steps = [AgentStep(**{k: v for k, v in step.items() if k in step_fields})
                     for step in saved.get("steps", [])]
        return run


class Stop(Exception):
    """Ends a session; ``reason`` is one of EXIT_REASONS."""

    def __init__(self, reason: str, error: str | None = None):
        super().__init__(reason)
        self.reason, self.error = reason, error


def _workspace_failure(error: BaseException) -> BaseException:
    """What the runtime failing under an action means: Docker's API itself failed (RuntimeUnavailable: retried by
    the task, never a result), or the workspace is gone (this agent's runtime_error)."""
    stopping.check()  # the stop removed the container: not this agent's outcome
    if is_transport_error(error):
        return RuntimeUnavailable(f"the workspace's runtime failed: {describe(error)}")
    return Stop("runtime_error", str(error))


def _brief(error: BaseException, limit: int = 500) -> str:
    """An unexpected error in a few hundred characters (its text may quote a whole reply)."""
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def prompt(system: str, instance: str, **variables) -> list[dict]:
    """The opening messages from a system and an instance template."""
    return [{"role": "system", "content": render(system, **variables)},
            {"role": "user", "content": render(instance, **variables)}]


class Agent:
    """A ReAct agent on one runtime; ``run()`` is one session, and may be called again to go on."""

    def __init__(self, name: str, client: ModelClient, runtime, budget: Budget, limits: Limits, *,
                 messages: list[dict] | None = None, agent_index: int = 0, temperature: float | None = None,
                 seed: int | None = None, trajectory_path: Path | None = None,
                 actions: dict[str, Callable[[str], str]] | None = None,
                 check_submission: Callable[[str], str | None] | None = None,
                 guard_submission: Callable[[], str | None] | None = None,
                 track_writes: bool = False, inbox: Inbox | None = None, last_step_note: str | None = None,
                 editor: tuple[str, ...] | None = None):
        self.client, self.runtime, self.budget, self.limits = client, runtime, budget, limits
        # The editor's commands this agent may use (pipeline.edits.editor): all of them unless given, none when
        # limits.editor is off.
        self.editor_commands = (editor if editor is not None else EDITOR_COMMANDS) if limits.editor else ()
        self.editor = open_editor(runtime, limits.observation_limit) if self.editor_commands else None
        self.agent_index, self.temperature, self.seed = agent_index, temperature, seed
        self.trajectory_path = trajectory_path
        # The paid reply not yet in the trajectory (models.client).
        self.reply_journal = reply_journal(trajectory_path) if trajectory_path is not None else None
        self.actions = actions or {}  # action kind -> handler(body) -> observation
        self.check_submission = check_submission  # a problem with the submission counts as a format error
        self.guard_submission = guard_submission  # a refusal to let it submit yet does not
        self.track_writes = track_writes  # name the files each command changed (the runtime must track)
        self.record = AgentRun(name=name, messages=list(messages or []))
        self.inbox = inbox or Inbox()
        self.last_step_note = last_step_note  # what the last reply's turn says instead of the plain step note
        self.stop_event = threading.Event()
        self.changed_files: set[str] = set()
        self._clock: tuple[float, float] | None = None  # (monotonic start, seconds before) of this session
        self._lock = threading.RLock()  # guards the record against readers on other threads

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def tools(self) -> bool:
        return self.limits.action_format == "tools"

    @property
    def allowed(self) -> tuple[str, ...]:
        return (BASH, *self.editor_kinds, *self.actions)

    @property
    def editor_kinds(self) -> tuple[str, ...]:
        """How the editor is asked for: one function in the tool format; in the text format ```view, and
        ```edit unless the editor only views."""
        if not self.editor_commands:
            return ()
        if self.tools:
            return (EDITOR,)
        return (VIEW,) if self.editor_commands == ("view",) else (EDIT, VIEW)

    # -- resume ---------------------------------------------------------------------------

    def resume(self, replay: bool = True) -> bool:
        """Continue the trajectory saved at ``trajectory_path``, if there is one; True when there was.

        Its cost is not charged again: the task's and run's budgets were seeded from the ledger when the
        task started; an agent with a budget of its own (a rollout, a worker) has its owner seed that one
        (``Budget.seed(agent.record.cost)``). With ``replay`` its commands are run again in order,
        rebuilding the workspace; a shared workspace is rebuilt by its owner instead.
        """
        if self.trajectory_path is None:
            return False
        try:
            saved = json.loads(self.trajectory_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        if not saved.get("messages"):
            return False
        self.record = AgentRun.from_dict(saved)
        self.record.resumed = True
        for step in self.record.steps:
            self.changed_files.update(step.changed_files)
        if replay:
            for step in self.record.steps:
                if step.action == BASH and step.exit_code is not None:
                    try:
                        self.runtime.run(step.command, timeout=self.limits.command_timeout, output_limit=1000)
                    except ResourceLimitHit:
                        pass  # it ran into the limits the first time too, and was killed again
                elif step.action in EDITOR_KINDS and self.editor and any(edit.get("ok") for edit in step.edits):
                    self.apply_edits(Action(step.action, step.command))  # the same calls on the same files
        return True

    def journalled_steps(self) -> int:
        """How many of its commands and written edits its trajectory holds done, as a shared workspace's journal
        counts them (pipeline.team.workspace)."""
        commands = sum(1 for s in self.record.steps if s.action == BASH and s.exit_code is not None)
        writes = sum(1 for s in self.record.steps for edit in s.edits if edit.get("ok") and edit["command"] != "view")
        return commands + writes

    @property
    def finished(self) -> bool:
        """A resumed trajectory that had ended: nothing is left to do."""
        return bool(self.record.exit_reason) and not self.pending

    @property
    def pending(self) -> bool:
        """The last reply was paid for but not acted on (the process died in between)."""
        messages = self.record.messages
        return bool(messages) and messages[-1]["role"] == "assistant" and bool(self.record.steps)

    # -- the loop -------------------------------------------------------------------------

    def new_session(self) -> None:
        """Limits count afresh from here (a team worker resumed with new instructions)."""
        with self._lock:
            self.record.session_step, self.record.session_seconds = len(self.record.steps), self.record.seconds

    def run(self) -> AgentRun:
        """Until the agent submits, a limit ends it, or it is stopped; the trajectory is saved after every step."""
        record = self.record
        record.exit_reason, record.error = "", None
        self._clock = (time.monotonic(), record.seconds)
        try:
            if self.pending:
                self.handle(record.steps[-1])
                self.note_steps_left()
                self.save()
            while True:
                self.check_limits()
                self.deliver()
                step = self.query()
                self.save()  # the reply is paid for: a crash from here on must not lose it
                self.forget_journal()
                self.handle(step)
                self.note_steps_left()
                self.save()
        except Stop as stop:
            record.exit_reason, record.error = stop.reason, stop.error
        except Exception as error:  # noqa: BLE001 - a fault of swepipe's own: the paid steps and the tree stay
            record.exit_reason = "runtime_error"
            record.error = f"{_brief(error)}\n{traceback.format_exc(limit=8)}"
        self.save()
        return record

    def check_limits(self) -> None:
        record = self.record
        stopping.check()  # the whole run is stopping: nothing more starts, and nothing here is a result
        if self.stop_event.is_set():
            raise Stop("stopped")
        if len(record.steps) - record.session_step >= self.limits.max_steps:
            raise Stop("step_limit")
        if self._elapsed() - record.session_seconds > self.limits.wall_time:
            raise Stop("time_limit")

    def query(self) -> AgentStep:
        """Ask the model for its next reply and record it."""
        try:
            limits = self.limits
            sent = (self.record.messages if limits.compact_after is None else
                    compact_history(self.record.messages, limits.compact_after, limits.compact_chars))
            completion = self.client.complete(
                sent, self.budget, agent=self.name, agent_index=self.agent_index,
                temperature=self.temperature, seed=self.seed,
                tools=tools_for(self.allowed, self.editor_commands) if self.tools else None,
                journal=self.reply_journal)
        except CostLimitExceeded as error:
            self._add_billed(getattr(error, "billed", None))
            raise Stop("cost_limit", str(error)) from None
        except ModelCallFailed as error:
            self._add_billed(error.billed)
            raise Stop(error.reason, str(error)) from None
        message = {"role": "assistant", "content": completion.content}
        if completion.tool_calls:
            message["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for c in completion.tool_calls]
        with self._lock:
            step = AgentStep(index=len(self.record.steps), reply=completion.content,
                             model_seconds=round(completion.latency, 4), cost=completion.cost,
                             input_tokens=completion.input_tokens, output_tokens=completion.output_tokens,
                             tool_calls=completion.tool_calls)
            self.record.steps.append(step)
            self.record.cost += completion.cost
            self.record.input_tokens += completion.input_tokens
            self.record.output_tokens += completion.output_tokens
            self.record.messages.append(message)
        return step

    def _add_billed(self, billed) -> None:
        """What a call that gave no reply was billed (the provider's report) still counts in the record."""
        if billed is not None and billed.cost:
            with self._lock:
                self.record.cost += billed.cost
                self.record.input_tokens += billed.input
                self.record.output_tokens += billed.output

    def parse(self, step: AgentStep) -> Action:
        if self.tools:
            return parse_tool_action(step.tool_calls, step.reply, self.allowed)
        return parse_action(step.reply, self.allowed)

    def handle(self, step: AgentStep) -> None:
        """Act on a reply: correct its format, take its submission, run its command or its action."""
        started = time.monotonic() - step.model_seconds
        try:
            try:
                action = self.parse(step)
            except FormatError as error:
                self.reject(step, str(error))
                return
            except Exception as error:  # noqa: BLE001 - a reply no rule foresaw is still the model's to correct
                self.reject(step, f"your reply could not be read as an action ({_brief(error)})")
                return
            step.command, step.action = action.command, action.kind
            if action.is_submit:
                self.submit(step, action.body)
            elif action.kind == BASH:
                self.execute(step)
            elif action.kind in EDITOR_KINDS:
                self.edit(step, action)
            else:
                self.act(step, action)
        finally:
            step.seconds = round(time.monotonic() - started, 4)

    def submit(self, step: AgentStep, text: str) -> None:
        problem = self.check_submission(text) if self.check_submission else None
        if problem:
            self.reject(step, problem)
            return
        refusal = self.guard_submission() if self.guard_submission else None
        if refusal:
            step.output = refusal
            self.tell(step, refusal)
            return
        self.record.submission = text
        raise Stop("submitted")

    def execute(self, step: AgentStep) -> None:
        limits = self.limits
        try:
            if self.track_writes:
                result, changed = self.runtime.run_tracked(step.command, timeout=limits.command_timeout,
                                                           output_limit=limits.observation_limit)
                step.changed_files = sorted(changed)
                self.changed_files |= changed
            else:
                result = self.runtime.run(step.command, timeout=limits.command_timeout,
                                          output_limit=limits.observation_limit)
        except ResourceLimitHit as hit:  # a fork bomb, a runaway write: killed, and the end of this agent
            if hit.result is not None:
                step.exit_code, step.output, step.timed_out = (hit.result.exit_code, hit.result.output,
                                                               hit.result.timed_out)
            raise Stop("resource_limit", str(hit)) from None
        except (ContainerDied, OSError) as error:
            raise _workspace_failure(error) from error
        step.exit_code, step.output, step.timed_out = result.exit_code, result.output, result.timed_out
        step.command_seconds = round(result.duration, 4)
        self.tell(step, render("observation.md.j2", exit_code=result.exit_code, output=result.output,
                               timed_out=result.timed_out, timeout=int(limits.command_timeout),
                               cut_bytes=result.cut_bytes))

    def edit(self, step: AgentStep, action: Action) -> None:
        """The editor's calls, in order until one fails; each is recorded, and the observations are the answer."""
        try:
            results = self.apply_edits(action)
        except FormatError as error:
            self.reject(step, str(error))
            return
        except (ContainerDied, OSError) as error:  # the runtime under the editor, as under a command
            raise _workspace_failure(error) from error
        except Exception as error:  # noqa: BLE001 - a call no rule foresaw fails alone; the agent is told
            self.reject(step, f"your editor action could not be carried out ({_brief(error)})")
            return
        step.edits = [result.record() for result in results]
        changed = {result.written for result in results if result.written}
        step.changed_files = sorted(changed)
        self.changed_files |= changed
        observation = "\n\n".join(result.observation for result in results)
        if not results[-1].ok and len(results) > 1:
            observation += "\n\nThe edits before this one were made; the ones after it were not tried."
        step.output = observation
        self.tell(step, observation)

    def apply_edits(self, action: Action) -> list:
        """EditorResults of ``action``'s calls, made until one fails; FormatError when it holds none usable."""
        results = []
        for call in editor_calls(action, self.editor_commands):
            results.append(self.editor(call))
            if not results[-1].ok:
                break
        return results

    def act(self, step: AgentStep, action: Action) -> None:
        """One of the agent's other actions; its handler's text is the observation."""
        try:
            observation = self.actions[action.kind](action.body)
        except FormatError as error:
            self.reject(step, str(error))
            return
        except ActionError as error:
            observation = f"error: {error}"
        except (ContainerDied, OSError) as error:
            raise _workspace_failure(error) from error
        except Stop:
            raise
        except Exception as error:  # noqa: BLE001 - the action fails alone; the agent is told and goes on
            observation = f"error: the {action.kind} action failed ({_brief(error)})"
        step.output = observation
        self.tell(step, observation)

    def reject(self, step: AgentStep, problem: str) -> None:
        step.format_error = problem
        template = "format_error_tools.md.j2" if self.tools else "format_error.md.j2"
        self.tell(step, render(template, error=problem, actions=list(self.allowed)))
        errors = sum(1 for s in self.record.steps[self.record.session_step:] if s.format_error)
        if errors >= self.limits.max_format_errors:
            raise Stop("format_errors", f"{errors} unusable replies, the last: {problem}")

    # -- what the agent is told --------------------------------------------------------------

    def tell(self, step: AgentStep, text: str) -> None:
        """The answer to a step: a tool result for each of its calls, else a user message."""
        if step.tool_calls:
            with self._lock:
                self.record.messages.extend({"role": "tool", "tool_call_id": call["id"], "content": text}
                                            for call in step.tool_calls)
        else:
            self.add_user_message(text)

    def add_user_message(self, text: str) -> None:
        """Shown before the next turn; joined to the last user message so roles keep alternating."""
        with self._lock:
            last = self.record.messages[-1] if self.record.messages else None
            if last is not None and last["role"] == "user":
                last["content"] = f"{last['content']}\n\n{text}"
            else:
                self.record.messages.append({"role": "user", "content": text})

    def steps_left(self) -> int:
        """Replies this session may still make."""
        return self.limits.max_steps - (len(self.record.steps) - self.record.session_step)

    def note_steps_left(self) -> None:
        """When few replies remain (STEPS_LEFT_NOTES), the next turn says how many; the last one's note is the
        role's ``last_step_note`` when it has one (the senior's asks for its brief). Saved with the messages, so
        a resumed agent sees what it was told."""
        left = self.steps_left()
        if left not in STEPS_LEFT_NOTES or left >= self.limits.max_steps:
            return
        if left == 1 and self.last_step_note:
            self.add_user_message(self.last_step_note)
        else:
            self.add_user_message(render("steps_left.md.j2", left=left, max_steps=self.limits.max_steps,
                                         tools=self.tools).strip())

    def deliver(self) -> None:
        """What other agents left in the inbox, shown before the next turn."""
        for item in self.inbox.take():
            self.add_user_message(item.text)

    # -- records ----------------------------------------------------------------------------

    def _elapsed(self) -> float:
        if self._clock is None:
            return self.record.seconds
        started, before = self._clock
        return before + time.monotonic() - started

    def forget_journal(self) -> None:
        """The trajectory holds the last reply now: its journal is not needed (nor kept after the agent)."""
        if self.reply_journal is not None:
            self.reply_journal.unlink(missing_ok=True)

    def save(self) -> None:
        with self._lock:
            self.record.seconds = round(self._elapsed(), 3)
            if self.trajectory_path is not None:
                write_json_atomic(self.trajectory_path, self.record.to_dict())
