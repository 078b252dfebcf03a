"""SWE-agent's trajectories.

``swe-agent``: SWE-agent's ``<instance_id>.traj`` (SWE-agent/SWE-agent, sweagent/agent/agents.py
    ``get_trajectory_data``, ``add_step_to_trajectory``, ``forward_with_handling``; sweagent/tools/parsing.py;
    tools/edit_anthropic/config.yaml and bin/str_replace_editor). ``trajectory`` holds every reply, those SWE-agent
    rejected and asked again for (a format error, a blocked command, bad syntax) too; ``history`` holds only the
    replies it ran, so a step missing from it stands for no call. Actions are command lines: ``str_replace_editor``
    calls become the editor's (read as its argparse reads them, words split as the shell does; the function-calling
    parser's JSON arguments in ``history``'s ``tool_calls`` win when present), ``submit`` submits, the windowed tools
    (``open``, ``goto``, ``scroll_*``, ``create``, ``edit``, ``insert``, ``search_*``, ``find_file``) run as SWE-agent's
    0.x or 1.x tools ran them (``windowed``), anything else is a bash command. SWE-agent records no exit codes.
    A file that holds only ``history`` (SWE-agent's demonstrations, which its ``run replay`` and demonstration loader
    read) has its steps there: each reply with an ``action`` that is no demonstration's, the next message its
    observation; its submission, when it records none in ``info``, is what the ``submit`` step printed.
    The repository is where SWE-agent put it: ``/<repo_name>`` of the config's repository (a pre-existing one's name,
    ``owner__repo`` of a GitHub URL, a local folder's name), else the working folder the first step records.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from pipeline.interop.recorded import SUBMIT, RecordedCall, RecordedStep, RecordedTrajectory
from pipeline.interop.trajectory_formats.common import (
    Refused,
    as_dict,
    as_list,
    as_string,
    bash_call,
    editor_call,
    instance_id,
    opening_text,
    parse_json_text,
    shorten,
    submit_call,
    summary_of,
)
from pipeline.interop.trajectory_formats.windowed import (
    WINDOWED_TOOLS,
    WindowSettings,
    generation_of,
    window_settings,
    windowed_command,
)

SWE_AGENT = "swe-agent"

EDITOR_ARGUMENTS = ("command", "path", "file_text", "old_str", "new_str", "insert_line", "view_range")
_EDITOR_FLAGS = {"--file_text": "file_text", "--old_str": "old_str", "--new_str": "new_str",
                 "--insert_line": "insert_line", "--view_range": "view_range"}


def read_swe_agent(path: Path, data: dict[str, Any]) -> RecordedTrajectory:
    notes: list[str] = []
    attempt = _chosen_attempt(data, notes)
    info = as_dict(attempt.get("info")) or as_dict(data.get("info"))
    summary = summary_of(info, notes)
    config = as_dict(parse_json_text(attempt.get("replay_config") or data.get("replay_config")))
    trajectory, history = as_list(attempt.get("trajectory")), as_list(attempt.get("history"))
    settings = window_settings(generation_of(info, trajectory, history), config)
    if trajectory:
        steps = _swe_agent_steps(trajectory, history, summary["exit_status"], settings, notes)
    else:
        steps, printed = _history_steps(history, settings, notes)
        if summary["submission"] is None and printed is not None:
            summary["submission"] = printed
            notes.append("the submission is what the submit step printed (the file records none in info)")
    summary["submission"] = _as_patch(summary["submission"], notes)
    recorded_id = as_dict(config.get("problem_statement")).get("id"), info.get("instance_id")
    return RecordedTrajectory(
        source=path, format=SWE_AGENT, steps=steps, notes=notes, **summary,
        instance_id=instance_id(path, *recorded_id),
        model=as_string(as_dict(as_dict(config.get("agent")).get("model")).get("name")) or None,
        repo_root=_swe_agent_repo_root(config, trajectory, history),
        task_text=opening_text(history, lambda message: message.get("role") == "assistant"))


def _chosen_attempt(data: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The run itself, or (a retrying agent's file without its own trajectory) its last attempt; a file of
    ``history`` alone is its own."""
    if isinstance(data.get("trajectory"), list) or (isinstance(data.get("history"), list)
                                                    and not isinstance(data.get("attempts"), list)):
        return data
    attempts = [attempt for attempt in as_list(data.get("attempts"))
                if isinstance(as_dict(attempt).get("trajectory"), list)]
    if not attempts:
        raise Refused("is a SWE-agent trajectory without steps: neither trajectory nor attempts hold any")
    if len(attempts) > 1:
        notes.append(f"{len(attempts)} attempts: the last is read")
    return dict(attempts[-1])


