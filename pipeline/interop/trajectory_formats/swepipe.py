"""swepipe's own trajectories, as ``swepipe export`` writes them.

``swepipe``: ``swepipe export --format trajectories`` (pipeline.interop.export), mini-swe-agent 1.x's shape with
    ``info.swepipe``; each reply's ``extra`` holds the action swepipe's agent read from it (``action``,
    ``command``, ``exit_code``, ``format_error``), used as is.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pipeline.interop.recorded import BASH, EDITOR, SUBMIT, RecordedCall, RecordedStep, RecordedTrajectory
from pipeline.interop.trajectory_formats.common import (
    Refused,
    as_dict,
    as_exit_code,
    as_string,
    bash_call,
    content_text,
    editor_call,
    instance_id,
    model_name,
    opening_text,
    parse_json_text,
    submit_call,
    summary_of,
)

SWEPIPE = "swepipe"

_FENCED_BLOCK = re.compile(r"^(`{3,})([A-Za-z_]+)[ \t]*\n(.*?)^\1[ \t]*$", re.DOTALL | re.MULTILINE)


def read_swepipe(path: Path, data: dict[str, Any]) -> RecordedTrajectory:
    notes: list[str] = []
    info = as_dict(data.get("info"))
    own, config = as_dict(info.get("swepipe")), as_dict(info.get("config"))
    role = as_string(own.get("role")) or (as_string(config.get("agent_type")) or "").removeprefix("swepipe.")
    if role == "principal":
        raise Refused("is swepipe's principal: one model call that writes edits, no agent steps to replay")
    messages = [message for message in data["messages"] if isinstance(message, dict)]
    steps: list[RecordedStep] = []
    number = 0
    for position, message in enumerate(messages):
        if message.get("role") == "assistant":
            number += 1
            following = messages[position + 1] if position + 1 < len(messages) else {}
            output = content_text(following.get("content")) if following.get("role") != "assistant" else None
            steps.extend(_swepipe_steps(message, number, notes, output))
    # Its files are <instance_id>/<agent>.traj.json: the file's name is the agent's, not a task's.
    task = instance_id(path, own.get("instance_id"), named_for_task=False)
    return RecordedTrajectory(source=path, format=SWEPIPE, instance_id=task, steps=steps, notes=notes,
                              model=model_name(config), task_text=opening_text(
                                  messages, lambda message: message.get("role") == "assistant"),
                              **summary_of(info, notes))


def _swepipe_steps(message: dict[str, Any], number: int, notes: list[str],
                   output: str | None = None) -> list[RecordedStep]:
    """The steps a reply of swepipe's agent stands for, from what the agent recorded it read (its ``extra``)."""
    extra = as_dict(message.get("extra"))
    text = content_text(message.get("content")) or ""
    if extra.get("format_error"):
        return [RecordedStep(text, None)]
    action, command = as_string(extra.get("action")), extra.get("command")
    if not action:
        notes.append(f"reply {number} was not acted on (the run ended before it was): left out")
        return []
    calls = swepipe_calls(action, command, number, notes)
    if not calls:
        return [RecordedStep(text, None)]
    thought = text if message.get("tool_calls") else _without_block(text, action, command)
    exit_code = as_exit_code(extra.get("exit_code"))
    return [RecordedStep(thought if index == 0 else "", call, exit_code if call["name"] == BASH else None,
                         output if index == 0 else None)
            for index, call in enumerate(calls)]


def swepipe_calls(action: str, command: Any, number: int, notes: list[str]) -> list[RecordedCall]:
    if action == SUBMIT:
        return [submit_call()]
    if not isinstance(command, str) or not command:
        notes.append(f"reply {number}: its {action} action has no recorded command; read as no call")
        return []
    if action == BASH:
        return [bash_call(command)]
    if action == EDITOR:
        arguments = parse_json_text(command)
        return [editor_call(arguments)] if isinstance(arguments, dict) else []
    if action in ("edit", "view"):
        return _editor_block_calls(action, command, number, notes)
    raise Refused(f"reply {number} is swepipe's `{action}` action, which a replay has no counterpart for")


def _editor_block_calls(action: str, command: str, number: int, notes: list[str]) -> list[RecordedCall]:
    """A text-format ```edit or ```view block as editor calls, read by the agent's own parser."""
    from pipeline.agent.edit_actions import recorded_editor_calls

    calls = [editor_call(call.to_dict()) for call in recorded_editor_calls(action, command)]
    if not calls:
        notes.append(f"reply {number}: its ```{action} block could not be read again; read as no call")
    elif len(calls) > 1:
        notes.append(f"reply {number} made {len(calls)} edits: replayed as one step each, the reply's text with "
                     "the first")
    return calls


def _without_block(text: str, action: str, command: Any) -> str:
    """A text-format reply without the fenced block that held its action, found as the agent found it
    (pipeline.agent.actions); the text as is when none is."""
    for block in _FENCED_BLOCK.finditer(text):
        tag, body = block.group(2).lower(), block.group(3).strip("\n")
        if (tag == BASH and action == SUBMIT and body.strip() == SUBMIT) or (tag == action and body == command):
            return text[:block.start()] + text[block.end():]
    return text
