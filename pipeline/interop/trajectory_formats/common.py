"""What the readers of every format share: a file's JSON, the values a file may hold as the readers take them (a
value of another type read as none), the swepipe tool calls they make of a step, and what an ``info`` says of the
end."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from pipeline.interop.recorded import BASH, EDITOR, SUBMIT, RecordedCall, recorded_cost

TRAJECTORY_SUFFIXES = (".traj.json", ".traj")

_EXIT_CODE_RANGE = range(-(2 ** 63), 2 ** 64)


class Refused(Exception):
    """Why a file cannot be replayed; read_trajectory_file names the file."""


# -- reading a file -------------------------------------------------------------------------------------------


def load_json(path: Path) -> Any:
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise Refused(f"cannot be read ({error.strerror or error})") from None
    try:
        return json.loads(raw)
    except RecursionError:
        raise Refused("is JSON nested too deeply to read") from None
    except ValueError as error:  # not JSON, not UTF-8, a number too long to read
        raise Refused(f"is not JSON ({shorten(str(error))})") from None


# -- values as a file may hold them ---------------------------------------------------------------------------


def kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


def shorten(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def shown(value: Any) -> str:
    """A value of a file, briefly: a scalar's repr, else what it is (a deep list's repr could overflow the stack)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return shorten(repr(value), 80)
    return kind(value)


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def content_text(content: Any) -> str | None:
    """A message's content as text: a string as is; a list of parts (``[{"type": "text", "text": ...}]``) as its
    texts, joined by a blank line as mini-swe-agent's inspector joins them; None for anything else."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part if isinstance(part, str) else as_dict(part).get("text") for part in content]
        return "\n\n".join(part for part in parts if isinstance(part, str) and part)
    return None


def opening_text(messages: list[Any], is_reply: Callable[[dict[str, Any]], bool]) -> str | None:
    """The task as the agent was given it: the texts of the messages before its first reply (``is_reply``), joined
    by a blank line; None when there are none."""
    parts = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        if is_reply(message):
            break
        text = content_text(message.get("content"))
        if text:
            parts.append(text)
    return "\n\n".join(parts) or None


def as_exit_code(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value in _EXIT_CODE_RANGE:
        return value
    return None


def parse_json_text(value: Any) -> Any:
    """JSON that a field holds as text (SWE-agent's replay_config, a tool call's arguments); None when it is none."""
    if not isinstance(value, (str, bytes)):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return None


def instance_id(path: Path, *recorded: Any, named_for_task: bool = True) -> str:
    """The task a trajectory belongs to, by one rule for every format: the id the file records (the first of
    ``recorded`` that is a non-empty string), else the task its name gives (the name without a trajectory's suffix,
    ``<instance_id>.traj.json`` or ``.traj``), else its folder's name. A file whose name gives one task while it
    records another is refused, naming both: replayed as either, it would be listed or counted as the other.
    ``named_for_task``: False for a format whose files are named otherwise (swepipe's ``<agent>.traj.json``)."""
    named = _named_task(path) if named_for_task else None
    for value in recorded:
        if isinstance(value, str) and value.strip():
            if named is not None and named != value:
                raise Refused(f"is named for task {shown(named)} but records task {shown(value)}: which task it "
                              "belongs to is not clear, so it is left out (rename the file or correct its id)")
            return value
    return named or path.parent.name or path.stem


def _named_task(path: Path) -> str | None:
    for suffix in TRAJECTORY_SUFFIXES:
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            return path.name[:-len(suffix)]
    return None


# -- what the readers make of them: swepipe's tool calls, the end of a run ------------------------------------


def bash_call(command: str) -> RecordedCall:
    return {"name": BASH, "arguments": {"command": command}}


def submit_call() -> RecordedCall:
    return {"name": SUBMIT, "arguments": {}}


def editor_call(arguments: dict[str, Any]) -> RecordedCall:
    return {"name": EDITOR, "arguments": arguments}


class RunEnd(TypedDict):
    """What a trajectory's ``info`` says of the end: the submission, the exit status, the cost recorded."""

    submission: str | None
    exit_status: str | None
    cost: float | None


def summary_of(info: dict[str, Any], notes: list[str]) -> RunEnd:
    """What an ``info`` of mini-swe-agent's shape (also SWE-agent's, swepipe's) says of the end."""
    stats = as_dict(info.get("model_stats"))
    submission, status = info.get("submission"), info.get("exit_status")
    return {"submission": as_string(submission), "exit_status": as_string(status) or None,
            "cost": recorded_cost(stats.get("instance_cost"), notes)}


def model_name(config: dict[str, Any]) -> str | None:
    return as_string(as_dict(config.get("model")).get("model_name")) or None

