"""An agent's editor action as editor calls, in either action format.

Tool format: one str_replace_editor call, its arguments as SWE-agent's tool takes them.
Text format: a ```view block (a path, optionally ``START-END``), or an ```edit block holding the principal's
search/replace edits without their fences (pipeline.edits.blocks), for one or more places or files::

    ```edit
    path/to/file.py
    <<<<<<< SEARCH
    exact lines now in the file
    =======
    the lines instead
    >>>>>>> REPLACE
    ```

An empty SEARCH creates the file. A malformed action raises FormatError, which the agent is shown, as any reply
that holds no usable action.
"""

from __future__ import annotations

import json
import re

from pipeline.agent.actions import EDIT, EDITOR, VIEW, Action, FormatError
from pipeline.edits.blocks import EditFormatError, parse_edits
from pipeline.edits.editor import EditorCall, EditorError, parse_view_range

_RANGE = re.compile(r"^(?P<path>.+?)(?:[\s:]+(?P<start>\d+)\s*-\s*(?P<end>-?\d+|end|\$))?$")


def editor_calls(action: Action, commands: tuple[str, ...]) -> list[EditorCall]:
    """The calls ``action`` asks for, each a command of ``commands``; FormatError when it holds none usable."""
    if action.kind == EDITOR:
        calls = [_tool_call(action.body)]
    elif action.kind == VIEW:
        calls = [_view_block(action.body)]
    elif action.kind == EDIT:
        calls = _edit_block(action.body)
    else:
        raise FormatError(f"{action.kind} is not an editor action")
    refused = sorted({call.command for call in calls} - set(commands))
    if refused:
        raise FormatError(f"your editor may only {', '.join(commands)}; not {', '.join(refused)}")
    return calls


def _tool_call(body: str) -> EditorCall:
    try:
        arguments = json.loads(body)
    except ValueError:
        raise FormatError(f"the {EDITOR} call's arguments are not JSON: {body[:200]!r}") from None
    if not isinstance(arguments, dict):
        raise FormatError(f"the {EDITOR} call's arguments must be a JSON object (command, path, ...)")
    try:
        return EditorCall.from_arguments(arguments)
    except EditorError as error:
        raise FormatError(f"the {EDITOR} call: {error}") from None


def _view_block(body: str) -> EditorCall:
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    found = _RANGE.match(lines[0]) if len(lines) == 1 else None
    if found is None:
        raise FormatError("a ```view block holds one path, optionally followed by a line range (src/app.py 10-40)")
    view_range = None
    if found["start"]:
        end = found["end"]
        try:
            view_range = parse_view_range((found["start"], -1 if end in ("end", "$") else end))
        except EditorError as error:
            raise FormatError(f"the ```view block: {error}") from None
    return EditorCall("view", found["path"].strip().strip("`'\""), view_range=view_range)


def _edit_block(body: str) -> list[EditorCall]:
    try:
        edits = parse_edits(body)
    except EditFormatError as error:
        raise FormatError(f"the ```edit block: {error} (an edit whose text holds a ``` line goes in a ````edit "
                          "block, four backticks, closed by four)") from None
    calls = []
    for edit in edits:
        if edit.delete:
            raise FormatError(f"the editor does not delete files; to delete {edit.path}, run: git rm -q {edit.path}")
        if edit.search.strip():
            calls.append(EditorCall("str_replace", edit.path, old_str=edit.search, new_str=edit.replace))
        else:
            calls.append(EditorCall("create", edit.path, file_text=edit.replace))
    return calls


def recorded_editor_calls(action: object, command: object) -> list[EditorCall]:
    """The editor calls a recorded step asked for (its ``action`` kind and ``command`` as a trajectory holds them),
    read again by the agent's own parser; none when they cannot be read (a trajectory on disk may hold anything)."""
    from pipeline.agent.actions import EDITOR_KINDS
    from pipeline.edits.editor import COMMANDS

    if action not in EDITOR_KINDS or not isinstance(command, str):
        return []
    try:
        return editor_calls(Action(str(action), command), COMMANDS)
    except FormatError:
        return []
