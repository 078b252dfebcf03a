"""What an agent is made of: one object in place of the agent's seventeen constructor arguments."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.agent.inbox import Inbox
from pipeline.edits.editor import COMMANDS as EDITOR_COMMANDS
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.records.chat import ChatMessage
from pipeline.settings.config import Limits


@dataclass
class AgentSettings:
    name: str
    client: ModelClient
    runtime: Any  # a pipeline.runtime runtime, or a shared workspace's view of one (pipeline.team.workspace)
    budget: Budget
    limits: Limits
    messages: list[ChatMessage] = field(default_factory=list)  # the opening prompt (pipeline.agent.agent.prompt)
    agent_index: int = 0
    temperature: float | None = None
    seed: int | None = None
    trajectory_path: Path | None = None  # saved after every paid reply, and continued by resume
    # a finished session writes the whole trajectory there; False: its owner keeps it elsewhere (a rollout record)
    whole_trajectory: bool = True
    actions: dict[str, Callable[[str], str]] = field(default_factory=dict)  # the role's own: kind -> handler(body)
    check_submission: Callable[[str], str | None] | None = None  # a problem with the submission: a format error
    guard_submission: Callable[[], str | None] | None = None  # a refusal to let it submit yet: not one
    track_writes: bool = False  # name the files each command changed (the runtime must track)
    inbox: Inbox = field(default_factory=Inbox)
    last_step_note: str | None = None  # what the last reply's turn says instead of the plain step note
    editor: tuple[str, ...] | None = None  # the editor's commands it may use; None: all of them

    @property
    def tools(self) -> bool:
        """The tool-call action format (else fenced blocks in the text)."""
        return self.limits.action_format == "tools"

    @property
    def editor_commands(self) -> tuple[str, ...]:
        """The editor's commands this agent may use: none when limits.editor is off."""
        if not self.limits.editor:
            return ()
        return self.editor if self.editor is not None else EDITOR_COMMANDS
