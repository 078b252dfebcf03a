"""Reading the one action out of a model's reply, in either action format.

Text format: the reply holds exactly one fenced action block: ```bash (a block holding only
``submit`` ends the agent's work), the editor's ```edit and ```view, or, for agents that have them,
another action's block (```delegate, ```wait, ...). Other fenced blocks (```report, ```json,
```python) are text.
Tool format: the reply makes exactly one function call: bash, submit, str_replace_editor, or another
action.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pipeline.records.chat import ToolSpec

# A fenced block: three or more backticks, closed by as many (so ````edit can hold an edit whose text has ``` lines).
_BLOCK = re.compile(r"^(`{3,})([A-Za-z_]+)[ \t]*\n(.*?)^\1[ \t]*$", re.DOTALL | re.MULTILINE)
BASH = "bash"
SUBMIT = "submit"
EDITOR = "str_replace_editor"  # the tool-call format's editor; the text format has these two blocks:
EDIT, VIEW = "edit", "view"
EDITOR_KINDS = (EDITOR, EDIT, VIEW)


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
    found = [(tag.lower(), body) for _, tag, body in _BLOCK.findall(reply or "") if tag.lower() in allowed]
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
    for _, tag, body in _BLOCK.findall(reply or ""):
        if tag.lower() == kind and body.strip():
            return str(body).strip()
    return None


# The tool-call format: the same actions as functions the model calls.
BASH_TOOL: ToolSpec = {"type": "function", "function": {
    "name": BASH, "description": "Run one shell command in the repository and see its exit code and output.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
SUBMIT_TOOL: ToolSpec = {"type": "function", "function": {
    "name": SUBMIT, "description": "Finish: your change is taken from git diff of the working tree.",
    "parameters": {"type": "object", "properties": {"text": {
        "type": "string", "description": "what your instructions ask you to hand in with the submission, if "
                                         "anything (a report, a brief)"}}}}}


def editor_tool(commands: tuple[str, ...]) -> ToolSpec:
    """The str_replace_editor function, with the schema models are trained on, offering ``commands``."""
    edits = "view" not in commands or len(commands) > 1
    properties = {
        "command": {"type": "string", "enum": list(commands), "description": "view: a file with line numbers (or "
                    "view_range of it), or a folder two levels deep" + (
                        "; create: a new file; str_replace: replace old_str, which must occur exactly once, with "
                        "new_str; insert: new_str after line insert_line (0: at the top); undo_edit: undo your "
                        "last edit of path" if edits else "")},
        "path": {"type": "string", "description": "a file or folder, from the repository root"},
        "view_range": {"type": "array", "items": {"type": "integer"},
                       "description": "view: [start, end] lines, end -1 for the end of the file"}}
    if edits:
        properties |= {
            "file_text": {"type": "string", "description": "create: the whole new file"},
            "old_str": {"type": "string", "description": "str_replace: the exact text to replace, whitespace "
                        "included; must occur exactly once in the file"},
            "new_str": {"type": "string", "description": "str_replace: the text instead of old_str; insert: the "
                        "text to insert"},
            "insert_line": {"type": "integer", "description": "insert: the line new_str goes after"}}
    description = (("View, create and edit files of the repository. Edits fail, changing nothing, unless they "
                    "can be made exactly as asked; the answer shows the changed lines.") if edits else
                   "View files and folders of the repository, files with line numbers.")
    return {"type": "function", "function": {"name": EDITOR, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": ["command", "path"]}}}


def tools_for(allowed: tuple[str, ...] = (BASH,), editor: tuple[str, ...] = ()) -> list[ToolSpec]:
    """bash and submit, the editor offering its ``editor`` commands (none: no editor), then one function per
    other action, taking the action block's text as ``body``."""
    others: list[ToolSpec] = [{"type": "function", "function": {
        "name": kind, "description": f"The {kind} action, as described in your instructions.",
        "parameters": {"type": "object", "properties": {"body": {
            "type": "string", "description": f"what the ```{kind} block would hold (may be empty)"}}}}}
        for kind in allowed if kind not in (BASH, *EDITOR_KINDS)]
    return [BASH_TOOL, SUBMIT_TOOL, *([editor_tool(editor)] if editor else []), *others]


# What each tool's arguments look like, for the agent told that its arguments were not a JSON object.
ARGUMENT_EXAMPLES = {
    BASH: '{"command": "ls"}',
    SUBMIT: '{} or {"text": "..."}',
    EDITOR: '{"command": "view", "path": "src/app.py", "view_range": [1, 40]}',
}
_OTHER = '{"body": "..."}'


def _arguments(raw: object) -> dict[str, Any] | None:
    """A tool call's arguments as a dict (the JSON text providers send, or an object some send as is); None when
    they are not a JSON object."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, (str, bytes)):
        return None
    try:
        arguments = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return arguments if isinstance(arguments, dict) else None


def parse_tool_action(tool_calls: list[Any] | None, reply: str | None = "",
                      allowed: tuple[str, ...] = (BASH,)) -> Action:
    """The one action of a reply in the tool-call format; the calls and the reply are taken as the provider sent
    them, whatever their types."""
    tool_calls, reply = list(tool_calls or []), reply or ""
    if len(tool_calls) != 1:
        found = "no" if not tool_calls else str(len(tool_calls))
        names = ", ".join((*allowed, SUBMIT))
        raise FormatError(f"your reply made {found} tool calls; it must make exactly one ({names})")
    call = tool_calls[0] if isinstance(tool_calls[0], dict) else {}
    name = call.get("name")
    if not isinstance(name, str) or (name != SUBMIT and name not in allowed):
        shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:80] + "..."
        raise FormatError(f"there is no tool named {shown}; use {', '.join((*allowed, SUBMIT))}")
    arguments = _arguments(call.get("arguments"))
    if arguments is None:
        raise FormatError(f"the {name} tool's arguments must be a JSON object like "
                          f"{ARGUMENT_EXAMPLES.get(name, _OTHER)}")
    if name == SUBMIT:
        handed_in = str(arguments.get("text") or "")
        return Action(SUBMIT, "\n\n".join(part for part in (reply, handed_in) if part.strip()))
    if name == BASH:
        command = arguments.get("command") or ""
        if not isinstance(command, str):
            raise FormatError(f"the bash tool's command must be a string, like {ARGUMENT_EXAMPLES[BASH]}")
        if not command.strip():
            raise FormatError("the bash tool was called without a command")
        return Action(BASH, command)
    if name == EDITOR:
        return Action(EDITOR, json.dumps(arguments))
    return Action(name, str(arguments.get("body") or ""))
