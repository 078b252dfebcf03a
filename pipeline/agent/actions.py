"""Reading the one action out of a model's reply."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_BASH_BLOCK = re.compile(r"^```bash[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
SUBMIT = "submit"


class FormatError(Exception):
    """The reply does not hold exactly one bash block; the message says what was wrong."""


@dataclass(frozen=True)
class Action:
    command: str

    @property
    def is_submit(self) -> bool:
        return self.command.strip() == SUBMIT


def parse_action(reply: str) -> Action:
    blocks = _BASH_BLOCK.findall(reply or "")
    if len(blocks) != 1:
        found = "no" if not blocks else str(len(blocks))
        raise FormatError(f"your reply had {found} ```bash blocks; it must have exactly one")
    command = blocks[0].strip("\n")
    if not command.strip():
        raise FormatError("your ```bash block was empty")
    return Action(command)


# The optional tool-call format: the same two actions, as functions the model calls.
BASH_TOOL = {"type": "function", "function": {
    "name": "bash", "description": "Run one shell command in the repository and see its exit code and output.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
SUBMIT_TOOL = {"type": "function", "function": {
    "name": "submit", "description": "Finish: your change is taken from git diff of the working tree.",
    "parameters": {"type": "object", "properties": {}}}}
TOOLS = [BASH_TOOL, SUBMIT_TOOL]


def parse_tool_action(tool_calls: list[dict]) -> Action:
    """The one action of a reply in the tool-call format."""
    if len(tool_calls) != 1:
        found = "no" if not tool_calls else str(len(tool_calls))
        raise FormatError(f"your reply made {found} tool calls; it must make exactly one (bash or submit)")
    call = tool_calls[0]
    if call.get("name") == "submit":
        return Action(SUBMIT)
    if call.get("name") != "bash":
        raise FormatError(f"there is no tool named {call.get('name')!r}; use bash or submit")
    try:
        command = json.loads(call.get("arguments") or "{}").get("command", "")
    except (ValueError, AttributeError):
        raise FormatError("the bash tool's arguments must be JSON like {\"command\": \"ls\"}") from None
    if not str(command).strip():
        raise FormatError("the bash tool was called without a command")
    return Action(str(command))
