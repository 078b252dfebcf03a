"""Other harnesses' agent trajectories, read for ``swepipe replay``: each file becomes a RecordedTrajectory
(pipeline.interop.recorded), every reply the one swepipe tool call it stands for.

Formats (the shapes as their sources write them; the references are to the harnesses' repositories):

``mini-swe-agent-1``: mini-swe-agent 1.x, ``<instance_id>.traj.json`` with ``"trajectory_format":
    "mini-swe-agent-1"`` (SWE-agent/mini-swe-agent, src/minisweagent/run/utils/save.py ``save_traj``; the agent,
    agents/default.py). ``messages`` are plain ``{"role", "content"}``; a reply is an assistant message, its action
    the one fenced block mini's ``action_regex`` finds (default ```` ```bash\\s*\\n(.*?)\\n``` ````, counted over the
    whole reply, so a reply with two such blocks was a format error and stands for no call), the command stripped
    as mini strips it. The user message after a reply holds the observation, ``<returncode>N</returncode>`` first.
``mini-swe-agent-2``: mini-swe-agent 2.x, ``"trajectory_format": "mini-swe-agent-1.1"`` (agents/default.py
    ``serialize``; models/litellm_model.py, models/utils/actions_toolcall.py, actions_toolcall_response.py and
    actions_text.py; run/benchmarks/swebench.py; config/benchmarks/swebench.yaml). A reply is the model's own
    message (chat ``{"role": "assistant", "tool_calls": [...]}`` or a Responses API ``{"object": "response",
    "output": [...]}``) with mini's parse of it in ``extra.actions`` (``[{"command", "tool_call_id"?}]``), read
    first; a reply may run several bash commands (parallel tool calls), replayed as one step each. The outputs are
    ``tool`` / ``function_call_output`` messages (text-based models: user messages) with ``extra.returncode``. A
    reply mini could not parse is not kept: only its format error is, a user message with ``extra.interrupt_type``
    ``FormatError`` (the reply's text, when kept, in ``extra.model_response``). The end is a ``{"role": "exit",
    "extra": {"exit_status", "submission"}}`` message. SWE-bench's 2.x prompt has the agent write ``git diff --
    <files> > patch.txt`` and submit with ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt``: the
    files listed are ``submitted_files`` (so are those of a submitting ``git add <files>``, 1.x's prompts' way).
``swe-agent``: SWE-agent's ``<instance_id>.traj`` (SWE-agent/SWE-agent, sweagent/agent/agents.py
    ``get_trajectory_data``, ``add_step_to_trajectory``, ``forward_with_handling``; sweagent/tools/parsing.py;
    tools/edit_anthropic/config.yaml and bin/str_replace_editor). ``trajectory`` holds every reply, those SWE-agent
    rejected and asked again for (a format error, a blocked command, bad syntax) too; ``history`` holds only the
    replies it ran, so a step missing from it stands for no call. Actions are command lines: ``str_replace_editor``
    calls become the editor's (read as its argparse reads them, words split as the shell does; the function-calling
    parser's JSON arguments in ``history``'s ``tool_calls`` win when present), ``submit`` submits, the windowed tools
    (``open``, ``goto``, ``edit`` ...) have no counterpart (NotReplayable), anything else is a bash command. SWE-agent
    records no exit codes.
``swepipe``: ``swepipe export --format trajectories`` (pipeline.interop.export), mini-swe-agent 1.x's shape with
    ``info.swepipe``; each reply's ``extra`` holds the action swepipe's agent read from it (``action``,
    ``command``, ``exit_code``, ``format_error``), used as is.

Paths are kept as written; ``repo_root`` says where the source had the repository (mini's environment ``cwd``,
SWE-agent's repository ``/<repo_name>``), for the replay to map. A reply's text beside its action is kept byte for
byte (a text-format reply's action block cut out of it). A file of any other shape, or none that can be read,
raises NotReplayable naming the file and why; so does a step no swepipe tool can stand for.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.interop.recorded import BASH, EDITOR, SUBMIT, NotReplayable, RecordedStep, RecordedTrajectory

MINI_1, MINI_2, SWE_AGENT, SWEPIPE = "mini-swe-agent-1", "mini-swe-agent-2", "swe-agent", "swepipe"
TRAJECTORY_SUFFIXES = (".traj.json", ".traj")

SUBMIT_MARKERS = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")
# An ``echo`` of a marker as one command of the line (mini submits when a command's output starts with it).
_SUBMIT_ECHO = re.compile(r"(?:^|[;&|(])[ \t]*echo[ \t]+(['\"]?)(?:" + "|".join(SUBMIT_MARKERS) +
                          r")\1[ \t]*(?=$|[;&|)])", re.MULTILINE)
MINI_1_ACTION_REGEX = r"```bash\s*\n(.*?)\n```"
MINI_2_ACTION_REGEX = r"```mswea_bash_command\s*\n(.*?)\n```"
# An action_regex from a file is run only when it is made of these pieces: literal text, \s* or \s+ each followed by
# literal text, and one lazy group between literal texts, so a hostile one cannot make the reader backtrack for long.
_SAFE_REGEX_PIECE = re.compile(r"\\s\*|\\s\+|\\n|\(\.\*\?\)|\\[^A-Za-z0-9]|[A-Za-z0-9_`<>=/:\-\n ]")
_REPEATS = ("\\s*", "\\s+", "(.*?)")
_RETURNCODE_TAG = re.compile(r"\A\s*(?:<exception>.*?</exception>\s*)?<returncode>(-?\d{1,19})</returncode>", re.DOTALL)
_EXIT_CODE_LINE = re.compile(r"\[exit code (-?\d{1,19})\]\s*\Z")

# SWE-agent's windowed tools (tools/windowed, windowed_edit_*, search): a file window swepipe has no counterpart for.
WINDOWED_TOOLS = frozenset({"open", "goto", "scroll_up", "scroll_down", "create", "edit", "insert", "search_file",
                            "search_dir", "find_file"})
EDITOR_ARGUMENTS = ("command", "path", "file_text", "old_str", "new_str", "insert_line", "view_range")
_EDITOR_FLAGS = {"--file_text": "file_text", "--old_str": "old_str", "--new_str": "new_str",
                 "--insert_line": "insert_line", "--view_range": "view_range"}
_FENCED_BLOCK = re.compile(r"^(`{3,})([A-Za-z_]+)[ \t]*\n(.*?)^\1[ \t]*$", re.DOTALL | re.MULTILINE)
_SHELL_OPERATORS = frozenset({";", "&&", "||", "|", "&", ";;", "(", ")"})
_EXIT_CODE_RANGE = range(-(2 ** 63), 2 ** 64)


class _Refused(Exception):
    """Why a file cannot be replayed; read_trajectory_file names the file."""


# -- the public API -------------------------------------------------------------------------------------------


def read_trajectory_file(path: Path) -> RecordedTrajectory:
    """The trajectory in ``path``, its format told from its content; NotReplayable (naming the file and why) for a
    file that is no trajectory of a known format, or holds a step swepipe's tools cannot stand for."""
    try:
        return _with_repo_root(_read(path, _load_json(path)))
    except _Refused as refused:
        raise NotReplayable(f"{path}: {refused}") from None


