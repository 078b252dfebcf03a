"""The one ReAct agent every role uses: query the model, parse its action, execute it, check limits.

Juniors, senior and solo are this agent with their own prompts; the team's lead and workers add
actions (``AgentSettings.actions``), rules for submitting, an inbox of messages from other threads and a
stop flag. Every role gets both action formats, temperature and seed, the same limits and records, and
resume: the trajectory is saved after every paid reply, and a saved one is continued instead of
asked for again.

The loop is here; the actions are handled by ``bash_action``, ``editor_action`` and ``role_actions``, the
record kept by ``transcript`` and saved and read back by ``journal``.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from pipeline.agent.actions import (
    BASH,
    EDITOR_KINDS,
    SUBMIT,
    Action,
    FormatError,
    parse_action,
    parse_tool_action,
    tools_for,
)
from pipeline.agent.agent_run import AgentRun, AgentStep, Stop
from pipeline.agent.bash_action import BashAction
from pipeline.agent.compact import compact_history
from pipeline.agent.editor_action import EditorAction, editor_kinds
from pipeline.agent.failures import briefly
from pipeline.agent.journal import TrajectoryJournal
from pipeline.agent.role_actions import RoleActions, SubmitAction
from pipeline.agent.settings import AgentSettings
from pipeline.agent.transcript import Transcript
from pipeline.control import stopping
from pipeline.edits.editor import Editor
from pipeline.errors import InfrastructureFault
from pipeline.models.budget import Budget, CostLimitExceeded
from pipeline.models.client import ModelCallFailed
from pipeline.records.chat import ChatMessage
from pipeline.records.trajectory import ExitReason
from pipeline.text.prompts import render

STEPS_LEFT_NOTES = (3, 1)  # the agent is told how many replies remain when this many do (1: the last one)

ActionHandler = Callable[[AgentStep, Action], str]  # the observation; FormatError: the reply is rejected


def prompt(system: str, instance: str, **variables: Any) -> list[ChatMessage]:
    """The opening messages from a system and an instance template."""
    return [{"role": "system", "content": render(system, **variables)},
            {"role": "user", "content": render(instance, **variables)}]


class Agent:
    """A ReAct agent on one runtime; ``run()`` is one session, and may be called again to go on."""

    def __init__(self, settings: AgentSettings):
        self.settings = settings
        self.transcript = Transcript(AgentRun(name=settings.name, messages=list(settings.messages)))
        self.journal = TrajectoryJournal(settings.trajectory_path, whole_at_end=settings.whole_trajectory)
        self.inbox = settings.inbox
        self.stop_event = threading.Event()
        self.bash = BashAction(settings.runtime, settings.limits, settings.track_writes)
        commands = settings.editor_commands
        self.editor_action = (EditorAction(settings.runtime, settings.limits.observation_limit, commands)
                              if commands else None)
        self.allowed = (BASH, *editor_kinds(commands, settings.tools), *settings.actions)
        # Later entries win, so a role's action can never shadow submit, bash or the editor.
        self.handlers: dict[str, ActionHandler] = dict.fromkeys(settings.actions, RoleActions(settings.actions))
        if self.editor_action is not None:
            self.handlers |= dict.fromkeys(EDITOR_KINDS, self.editor_action)
        self.handlers |= {BASH: self.bash, SUBMIT: SubmitAction(settings.check_submission, settings.guard_submission)}
        self._clock: tuple[float, float] | None = None  # (monotonic start, seconds before) of this session

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def record(self) -> AgentRun:
        return self.transcript.record

    @property
    def budget(self) -> Budget:
        return self.settings.budget

    @property
    def editor_commands(self) -> tuple[str, ...]:
        return self.settings.editor_commands

    @property
    def editor(self) -> Editor | None:
        return self.editor_action.editor if self.editor_action else None

    @property
    def finished(self) -> bool:
        """A resumed trajectory that had ended: nothing is left to do."""
        return self.record.finished

    # -- resume ---------------------------------------------------------------------------

    def resume(self, restore: bool = True) -> bool:
        """Continue the trajectory saved at ``trajectory_path``, if there is one; True when there was.

        Its cost is not charged again: the task's and run's budgets were seeded from the ledger when the
        task started; an agent with a budget of its own (a rollout, a worker) has its owner seed that one
        (``Budget.seed(agent.record.cost)``). With ``restore`` its commands are run again in order,
        rebuilding the workspace; a shared workspace is rebuilt by its owner instead.
        """
        saved = self.journal.load()
        if saved is None:
            return False
        self.transcript.record = saved
        if restore:
            for step in saved.steps:
                if step.action == BASH and step.exit_code is not None:
                    self.bash.restore(step)
                elif step.action in EDITOR_KINDS and self.editor_action and any(e.get("ok") for e in step.edits):
                    self.editor_action.restore(step)
        return True

    def journalled_steps(self) -> int:
        """How many of its commands and written edits its trajectory holds done, as a shared workspace's journal
        counts them (pipeline.team.workspace)."""
        steps = self.record.steps
        commands = sum(1 for s in steps if s.action == BASH and s.exit_code is not None)
        writes = sum(1 for s in steps for edit in s.edits if edit.get("ok") and edit["command"] != "view")
        return commands + writes

    # -- the loop -------------------------------------------------------------------------

    def new_session(self) -> None:
        """Limits count afresh from here (a team worker resumed with new instructions)."""
        self.transcript.new_session()

    def add_user_message(self, text: str) -> None:
        self.transcript.add_user_message(text)

    def run(self) -> AgentRun:
        """Until the agent submits, a limit ends it, or it is stopped; the trajectory is saved after every step."""
        record = self.record
        record.exit_reason, record.error = "", None
        self._clock = (time.monotonic(), record.seconds)
        try:
            if record.pending:
                self.handle(record.steps[-1])
                self.note_steps_left()
                self.save()
            while True:
                self.check_limits()
                self.deliver()
                if not record.steps:
                    # The opening (it may name a workspace path that differs on a rerun) goes on disk before
                    # the first call: a rerun then sends the very same messages, and a reply journaled for them
                    # answers it instead of a second payment.
                    self.save()
                step = self.query()
                self.save()  # the reply is paid for: a crash from here on must not lose it
                self.journal.forget_reply()
                self.handle(step)
                self.note_steps_left()
                self.save()
        except Stop as stop:
            record.exit_reason, record.error = stop.reason, stop.error
            if stop.submission is not None:
                record.submission = stop.submission
        except InfrastructureFault:
            raise
        except Exception as error:  # noqa: BLE001 - a fault of swepipe's own: the paid steps and the tree stay
            record.exit_reason = ExitReason.RUNTIME_ERROR
            record.error = f"{briefly(error)}\n{traceback.format_exc(limit=8)}"
        self.journal.end_session(self.transcript, self._elapsed())
        return record

    def check_limits(self) -> None:
        record, limits = self.record, self.settings.limits
        stopping.check()  # the whole run is stopping: nothing more starts, and nothing here is a result
        if self.stop_event.is_set():
            raise Stop(ExitReason.STOPPED)
        if record.steps_this_session() >= limits.max_steps:
            raise Stop(ExitReason.STEP_LIMIT)
        if self._elapsed() - record.session_seconds > limits.wall_time:
            raise Stop(ExitReason.TIME_LIMIT)

    def query(self) -> AgentStep:
        """Ask the model for its next reply and record it."""
        s = self.settings
        try:
            messages, limits = self.record.messages, s.limits
            sent = (messages if limits.compact_after is None else
                    compact_history(messages, limits.compact_after, limits.compact_chars))
            completion = s.client.complete(
                sent, s.budget, agent=s.name, agent_index=s.agent_index, temperature=s.temperature, seed=s.seed,
                tools=tools_for(self.allowed, s.editor_commands) if s.tools else None,
                journal=self.journal.reply_journal)
        except CostLimitExceeded as error:
            self.transcript.add_billed(getattr(error, "billed", None))
            raise Stop(ExitReason.COST_LIMIT, str(error)) from None
        except ModelCallFailed as error:
            self.transcript.add_billed(error.billed)
            raise Stop(error.reason, str(error)) from None
        return self.transcript.add_reply(completion)

    def parse(self, step: AgentStep) -> Action:
        if self.settings.tools:
            return parse_tool_action(step.tool_calls, step.reply, self.allowed)
        return parse_action(step.reply, self.allowed)

    def handle(self, step: AgentStep) -> None:
        """Act on a reply: correct its format, or hand its action to the action's handler and answer with what
        that observed."""
        started = time.monotonic() - step.model_seconds
        try:
            try:
                action = self.parse(step)
            except FormatError as error:
                self.reject(step, str(error))
                return
            except InfrastructureFault:
                raise
            except Exception as error:  # noqa: BLE001 - a reply no rule foresaw is still the model's to correct
                self.reject(step, f"your reply could not be read as an action ({briefly(error)})")
                return
            step.command, step.action = action.command, action.kind
            try:
                observation = self.handlers[action.kind](step, action)
            except FormatError as error:
                self.reject(step, str(error))
                return
            self.transcript.tell(step, observation)
        finally:
            step.seconds = round(time.monotonic() - started, 4)

    def reject(self, step: AgentStep, problem: str) -> None:
        step.format_error = problem
        template = "format_error_tools.md.j2" if self.settings.tools else "format_error.md.j2"
        self.transcript.tell(step, render(template, error=problem, actions=list(self.allowed)))
        errors = self.record.format_errors_this_session()
        if errors >= self.settings.limits.max_format_errors:
            raise Stop(ExitReason.FORMAT_ERRORS, f"{errors} unusable replies, the last: {problem}")

    def note_steps_left(self) -> None:
        """When few replies remain (STEPS_LEFT_NOTES), the next turn says how many; the last one's note is the
        role's ``last_step_note`` when it has one (the senior's asks for its brief). Saved with the messages, so
        a resumed agent sees what it was told."""
        max_steps = self.settings.limits.max_steps
        left = max_steps - self.record.steps_this_session()
        if left not in STEPS_LEFT_NOTES or left >= max_steps:
            return
        if left == 1 and self.settings.last_step_note:
            self.add_user_message(self.settings.last_step_note)
        else:
            self.add_user_message(render("steps_left.md.j2", left=left, max_steps=max_steps,
                                         tools=self.settings.tools).strip())

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

    def save(self) -> None:
        self.journal.save(self.transcript, self._elapsed())
