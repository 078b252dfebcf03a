"""SWE-agent's trajectories.

``swe-agent``: SWE-agent's ``<instance_id>.traj`` (SWE-agent/SWE-agent, sweagent/agent/agents.py
    ``get_trajectory_data``, ``add_step_to_trajectory``, ``forward_with_handling``; sweagent/tools/parsing.py;
    tools/edit_anthropic/config.yaml and bin/str_replace_editor). ``trajectory`` holds every reply, those SWE-agent
    rejected and asked again for (a format error, a blocked command, bad syntax) too; ``history`` holds only the
    replies it ran, so a step missing from it stands for no call. Actions are command lines: ``str_replace_editor``
    calls become the editor's (read as its argparse reads them, words split as the shell does; the function-calling
    parser's JSON arguments in ``history``'s ``tool_calls`` win when present), ``submit`` submits, the windowed tools
    (``open``, ``goto``, ``edit`` ...) have no counterpart (NotReplayable), anything else is a bash command. SWE-agent
    records no exit codes.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from pipeline.interop.recorded import SUBMIT, RecordedStep, RecordedTrajectory
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

SWE_AGENT = "swe-agent"

# SWE-agent's windowed tools (tools/windowed, windowed_edit_*, search): a file window swepipe has no counterpart for.
WINDOWED_TOOLS = frozenset({"open", "goto", "scroll_up", "scroll_down", "create", "edit", "insert", "search_file",
                            "search_dir", "find_file"})
EDITOR_ARGUMENTS = ("command", "path", "file_text", "old_str", "new_str", "insert_line", "view_range")
_EDITOR_FLAGS = {"--file_text": "file_text", "--old_str": "old_str", "--new_str": "new_str",
                 "--insert_line": "insert_line", "--view_range": "view_range"}


def read_swe_agent(path: Path, data: dict[str, Any]) -> RecordedTrajectory:
    notes: list[str] = []
    attempt = _chosen_attempt(data, notes)
    info = as_dict(attempt.get("info")) or as_dict(data.get("info"))
    summary = summary_of(info, notes)
    config = as_dict(parse_json_text(attempt.get("replay_config") or data.get("replay_config")))
    steps = _swe_agent_steps(as_list(attempt.get("trajectory")), as_list(attempt.get("history")),
                             summary["exit_status"], notes)
    recorded_id = as_dict(config.get("problem_statement")).get("id"), info.get("instance_id")
    return RecordedTrajectory(
        source=path, format=SWE_AGENT, steps=steps, notes=notes, **summary,
        instance_id=instance_id(path, *recorded_id),
        model=as_string(as_dict(as_dict(config.get("agent")).get("model")).get("name")) or None,
        repo_root=_swe_agent_repo_root(config, as_list(attempt.get("trajectory"))),
        task_text=opening_text(as_list(attempt.get("history")), lambda message: message.get("role") == "assistant"))


def _chosen_attempt(data: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The run itself, or (a retrying agent's file without its own trajectory) its last attempt."""
    if isinstance(data.get("trajectory"), list):
        return data
    attempts = [attempt for attempt in as_list(data.get("attempts"))
                if isinstance(as_dict(attempt).get("trajectory"), list)]
    if not attempts:
        raise Refused("is a SWE-agent trajectory without steps: neither trajectory nor attempts hold any")
    if len(attempts) > 1:
        notes.append(f"{len(attempts)} attempts: the last is read")
    return dict(attempts[-1])


def _swe_agent_repo_root(config: dict[str, Any], trajectory: list[Any]) -> str | None:
    """SWE-agent's repository is at /<repo_name> (sweagent/environment); else the first step's working folder."""
    name = as_dict(as_dict(config.get("env")).get("repo")).get("repo_name")
    if isinstance(name, str) and name.strip("/") and "/" not in name.strip("/"):
        return "/" + name.strip("/")
    for step in trajectory:
        state = as_dict(parse_json_text(as_dict(step).get("state")))
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
        observation = step.get("observation")
        steps.append(RecordedStep(thought, _swe_agent_call(action, message, number, notes),
                                  output=observation if isinstance(observation, str) else None))
    return _drop_early_submits(steps, notes)


def _is_harness_exit(step: dict[str, Any], exit_status: str | None) -> bool:
    """The step SWE-agent adds when it stops the agent itself (cost limit, repeated format errors, ...): no
    action, the exit message as both its thought and its response."""
    thought = step.get("thought")
    return (not (as_string(step.get("action")) or "").strip() and isinstance(thought, str)
            and thought == step.get("response") and "exit" in (exit_status or ""))


def _swe_agent_call(action: str, message: dict[str, Any], number: int, notes: list[str]) -> dict[str, Any] | None:
    words = action.split(None, 1)
    if not words:
        return None
    tool = words[0]
    if tool in WINDOWED_TOOLS:
        raise Refused(f"step {number} uses SWE-agent's windowed tool `{tool}`, which swepipe has no counterpart "
                      "for")
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