SWE_BENCH_ROOT = "/testbed"  # where SWE-bench's images, and the harnesses run on them, hold the repository


def _with_repo_root(recorded: RecordedTrajectory) -> RecordedTrajectory:
    """A trajectory whose source did not record its repository root, read as SWE-bench's when its calls name it."""
    if recorded.repo_root is None and any(SWE_BENCH_ROOT in json.dumps(step.call) for step in recorded.steps
                                          if step.call is not None):
        recorded.repo_root = SWE_BENCH_ROOT
        recorded.notes.append(f"the source recorded no repository root; taken as {SWE_BENCH_ROOT}, which its "
                              "calls name")
    return recorded


def find_trajectories(paths: list[Path]) -> list[Path]:
    """The files given, and in the folders given (all the way down) the files named ``*.traj.json`` or ``*.traj``
    and the ``*.json`` files that hold a trajectory; sorted, each once. A path that is neither file nor folder is
    kept, for read_trajectory_file to say why it cannot be read."""
    found: set[Path] = set()
    for path in paths:
        if path.is_dir():
            found.update(_trajectories_under(path))
        else:
            found.add(path)
    return sorted(found)


def _trajectories_under(folder: Path) -> list[Path]:
    found = []
    for root, _dirs, files in os.walk(folder):  # symbolic links to folders are not followed: no loops
        for name in files:
            path = Path(root) / name
            if name.endswith(TRAJECTORY_SUFFIXES) or (name.endswith(".json") and _holds_trajectory(path)):
                found.append(path)
    return found


def _holds_trajectory(path: Path) -> bool:
    try:
        data = _load_json(path)
    except _Refused:
        return False
    return isinstance(data, dict) and _format_of(data) is not None


# -- reading a file -------------------------------------------------------------------------------------------


def _load_json(path: Path) -> Any:
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise _Refused(f"cannot be read ({error.strerror or error})") from None
    try:
        return json.loads(raw)
    except RecursionError:
        raise _Refused("is JSON nested too deeply to read") from None
    except ValueError as error:  # not JSON, not UTF-8, a number too long to read
        raise _Refused(f"is not JSON ({_shorten(str(error))})") from None


def _format_of(data: dict[str, Any]) -> str | None:
    """The format ``data`` is written in, from its keys; None for none this module reads."""
    if isinstance(data.get("trajectory"), list) or isinstance(data.get("attempts"), list):
        return SWE_AGENT
    if not isinstance(data.get("messages"), list):
        return None
    info = _dict(data.get("info"))
    agent_type = _string(_dict(info.get("config")).get("agent_type")) or ""
    if isinstance(info.get("swepipe"), dict) or agent_type.startswith("swepipe."):
        return SWEPIPE
    tag = data.get("trajectory_format")
    if tag is None or (isinstance(tag, str) and tag.startswith("mini-swe-agent")):
        return MINI_2 if tag == "mini-swe-agent-1.1" or _has_mini_2_messages(data["messages"]) else MINI_1
    return None