_CURRENT_FOLDER = re.compile(r"\(Current directory: (/[^)\n]*)\)")


def _swe_agent_repo_root(config: dict[str, Any], trajectory: list[Any], history: list[Any]) -> str | None:
    """Where SWE-agent put the repository: /<repo_name> of the config's repository (sweagent/environment/repo.py:
    a pre-existing repository's name, ``owner__repo`` of a GitHub URL, a local folder's name); else the working
    folder of the first step (its state, or the ``(Current directory: ...)`` its observation ends with)."""
    repo = as_dict(as_dict(config.get("env")).get("repo"))
    for name in (repo.get("repo_name"), _github_repo_name(repo.get("github_url")), _folder_name(repo.get("path"))):
        if isinstance(name, str) and name.strip("/") and "/" not in name.strip("/"):
            return "/" + name.strip("/")
    for step in trajectory:
        state = as_dict(parse_json_text(as_dict(step).get("state")))
        folder = state.get("working_dir")
        if isinstance(folder, str) and folder.startswith("/"):
            return folder
    for message in history:
        text = as_string(as_dict(message).get("content")) if as_dict(message).get("role") != "system" else None
        found = _CURRENT_FOLDER.search(text or "")
        if found:
            return found.group(1)
    return None


def _github_repo_name(url: Any) -> str | None:
    """``owner__repo`` of a GitHub repository's URL (https://github.com/owner/repo[.git][/])."""
    if not isinstance(url, str):
        return None
    parts = [part for part in url.strip().removesuffix("/").removesuffix(".git").split("/") if part]
    if len(parts) < 2 or "github.com" not in url:
        return None
    return f"{parts[-2]}__{parts[-1]}"


def _folder_name(path: Any) -> str | None:
    if not isinstance(path, str) or not path.strip("/"):
        return None
    return path.rstrip("/").rsplit("/", 1)[-1].replace(" ", "-").replace("'", "")


def _history_steps(history: list[Any], settings: WindowSettings,
                   notes: list[str]) -> tuple[list[RecordedStep], str | None]:
    """The steps of a file that holds only ``history``: each reply SWE-agent ran (an ``action`` that is no
    demonstration's), its observation the message after it; and what the submit step printed, as a patch."""
    messages = [entry if isinstance(entry, dict) else {} for entry in history]
    steps: list[RecordedStep] = []
    printed = None
    windowed = _Windowed(settings)
    for index, message in enumerate(messages):
        if message.get("role") != "assistant" or message.get("is_demo") or not isinstance(message.get("action"), str):
            continue
        following = messages[index + 1] if index + 1 < len(messages) else {}
        observation = as_string(following.get("content")) if following.get("role") in ("user", "tool") else None
        thought = as_string(message.get("thought"))
        thought = (as_string(message.get("content")) or "") if thought is None else thought
        call = _swe_agent_call(message["action"], message, len(steps) + 1, notes, windowed, observation)
        if call is not None and call["name"] == SUBMIT and observation is not None:
            printed = _printed_patch(observation)
        steps.append(RecordedStep(thought, call, output=observation))
    if not steps:
        raise Refused("is a SWE-agent trajectory without steps: its history holds no reply with an action")
    return _drop_early_submits(steps, notes), printed


def _as_patch(submission: str | None, notes: list[str]) -> str | None:
    """The recorded submission as the patch SWE-agent wrote: without the newline its 0.x submit printed before it,
    and without a terminal's carriage returns when every line ends with one (a demonstration's record)."""
    if not submission:
        return submission
    patch = submission
    if patch.count("\r\n") == patch.count("\n"):
        patch = patch.replace("\r\n", "\n")
    patch = patch.lstrip("\n") if patch.lstrip("\n").startswith("diff --git ") else patch
    if patch != submission:
        notes.append("the recorded submission read without the terminal's carriage returns and leading newline")
    return patch


