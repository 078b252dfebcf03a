"""Reading the one action out of a model's reply, in either action format.

Text format: the reply holds exactly one fenced action block: ```bash (a block holding only
``submit`` ends the agent's work) or, for agents that have them, another action's block
(```delegate, ```wait, ...). Other fenced blocks (```report, ```json, ```python) are text.
Tool format: the reply makes exactly one function call: bash, submit, or another action.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_BLOCK = re.compile(r"^```([A-Za-z_]+)[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
BASH = "bash"
SUBMIT = "submit"


class FormatError(Exception):
    """The reply does not hold exactly one usable action; the message says what was wrong."""


class ActionError(Exception):
    """A well-formed action that cannot be carried out; the agent is told why and goes on."""


@dataclass(frozen=True)
class Action:
    kind: str  # bash, submit, or one of the agent's other actions
    body: str  # the command; for submit, the text handed in with it; else the action block's text

    @property
    def is_submit(self) -> bool:
        return self.kind == SUBMIT

    @property
    def command(self) -> str:
        return SUBMIT if self.is_submit else self.body


def parse_action(reply: str, allowed: tuple[str, ...] = (BASH,)) -> Action:
    """The one action block of a text-format reply; ``allowed`` names the block kinds (bash first)."""
    found = [(tag.lower(), body) for tag, body in _BLOCK.findall(reply or "") if tag.lower() in allowed]
    if len(found) != 1:
        count = "no" if not found else str(len(found))
        if allowed == (BASH,):
            raise FormatError(f"your reply had {count} ```bash blocks; it must have exactly one")
        raise FormatError(f"your reply had {count} action blocks ({', '.join('```' + a for a in allowed)}); "
                          "it must have exactly one")
    kind, body = found[0]
    body = body.strip("\n")
    if kind == BASH and not body.strip():
        raise FormatError("your ```bash block was empty")
    if kind == BASH and body.strip() == SUBMIT:
        return Action(SUBMIT, reply)
    return Action(kind, body)


def fenced_block(reply: str, kind: str) -> str | None:
    """The text of the reply's first non-empty ```kind block, if any."""
    for tag, body in _BLOCK.findall(reply or ""):
        if tag.lower() == kind and body.strip():
            return body.strip()
    return None


# The tool-call format: the same actions as functions the model calls.
BASH_TOOL = {"type": "function", "function": {
    "name": BASH, "description": "Run one shell command in the repository and see its exit code and output.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
SUBMIT_TOOL = {"type": "function", "function": {
    "name": SUBMIT, "description": "Finish: your change is taken from git diff of the working tree.",
    "parameters": {"type": "object", "properties": {"text": {
        "type": "string", "description": "what your instructions ask you to hand in with the submission, if "
                                         "anything (a report, a brief)"}}}}}


def tools_for(allowed: tuple[str, ...] = (BASH,)) -> list[dict]:
    """bash and submit, then one function per other action, taking the action block's text as ``body``."""
    others = [{"type": "function", "function": {
        "name": kind, "description": f"The {kind} action, as described in your instructions.",
        "parameters": {"type": "object", "properties": {"body": {
            "type": "string", "description": f"what the ```{kind} block would hold (may be empty)"}}}}}
        for kind in allowed if kind != BASH]
    return [BASH_TOOL, SUBMIT_TOOL, *others]


def parse_tool_action(tool_calls: list[dict], reply: str = "", allowed: tuple[str, ...] = (BASH,)) -> Action:
    """The one action of a reply in the tool-call format."""
    if len(tool_calls) != 1:
        found = "no" if not tool_calls else str(len(tool_calls))
        names = ", ".join((*allowed, SUBMIT))
        raise FormatError(f"your reply made {found} tool calls; it must make exactly one ({names})")
    call = tool_calls[0]
    name = call.get("name")
    if name != SUBMIT and name not in allowed:
        raise FormatError(f"there is no tool named {name!r}; use {', '.join((*allowed, SUBMIT))}")
    try:
        arguments = json.loads(call.get("arguments") or "{}")
        if not isinstance(arguments, dict):
            raise ValueError
    except ValueError:
        raise FormatError(f"the {name} tool's arguments must be a JSON object like "
                          f"{{\"{'command' if name == BASH else 'body'}\": \"...\"}}") from None
    if name == SUBMIT:
        handed_in = str(arguments.get("text") or "")
        return Action(SUBMIT, "\n\n".join(part for part in (reply, handed_in) if part.strip()))
    if name == BASH:
        command = str(arguments.get("command") or "")
        if not command.strip():
            raise FormatError("the bash tool was called without a command")
        return Action(BASH, command)
    return Action(name, str(arguments.get("body") or ""))