def _read(path: Path, data: Any) -> RecordedTrajectory:
    if not isinstance(data, dict):
        raise _Refused(f"is no trajectory: its JSON is {_kind(data)}, not an object")
    fmt = _format_of(data)
    if fmt is None:
        tag = data.get("trajectory_format")
        if isinstance(tag, str) and tag.startswith("mini-swe-agent"):
            raise _Refused(f"is a {_shown(tag)} trajectory without its list of messages")
        if tag is not None:
            raise _Refused(f"has trajectory_format {_shown(tag)}, which no reader here knows (mini-swe-agent-1, "
                           "mini-swe-agent-1.1)")
        raise _Refused("is no trajectory of a known format: neither mini-swe-agent's (messages, info) nor "
                       "SWE-agent's (trajectory, history, info)")
    readers: dict[str, Callable[[Path, dict[str, Any]], RecordedTrajectory]] = {
        MINI_1: _read_mini_1, MINI_2: _read_mini_2, SWE_AGENT: _read_swe_agent, SWEPIPE: _read_swepipe}
    return readers[fmt](path, data)


# -- values as a file may hold them ---------------------------------------------------------------------------


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


def _shorten(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _shown(value: Any) -> str:
    """A value of a file, briefly: a scalar's repr, else what it is (a deep list's repr could overflow the stack)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return _shorten(repr(value), 80)
    return _kind(value)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _text(content: Any) -> str | None:
    """A message's content as text: a string as is; a list of parts (``[{"type": "text", "text": ...}]``) as its
    texts, joined by a blank line as mini-swe-agent's inspector joins them; None for anything else."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part if isinstance(part, str) else _dict(part).get("text") for part in content]
        return "\n\n".join(part for part in parts if isinstance(part, str) and part)
    return None


def _exit_code(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value in _EXIT_CODE_RANGE:
        return value
    return None


def _cost(value: Any, notes: list[str]) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            cost = float(value)
        except OverflowError:
            cost = math.inf
        if math.isfinite(cost) and cost >= 0:
            return cost
    notes.append(f"the recorded cost {_shown(value)} is no amount of dollars; left out")
    return None


def _parse_json_text(value: Any) -> Any:
    """JSON that a field holds as text (SWE-agent's replay_config, a tool call's arguments); None when it is none."""
    if not isinstance(value, (str, bytes)):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return None


def _instance_id(path: Path, *recorded: Any) -> str:
    """The first recorded id that is a non-empty string, else the file's name without its suffix when it has a
    trajectory's, else its folder's name."""
    for value in recorded:
        if isinstance(value, str) and value.strip():
            return value
    for suffix in TRAJECTORY_SUFFIXES:
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            return path.name[:-len(suffix)]
    return path.parent.name or path.stem


def _bash(command: str) -> dict[str, Any]:
    return {"name": BASH, "arguments": {"command": command}}


def _submit() -> dict[str, Any]:
    return {"name": SUBMIT, "arguments": {}}


def _editor(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"name": EDITOR, "arguments": arguments}


def _summary(info: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """What an ``info`` of mini-swe-agent's shape (also SWE-agent's, swepipe's) says of the end."""
    stats = _dict(info.get("model_stats"))
    submission, status = info.get("submission"), info.get("exit_status")
    return {"submission": _string(submission), "exit_status": _string(status) or None,
            "cost": _cost(stats.get("instance_cost"), notes)}


# -- mini-swe-agent: what both versions share ----------------------------------------------------------------


@dataclass
class _MiniAction:
    command: str
    exit_code: int | None = None


@dataclass
class _MiniReply:
    thought: str
    actions: list[_MiniAction] | None  # None: mini could not parse the reply (a format error)


@dataclass
class _MiniSteps:
    steps: list[RecordedStep] = field(default_factory=list)
    run: list[str] = field(default_factory=list)  # the commands before the submission, in order
    submitted: str | None = None  # the command that submitted


def _mini_trajectory(path: Path, data: dict[str, Any], fmt: str, replies: list[_MiniReply],
                     notes: list[str], exit_status: str | None = None) -> RecordedTrajectory:
    info = _dict(data.get("info"))
    config = _dict(info.get("config"))
    summary = _summary(info, notes)
    if exit_status is not None and summary["exit_status"] is None:
        summary["exit_status"] = exit_status
    made = _mini_steps(replies, summary["exit_status"], notes)
    return RecordedTrajectory(
        source=path, format=fmt, instance_id=_instance_id(path, data.get("instance_id")), steps=made.steps,
        submitted_files=_submitted_files(made.run, made.submitted), model=_model_name(config),
        repo_root=_string(_dict(config.get("environment")).get("cwd")) or None, notes=notes, **summary)


def _model_name(config: dict[str, Any]) -> str | None:
    return _string(_dict(config.get("model")).get("model_name")) or None


def _mini_steps(replies: list[_MiniReply], exit_status: str | None, notes: list[str]) -> _MiniSteps:
    """One step a command (a reply that ran several makes several, its text with the first); the command mini
    submitted with (see _submit_at) becomes a submit."""
    made = _MiniSteps()
    acting = [number for number, reply in enumerate(replies) if reply.actions]
    last = acting[-1] if acting else None
    for number, reply in enumerate(replies):
        if reply.actions is None:
            made.steps.append(RecordedStep(reply.thought, None))
            continue
        if len(reply.actions) > 1:
            notes.append(f"reply {number + 1} ran {len(reply.actions)} commands: replayed as one step each, the "
                         "reply's text with the first")
        submit_at = _submit_at(reply.actions, exit_status) if number == last else None
        for index, action in enumerate(reply.actions):
            thought = reply.thought if index == 0 else ""
            if index == submit_at:
                made.submitted = action.command
                made.steps.append(RecordedStep(thought, _submit()))
                if index + 1 < len(reply.actions):
                    notes.append(f"reply {number + 1}: the commands after its submission were not run; left out")
                break
            if _SUBMIT_ECHO.search(action.command):
                notes.append(f"reply {number + 1} echoes the submission marker, but mini did not end there: "
                             "replayed as the bash command it was")
            made.run.append(action.command)
            made.steps.append(RecordedStep(thought, _bash(action.command), action.exit_code))
    if exit_status == "Submitted" and made.submitted is None and last is not None:
        made.submitted = made.run[-1]
        made.steps.append(RecordedStep("", _submit()))
        notes.append("mini recorded a submission, but no command echoes its marker: the last command is replayed as "
                     "it was, then a submit")
    return made


def _submit_at(actions: list[_MiniAction], exit_status: str | None) -> int | None:
    """Which command of the last reply that ran any submitted: the one echoing the marker, when mini recorded a
    submission or the file ends before mini recorded any end (none echoing it: see _mini_steps)."""
    marked = next((index for index, action in enumerate(actions) if _SUBMIT_ECHO.search(action.command)), None)
    return marked if exit_status in ("Submitted", None) else None


def _action_regex(config_regex: Any, default: str) -> re.Pattern[str]:
    """mini's action regex: the trajectory's config's, when it is one that is safe to run, else ``default``;
    _Refused for a config's regex that is not (the steps cannot be told without it)."""
    if config_regex is None:
        return re.compile(default, re.DOTALL)
    if not isinstance(config_regex, str) or not _is_safe_regex(config_regex):
        raise _Refused(f"its config's action_regex {_shown(config_regex)} is not one this reader runs (literal "
                       "text around one (.*?) group)")
    return re.compile(config_regex, re.DOTALL)


def _is_safe_regex(regex: str) -> bool:
    pieces, position = [], 0
    while position < len(regex):
        piece = _SAFE_REGEX_PIECE.match(regex, position)
        if piece is None:
            return False
        pieces.append(piece.group())
        position = piece.end()
    repeats_side_by_side = any(first in _REPEATS and second in _REPEATS
                               for first, second in zip(pieces, pieces[1:], strict=False))
    return pieces.count("(.*?)") == 1 and not repeats_side_by_side


def _without_action_match(text: str, regex: Any) -> str:
    """A text-based reply's text without its action's block (as is when the regex cannot be run or finds none)."""
    try:
        reply = _parse_text_action(text, _action_regex(regex, MINI_2_ACTION_REGEX))
    except _Refused:
        return text
    return reply.thought if reply.actions else text


def _parse_text_action(text: str, pattern: re.Pattern[str]) -> _MiniReply:
    """A text-based reply as mini reads it: exactly one match of the regex (counted over the whole reply), its
    group stripped; the reply's text without the match is the thought."""
    found = list(pattern.finditer(text))
    if len(found) != 1:
        return _MiniReply(text, None)
    match = found[0]
    return _MiniReply(text[:match.start()] + text[match.end():], [_MiniAction(match.group(1).strip())])


def _observed_exit_code(message: dict[str, Any]) -> int | None:
    """The exit code an observation message holds: ``extra.returncode``, else the rendered templates' own
    ``<returncode>N</returncode>`` (first) or ``[exit code N]`` (last)."""
    recorded = _dict(message.get("extra")).get("returncode")
    if recorded is not None:
        return _exit_code(recorded)
    text = _text(message.get("content"))
    if text is None:
        text = _string(message.get("output")) or ""
    found = _RETURNCODE_TAG.match(text) or _EXIT_CODE_LINE.search(text)
    return _exit_code(int(found.group(1))) if found else None


# -- mini-swe-agent 1.x -----------------------------------------------------------------------------------------


def _read_mini_1(path: Path, data: dict[str, Any]) -> RecordedTrajectory:
    notes: list[str] = []
    messages = data["messages"]
    config = _dict(_dict(data.get("info")).get("config"))
    pattern = _action_regex(_dict(config.get("agent")).get("action_regex"), MINI_1_ACTION_REGEX)
    replies: list[_MiniReply] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        text = _text(message.get("content"))
        if text is None:
            notes.append(f"reply {len(replies) + 1} has no text content: read as a reply without an action")
            replies.append(_MiniReply("", None))
            continue
        reply = _parse_text_action(text, pattern)
        if reply.actions:
            reply.actions[0].exit_code = _exit_code_after(messages, index)
        replies.append(reply)
    return _mini_trajectory(path, data, MINI_1, replies, notes)


def _exit_code_after(messages: list[Any], index: int) -> int | None:
    following = messages[index + 1] if index + 1 < len(messages) else None
    if isinstance(following, dict) and following.get("role") == "user":
        return _observed_exit_code(following)
    return None


# -- mini-swe-agent 2.x -----------------------------------------------------------------------------------------


def _has_mini_2_messages(messages: list[Any]) -> bool:
    """Whether the messages are 2.x's (its development versions still wrote the tag ``mini-swe-agent-1``)."""
    for message in messages:
        message = _dict(message)
        if (message.get("role") in ("exit", "tool") or message.get("object") == "response"
                or message.get("type") == "function_call_output" or "actions" in _dict(message.get("extra"))):
            return True
    return False


def _is_reply(message: dict[str, Any]) -> bool:
    return message.get("role") == "assistant" or message.get("object") == "response"


def _is_format_error(message: dict[str, Any]) -> bool:
    return _dict(message.get("extra")).get("interrupt_type") == "FormatError"


def _read_mini_2(path: Path, data: dict[str, Any]) -> RecordedTrajectory:
    notes: list[str] = []
    messages = [message for message in data["messages"] if isinstance(message, dict)]
    if len(messages) < len(data["messages"]):
        notes.append(f"{len(data['messages']) - len(messages)} message(s) that are no object left out")
    model_config = _dict(_dict(_dict(data.get("info")).get("config")).get("model"))
    regex = model_config.get("action_regex")
    replies: list[_MiniReply] = []
    exit_status = None
    previous_was_reply = False
    for index, message in enumerate(messages):
        if _is_reply(message):
            replies.append(_mini_2_reply(message, messages[index + 1:], regex, len(replies) + 1, notes))
            previous_was_reply = True
            continue
        if _is_format_error(message):
            if previous_was_reply:  # a kept reply mini then refused: it ran nothing
                replies[-1].actions = None
            else:  # mini keeps only the error of a reply it could not parse
                replies.append(_MiniReply(_refused_reply_text(message), None))
        elif message.get("role") == "exit":
            exit_status = _string(_dict(message.get("extra")).get("exit_status")) or None
        previous_was_reply = False
    return _mini_trajectory(path, data, MINI_2, replies, notes, exit_status)


def _mini_2_reply(message: dict[str, Any], after: list[dict[str, Any]], regex: Any, number: int,
                  notes: list[str]) -> _MiniReply:
    text = _reply_text(message)
    commands = _recorded_actions(message, number, notes)
    tool_calls = _tool_call_actions(message)
    if commands is None:
        commands = tool_calls
    if commands is None:  # a text-based model's reply mini's parse was not kept of: read with its regex
        reply = _parse_text_action(text, _action_regex(regex, MINI_2_ACTION_REGEX))
        commands, text = [(action.command, None) for action in reply.actions or []], reply.thought
    elif tool_calls is None:
        text = _without_action_match(text, regex)
    if not commands:
        return _MiniReply(text, None)
    observations = _observations(after)
    actions = [_MiniAction(command, _exit_code_of(call_id, position, observations))
               for position, (command, call_id) in enumerate(commands)]
    return _MiniReply(text, actions)


def _reply_text(message: dict[str, Any]) -> str:
    """A reply's text: a chat message's content, or a Responses API answer's message items."""
    text = _text(message.get("content"))
    if text is not None:
        return text
    parts = [_text(item.get("content")) for item in _output_items(message, "message")]
    return "\n\n".join(part for part in parts if part)


def _output_items(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [item for item in _list(message.get("output")) if isinstance(item, dict) and item.get("type") == kind]


def _recorded_actions(message: dict[str, Any], number: int,
                      notes: list[str]) -> list[tuple[str, str | None]] | None:
    """mini's own parse of a reply, ``extra.actions``: each command and its tool call's id; None when not kept."""
    actions = _dict(message.get("extra")).get("actions")
    if not isinstance(actions, list):
        return None
    commands = [(action["command"], _string(action.get("tool_call_id")))
                for action in actions if isinstance(action, dict) and isinstance(action.get("command"), str)]
    if len(commands) < len(actions):
        notes.append(f"reply {number}: {len(actions) - len(commands)} recorded action(s) without a command left out")
    return commands


def _tool_call_actions(message: dict[str, Any]) -> list[tuple[str, str | None]] | None:
    """The bash tool calls of a reply without ``extra.actions``, as mini reads them: [] when one is not a bash
    call with a command (mini refused the reply); None when the reply makes no tool call (a text-based reply)."""
    calls = []
    for call in _list(message.get("tool_calls")):
        function = _dict(_dict(call).get("function"))
        calls.append((function.get("name"), function.get("arguments"), _dict(call).get("id")))
    for item in _output_items(message, "function_call"):
        calls.append((item.get("name"), item.get("arguments"), item.get("call_id") or item.get("id")))
    if not calls:
        return None
    commands = []
    for name, arguments, call_id in calls:
        command = _dict(_parse_json_text(arguments)).get("command")
        if name != "bash" or not isinstance(command, str):
            return []
        commands.append((command, _string(call_id)))
    return commands


def _observations(after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The outputs that follow a reply, up to the next reply."""
    found = []
    for message in after:
        if _is_reply(message):
            break
        if not _is_format_error(message) and message.get("role") != "exit":
            found.append(message)
    return found


def _exit_code_of(call_id: str | None, position: int, observations: list[dict[str, Any]]) -> int | None:
    """The exit code of a reply's ``position``-th command: its tool call's result, else the output in that place."""
    if call_id is not None:
        for message in observations:
            if call_id in (message.get("tool_call_id"), message.get("call_id")):
                return _observed_exit_code(message)
        return None
    return _observed_exit_code(observations[position]) if position < len(observations) else None


def _refused_reply_text(message: dict[str, Any]) -> str:
    """The text of a reply mini refused, from its format error: ``model_response``, or the provider's response."""
    extra = _dict(message.get("extra"))
    kept = extra.get("model_response")
    if isinstance(kept, str):
        return kept
    response = _dict(extra.get("response"))
    choices = _list(response.get("choices"))
    if choices:
        return _text(_dict(_dict(choices[0]).get("message")).get("content")) or ""
    return _reply_text({"output": response.get("output")})


# -- what a submission listed -------------------------------------------------------------------------------


def _submitted_files(run: list[str], submitted: str | None) -> list[str] | None:
    """The files the submitting command stages (``git add <files>``), or the files of the ``git diff -- <files>
    > <file>`` that wrote the file it prints (``cat patch.txt``); None when it lists none."""
    if submitted is None:
        return None
    staged = _git_add_files(submitted)
    if staged is not None:
        return staged
    for printed in _printed_files(submitted):
        for command in reversed(run):
            files = _git_diff_files_into(command, printed)
            if files is not None:
                return files
    return None


def _simple_commands(command: str) -> list[list[str]]:
    """The words of each simple command of a shell text, split at ; && || | & and line ends as the shell splits
    them (redirections' operators kept as words); [] when the text cannot be split (an unclosed quote)."""
    found: list[list[str]] = []
    for line in command.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            words = list(lexer)
        except ValueError:
            return []
        current: list[str] = []
        for word in words:
            if word not in _SHELL_OPERATORS:
                current.append(word)
            elif current:
                found.append(current)
                current = []
        if current:
            found.append(current)
    return found


def _git_add_files(command: str) -> list[str] | None:
    for words in _simple_commands(command):
        if words[:2] == ["git", "add"]:
            arguments = [word for word in words[2:] if word != "--"]
            files = [word for word in arguments if not word.startswith("-")]
            if files and len(files) == len(arguments) and "." not in files:
                return files
            return None  # -A, -u, "." or flags: everything, no list
    return None


def _printed_files(command: str) -> list[str]:
    return [word for words in _simple_commands(command) if words[0] == "cat"
            for word in words[1:] if not word.startswith("-")]


def _git_diff_files_into(command: str, target: str) -> list[str] | None:
    for words in _simple_commands(command):
        if words[:2] != ["git", "diff"] or "--" not in words:
            continue
        for operator in (">", ">>"):
            if operator in words and words[words.index(operator) + 1:][:1] == [target]:
                files = words[words.index("--") + 1:words.index(operator)]
                return files or None
    return None


# -- SWE-agent ----------------------------------------------------------------------------------------------------


def _read_swe_agent(path: Path, data: dict[str, Any]) -> RecordedTrajectory:
    notes: list[str] = []
    attempt = _chosen_attempt(data, notes)
    info = _dict(attempt.get("info")) or _dict(data.get("info"))
    summary = _summary(info, notes)
    config = _dict(_parse_json_text(attempt.get("replay_config") or data.get("replay_config")))
    steps = _swe_agent_steps(_list(attempt.get("trajectory")), _list(attempt.get("history")),
                             summary["exit_status"], notes)
    recorded_id = _dict(config.get("problem_statement")).get("id"), info.get("instance_id")
    return RecordedTrajectory(
        source=path, format=SWE_AGENT, steps=steps, notes=notes, **summary,
        instance_id=_instance_id(path) if path.name.endswith(".traj") else _instance_id(path, *recorded_id),
        model=_string(_dict(_dict(config.get("agent")).get("model")).get("name")) or None,
        repo_root=_swe_agent_repo_root(config, _list(attempt.get("trajectory"))))


def _chosen_attempt(data: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The run itself, or (a retrying agent's file without its own trajectory) its last attempt."""
    if isinstance(data.get("trajectory"), list):
        return data
    attempts = [attempt for attempt in _list(data.get("attempts")) if isinstance(_dict(attempt).get("trajectory"),
                                                                                   list)]
    if not attempts:
        raise _Refused("is a SWE-agent trajectory without steps: neither trajectory nor attempts hold any")
    if len(attempts) > 1:
        notes.append(f"{len(attempts)} attempts: the last is read")
    return dict(attempts[-1])


def _swe_agent_repo_root(config: dict[str, Any], trajectory: list[Any]) -> str | None:
    """SWE-agent's repository is at /<repo_name> (sweagent/environment); else the first step's working folder."""
    name = _dict(_dict(config.get("env")).get("repo")).get("repo_name")
    if isinstance(name, str) and name.strip("/") and "/" not in name.strip("/"):
        return "/" + name.strip("/")
    for step in trajectory:
        state = _dict(_parse_json_text(_dict(step).get("state")))
        folder = state.get("working_dir")
        if isinstance(folder, str) and folder.startswith("/"):
            return folder
    return None


def _swe_agent_steps(trajectory: list[Any], history: list[Any], exit_status: str | None,
                     notes: list[str]) -> list[RecordedStep]:
    """Each step of the trajectory, matched in order to the replies ``history`` kept (those SWE-agent ran); a
    step it holds no match for was rejected and asked again for, and stands for no call."""
    ran = [entry for entry in history if isinstance(entry, dict) and entry.get("role") == "assistant"
           and isinstance(entry.get("action"), str) and not entry.get("is_demo")]
    steps, matched = [], 0
    for number, step in enumerate(trajectory, 1):
        step = _dict(step)
        action = _string(step.get("action")) or ""
        thought = _string(step.get("thought"))
        thought = (_string(step.get("response")) or "") if thought is None else thought
        if number == len(trajectory) and _is_harness_exit(step, exit_status):
            notes.append(f"step {number} is SWE-agent's own ending ({_shorten(thought, 60)}), no reply: left out")
            break
        message: dict[str, Any] = {}
        if matched < len(ran) and ran[matched].get("action") == action:
            message, matched = ran[matched], matched + 1
        elif ran:
            if action.strip():
                notes.append(f"step {number}: SWE-agent rejected its action and asked again (a format error, a "
                             "blocked command or bad syntax): replayed as a reply without a call")
            steps.append(RecordedStep(thought, None))
            continue
        steps.append(RecordedStep(thought, _swe_agent_call(action, message, number, notes)))
    return _drop_early_submits(steps, notes)


def _is_harness_exit(step: dict[str, Any], exit_status: str | None) -> bool:
    """The step SWE-agent adds when it stops the agent itself (cost limit, repeated format errors, ...): no
    action, the exit message as both its thought and its response."""
    thought = step.get("thought")
    return (not (_string(step.get("action")) or "").strip() and isinstance(thought, str)
            and thought == step.get("response") and "exit" in (exit_status or ""))


def _swe_agent_call(action: str, message: dict[str, Any], number: int, notes: list[str]) -> dict[str, Any] | None:
    words = action.split(None, 1)
    if not words:
        return None
    tool = words[0]
    if tool in WINDOWED_TOOLS:
        raise _Refused(f"step {number} uses SWE-agent's windowed tool `{tool}`, which swepipe has no counterpart "
                       "for")
    if tool == "submit":
        return _submit()
    if tool == "str_replace_editor":
        arguments = _editor_tool_call_arguments(message) or _editor_command_arguments(action)
        if arguments is not None:
            return _editor(arguments)
        notes.append(f"step {number}: its str_replace_editor call could not be read; replayed as the shell "
                     "command it is")
    return _bash(action)


def _editor_tool_call_arguments(message: dict[str, Any]) -> dict[str, Any] | None:
    """The str_replace_editor call's JSON arguments, as the function-calling model sent them (no shell quoting)."""
    calls = _list(message.get("tool_calls"))
    function = _dict(_dict(calls[0]).get("function")) if len(calls) == 1 else {}
    if function.get("name") != "str_replace_editor":
        return None
    arguments = _dict(_parse_json_text(function.get("arguments")))
    if not isinstance(arguments.get("command"), str) or not isinstance(arguments.get("path"), str):
        return None
    return {name: arguments[name] for name in EDITOR_ARGUMENTS if name in arguments}


def _editor_command_arguments(action: str) -> dict[str, Any] | None:
    """A ``str_replace_editor <command> <path> [--flag value ...]`` line as the tool's argparse reads it, its
    words split as the shell splits them; None for a line that is not exactly such a call (a word after it that
    is no flag or value: a second command, a pipe)."""
    try:
        words = shlex.split(action)
    except ValueError:
        return None
    if len(words) < 3 or words[0] != "str_replace_editor":
        return None
    arguments: dict[str, Any] = {"command": words[1], "path": words[2]}
    rest = words[3:]
    while rest:
        flag, given, inline = rest[0].partition("=")
        name = _EDITOR_FLAGS.get(flag)
        if name is None:
            return None
        count = 2 if name == "view_range" else 1
        values = [inline] if given else rest[1:1 + count]
        rest = rest[1:] if given else rest[1 + count:]
        if len(values) != count:
            return None
        value = _editor_value(name, values)
        if value is None:
            return None
        arguments[name] = value
    return arguments


def _editor_value(name: str, values: list[str]) -> Any:
    if name not in ("insert_line", "view_range"):
        return values[0]
    try:
        numbers = [int(value) for value in values]
    except ValueError:
        return None
    return numbers if name == "view_range" else numbers[0]


def _drop_early_submits(steps: list[RecordedStep], notes: list[str]) -> list[RecordedStep]:
    """A submit that did not end the run (SWE-agent's review-on-submit tool shows a checklist first) is left
    out: in swepipe, every submit ends."""
    calls = [index for index, step in enumerate(steps) if step.call is not None]
    kept = []
    for index, step in enumerate(steps):
        if step.call is not None and step.call["name"] == SUBMIT and index != calls[-1]:
            notes.append(f"step {index + 1} submits, but the run went on (a review before the submission): left out")
            continue
        kept.append(step)
    return kept


# -- swepipe's own export ------------------------------------------------------------------------------------


def _read_swepipe(path: Path, data: dict[str, Any]) -> RecordedTrajectory:
    notes: list[str] = []
    info = _dict(data.get("info"))
    own, config = _dict(info.get("swepipe")), _dict(info.get("config"))
    role = _string(own.get("role")) or (_string(config.get("agent_type")) or "").removeprefix("swepipe.")
    if role == "principal":
        raise _Refused("is swepipe's principal: one model call that writes edits, no agent steps to replay")
    replies = [message for message in data["messages"] if isinstance(message, dict)
               and message.get("role") == "assistant"]
    steps: list[RecordedStep] = []
    for number, message in enumerate(replies, 1):
        steps.extend(_swepipe_steps(message, number, notes))
    # Its files are <instance_id>/<agent>.traj.json: the file's name is the agent's.
    instance_id = _string(own.get("instance_id")) or path.parent.name or path.stem
    return RecordedTrajectory(source=path, format=SWEPIPE, instance_id=instance_id, steps=steps, notes=notes,
                              model=_model_name(config), **_summary(info, notes))


def _swepipe_steps(message: dict[str, Any], number: int, notes: list[str]) -> list[RecordedStep]:
    """The steps a reply of swepipe's agent stands for, from what the agent recorded it read (its ``extra``)."""
    extra = _dict(message.get("extra"))
    text = _text(message.get("content")) or ""
    if extra.get("format_error"):
        return [RecordedStep(text, None)]
    action, command = _string(extra.get("action")), extra.get("command")
    if not action:
        notes.append(f"reply {number} was not acted on (the run ended before it was): left out")
        return []
    calls = _swepipe_calls(action, command, number, notes)
    if not calls:
        return [RecordedStep(text, None)]
    thought = text if message.get("tool_calls") else _without_block(text, action, command)
    exit_code = _exit_code(extra.get("exit_code"))
    return [RecordedStep(thought if index == 0 else "", call, exit_code if call["name"] == BASH else None)
            for index, call in enumerate(calls)]


def _swepipe_calls(action: str, command: Any, number: int, notes: list[str]) -> list[dict[str, Any]]:
    if action == SUBMIT:
        return [_submit()]
    if not isinstance(command, str) or not command:
        notes.append(f"reply {number}: its {action} action has no recorded command; read as no call")
        return []
    if action == BASH:
        return [_bash(command)]
    if action == EDITOR:
        arguments = _parse_json_text(command)
        return [_editor(arguments)] if isinstance(arguments, dict) else []
    if action in ("edit", "view"):
        return _editor_block_calls(action, command, number, notes)
    raise _Refused(f"reply {number} is swepipe's `{action}` action, which a replay has no counterpart for")


def _editor_block_calls(action: str, command: str, number: int, notes: list[str]) -> list[dict[str, Any]]:
    """A text-format ```edit or ```view block as editor calls, read by the agent's own parser."""
    from pipeline.agent.edit_actions import recorded_editor_calls

    calls = [_editor(call.to_dict()) for call in recorded_editor_calls(action, command)]
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
