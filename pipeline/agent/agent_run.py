"""What an agent leaves: its trajectory (messages, steps, cost, time) and the reason it ended."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pipeline.edits.editor import EditRecord
from pipeline.records.chat import ChatMessage, ReplyToolCall
from pipeline.records.trajectory import ExitReason


class Stop(Exception):
    """Ends a session for ``reason``. A submission carries the text handed in with it."""

    def __init__(self, reason: ExitReason, error: str | None = None, submission: str | None = None):
        super().__init__(reason)
        self.reason, self.error, self.submission = reason, error, submission


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
    tool_calls: list[ReplyToolCall] = field(default_factory=list)  # in the tool-call format
    changed_files: list[str] = field(default_factory=list)  # paths the command changed (when tracked)
    edits: list[EditRecord] = field(default_factory=list)  # an editor action's calls: command, path, ok or error
    cost: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass
class AgentRun:
    name: str
    exit_reason: ExitReason | Literal[""] = ""  # "": not ended
    error: str | None = None
    submission: str | None = None  # the text handed in with submit (a brief, a report)
    messages: list[ChatMessage] = field(default_factory=list)
    steps: list[AgentStep] = field(default_factory=list)
    cost: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    started: float = field(default_factory=time.time)
    seconds: float = 0.0
    session_step: int = 0  # where the current session began: limits count from here
    session_seconds: float = 0.0
    resumed: bool = False  # continued from a trajectory an interrupted run left

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> AgentRun:
        known = set(cls.__dataclass_fields__)
        run = cls(**{key: value for key, value in saved.items() if key in known and key != "steps"})
        if run.exit_reason in ExitReason.__members__.values():
            run.exit_reason = ExitReason(run.exit_reason)  # else kept as read, as records keep unknown words
        step_fields = set(AgentStep.__dataclass_fields__)
        run.steps = [AgentStep(**{k: v for k, v in step.items() if k in step_fields})
                     for step in saved.get("steps", [])]
        return run

    @property
    def pending(self) -> bool:
        """The last reply was paid for but not acted on (the process died in between)."""
        return bool(self.messages) and self.messages[-1]["role"] == "assistant" and bool(self.steps)

    @property
    def finished(self) -> bool:
        """A resumed trajectory that had ended: nothing is left to do."""
        return bool(self.exit_reason) and not self.pending

    def format_errors_this_session(self) -> int:
        return sum(1 for step in self.steps[self.session_step:] if step.format_error)

    def steps_this_session(self) -> int:
        return len(self.steps) - self.session_step