def _printed_patch(observation: str) -> str | None:
    """The patch a submit step printed: 0.x's ``<<SUBMISSION||...||SUBMISSION>>``, or the diff 1.x's shows; the
    terminal's carriage returns taken out."""
    text = observation.replace("\r\n", "\n")
    if "<<SUBMISSION||" in text:
        return text.split("<<SUBMISSION||", 1)[1].split("||SUBMISSION>>", 1)[0].lstrip("\n")
    start = text.find("diff --git ")
    if start == -1:
        return None
    return text[start:].split("\n(Open file: ", 1)[0]  # without the state SWE-agent shows after the output


class _Windowed:
    """The windowed tools' settings, and whether a step already wrote their script to the container."""

    def __init__(self, settings: WindowSettings):
        self.settings, self.installed = settings, False

    def command(self, action: str, observation: str | None, number: int) -> str:
        command = windowed_command(action, self.settings, observation, not self.installed, number)
        self.installed = True
        return command


def _swe_agent_steps(trajectory: list[Any], history: list[Any], exit_status: str | None, settings: WindowSettings,
                     notes: list[str]) -> list[RecordedStep]:
    """Each step of the trajectory, matched in order to the replies ``history`` kept (those SWE-agent ran); a
    step it holds no match for was rejected and asked again for, and stands for no call."""
    ran = [entry for entry in history if isinstance(entry, dict) and entry.get("role") == "assistant"
           and isinstance(entry.get("action"), str) and not entry.get("is_demo")]
    steps, matched = [], 0
    windowed = _Windowed(settings)
    for number, step in enumerate(trajectory, 1):
        step = as_dict(step)
        action = as_string(step.get("action")) or ""
        thought = as_string(step.get("thought"))
        thought = (as_string(step.get("response")) or "") if thought is None else thought
        if number == len(trajectory) and _is_harness_exit(step, exit_status):
            notes.append(f"step {number} is SWE-agent's own ending ({shorten(thought, 60)}), no reply: left out")
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
        observation = as_string(step.get("observation"))
        steps.append(RecordedStep(thought, _swe_agent_call(action, message, number, notes, windowed, observation),
                                  output=observation))
    return _drop_early_submits(steps, notes)


def _is_harness_exit(step: dict[str, Any], exit_status: str | None) -> bool:
    """The step SWE-agent adds when it stops the agent itself (cost limit, repeated format errors, ...): no
    action, the exit message as both its thought and its response."""
    thought = step.get("thought")
    return (not (as_string(step.get("action")) or "").strip() and isinstance(thought, str)
            and thought == step.get("response") and "exit" in (exit_status or ""))


def _swe_agent_call(action: str, message: dict[str, Any], number: int, notes: list[str], windowed: _Windowed,
                    observation: str | None) -> RecordedCall | None:
    words = action.split(None, 1)
    if not words:
        return None
    tool = words[0]
    if tool in WINDOWED_TOOLS:
        return bash_call(windowed.command(action.strip("\n") if tool != "edit" else action, observation, number))
    if tool == "submit":
        return submit_call()
    if tool == "str_replace_editor":
        arguments = _editor_tool_call_arguments(message) or _editor_command_arguments(action)
        if arguments is not None:
            return editor_call(arguments)
        notes.append(f"step {number}: its str_replace_editor call could not be read; replayed as the shell "
                     "command it is")
    return bash_call(action)


def _editor_tool_call_arguments(message: dict[str, Any]) -> dict[str, Any] | None:
    """The str_replace_editor call's JSON arguments, as the function-calling model sent them (no shell quoting)."""
    calls = as_list(message.get("tool_calls"))
    function = as_dict(as_dict(calls[0]).get("function")) if len(calls) == 1 else {}
    if function.get("name") != "str_replace_editor":
        return None
    arguments = as_dict(parse_json_text(function.get("arguments")))
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


