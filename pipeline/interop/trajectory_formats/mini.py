"""mini-swe-agent's trajectories, 1.x's and 2.x's: read together, as they share how a reply's commands become
steps, which command submitted, what the submission listed and where an observation holds its exit code.

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
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.interop.recorded import RecordedStep, RecordedTrajectory
from pipeline.interop.trajectory_formats.common import (
    Refused,
    as_dict,
    as_exit_code,
    as_list,
    as_string,
    bash_call,
    content_text,
    instance_id,
    model_name,
    opening_text,
    parse_json_text,
    shown,
    submit_call,
    summary_of,
)

MINI_1, MINI_2 = "mini-swe-agent-1", "mini-swe-agent-2"

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
_SHELL_OPERATORS = frozenset({";", "&&", "||", "|", "&", ";;", "(", ")"})


# -- mini-swe-agent: what both versions share ----------------------------------------------------------------


@dataclass
class _MiniAction:
    command: str
    exit_code: int | None = None
    output: str | None = None


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
    info = as_dict(data.get("info"))
    config = as_dict(info.get("config"))
    summary = summary_of(info, notes)
    if exit_status is not None and summary["exit_status"] is None:
        summary["exit_status"] = exit_status
    made = _mini_steps(replies, summary["exit_status"], notes)
    return RecordedTrajectory(
        source=path, format=fmt, instance_id=instance_id(path, data.get("instance_id")), steps=made.steps,
        submitted_files=_submitted_files(made.run, made.submitted), model=model_name(config),
        repo_root=as_string(as_dict(config.get("environment")).get("cwd")) or None, notes=notes,
        task_text=opening_text(as_list(data.get("messages")), _is_reply), **summary)


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
                made.steps.append(RecordedStep(thought, submit_call()))
                if index + 1 < len(reply.actions):
                    notes.append(f"reply {number + 1}: the commands after its submission were not run; left out")
                break
            if _SUBMIT_ECHO.search(action.command):
                notes.append(f"reply {number + 1} echoes the submission marker, but mini did not end there: "
                             "replayed as the bash command it was")
            made.run.append(action.command)
            made.steps.append(RecordedStep(thought, bash_call(action.command), action.exit_code, action.output))
    if exit_status == "Submitted" and made.submitted is None and last is not None:
        made.submitted = made.run[-1]
        made.steps.append(RecordedStep("", submit_call()))
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
    Refused for a config's regex that is not (the steps cannot be told without it)."""
    if config_regex is None:
        return re.compile(default, re.DOTALL)
    if not isinstance(config_regex, str) or not _is_safe_regex(config_regex):
        raise Refused(f"its config's action_regex {shown(config_regex)} is not one this reader runs (literal "
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
    except Refused:
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
    recorded = as_dict(message.get("extra")).get("returncode")
    if recorded is not None:
        return as_exit_code(recorded)
    text = content_text(message.get("content"))
    if text is None:
        text = as_string(message.get("output")) or ""
    found = _RETURNCODE_TAG.match(text) or _EXIT_CODE_LINE.search(text)
    return as_exit_code(int(found.group(1))) if found else None


# -- mini-swe-agent 1.x -----------------------------------------------------------------------------------------


def read_mini_1(path: Path, data: dict[str, Any]) -> RecordedTrajectory:
    notes: list[str] = []
    messages = data["messages"]
    config = as_dict(as_dict(data.get("info")).get("config"))
    pattern = _action_regex(as_dict(config.get("agent")).get("action_regex"), MINI_1_ACTION_REGEX)
    replies: list[_MiniReply] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        text = content_text(message.get("content"))
        if text is None:
            notes.append(f"reply {len(replies) + 1} has no text content: read as a reply without an action")
            replies.append(_MiniReply("", None))
            continue
        reply = _parse_text_action(text, pattern)
        if reply.actions:
            following = _observation_after(messages, index)
            if following is not None:
                reply.actions[0].exit_code = _observed_exit_code(following)
                reply.actions[0].output = content_text(following.get("content"))
        replies.append(reply)
    return _mini_trajectory(path, data, MINI_1, replies, notes)


def _observation_after(messages: list[Any], index: int) -> dict[str, Any] | None:
    following = messages[index + 1] if index + 1 < len(messages) else None
    return following if isinstance(following, dict) and following.get("role") == "user" else None


# -- mini-swe-agent 2.x -----------------------------------------------------------------------------------------


def has_mini_2_messages(messages: list[Any]) -> bool:
    """Whether the messages are 2.x's (its development versions still wrote the tag ``mini-swe-agent-1``)."""
    for message in messages:
        message = as_dict(message)
        if (message.get("role") in ("exit", "tool") or message.get("object") == "response"
                or message.get("type") == "function_call_output" or "actions" in as_dict(message.get("extra"))):
            return True
    return False


def _is_reply(message: dict[str, Any]) -> bool:
    return message.get("role") == "assistant" or message.get("object") == "response"


def _is_format_error(message: dict[str, Any]) -> bool:
    return as_dict(message.get("extra")).get("interrupt_type") == "FormatError"


def read_mini_2(path: Path, data: dict[str, Any]) -> RecordedTrajectory:
    notes: list[str] = []
    messages = [message for message in data["messages"] if isinstance(message, dict)]
    if len(messages) < len(data["messages"]):
        notes.append(f"{len(data['messages']) - len(messages)} message(s) that are no object left out")
    model_config = as_dict(as_dict(as_dict(data.get("info")).get("config")).get("model"))
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
            exit_status = as_string(as_dict(message.get("extra")).get("exit_status")) or None
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
    actions = []
    for position, (command, call_id) in enumerate(commands):
        observed = _observation_of(call_id, position, observations)
        actions.append(_MiniAction(command, _observed_exit_code(observed) if observed is not None else None,
                                   _observed_text(observed) if observed is not None else None))
    return _MiniReply(text, actions)


def _reply_text(message: dict[str, Any]) -> str:
    """A reply's text: a chat message's content, or a Responses API answer's message items."""
    text = content_text(message.get("content"))
    if text is not None:
        return text
    parts = [content_text(item.get("content")) for item in _output_items(message, "message")]
    return "\n\n".join(part for part in parts if part)


def _output_items(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [item for item in as_list(message.get("output")) if isinstance(item, dict) and item.get("type") == kind]


def _recorded_actions(message: dict[str, Any], number: int,
                      notes: list[str]) -> list[tuple[str, str | None]] | None:
    """mini's own parse of a reply, ``extra.actions``: each command and its tool call's id; None when not kept."""
    actions = as_dict(message.get("extra")).get("actions")
    if not isinstance(actions, list):
        return None
    commands = [(action["command"], as_string(action.get("tool_call_id")))
                for action in actions if isinstance(action, dict) and isinstance(action.get("command"), str)]
    if len(commands) < len(actions):
        notes.append(f"reply {number}: {len(actions) - len(commands)} recorded action(s) without a command left out")
    return commands


def _tool_call_actions(message: dict[str, Any]) -> list[tuple[str, str | None]] | None:
    """The bash tool calls of a reply without ``extra.actions``, as mini reads them: [] when one is not a bash
    call with a command (mini refused the reply); None when the reply makes no tool call (a text-based reply)."""
    calls = []
    for call in as_list(message.get("tool_calls")):
        function = as_dict(as_dict(call).get("function"))
        calls.append((function.get("name"), function.get("arguments"), as_dict(call).get("id")))
    for item in _output_items(message, "function_call"):
        calls.append((item.get("name"), item.get("arguments"), item.get("call_id") or item.get("id")))
    if not calls:
        return None
    commands = []
    for name, arguments, call_id in calls:
        command = as_dict(parse_json_text(arguments)).get("command")
        if name != "bash" or not isinstance(command, str):
            return []
        commands.append((command, as_string(call_id)))
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


def _observation_of(call_id: str | None, position: int,
                    observations: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The observation of a reply's ``position``-th command: its tool call's result, else the output in that
    place."""
    if call_id is not None:
        for message in observations:
            if call_id in (message.get("tool_call_id"), message.get("call_id")):
                return message
        return None
    return observations[position] if position < len(observations) else None


def _observed_text(message: dict[str, Any]) -> str | None:
    text = content_text(message.get("content"))
    return text if text is not None else as_string(message.get("output"))


def _refused_reply_text(message: dict[str, Any]) -> str:
    """The text of a reply mini refused, from its format error: ``model_response``, or the provider's response."""
    extra = as_dict(message.get("extra"))
    kept = extra.get("model_response")
    if isinstance(kept, str):
        return kept
    response = as_dict(extra.get("response"))
    choices = as_list(response.get("choices"))
    if choices:
        return content_text(as_dict(as_dict(choices[0]).get("message")).get("content")) or ""
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


