"""ATIF trajectories (the Agent Trajectory Interchange Format, Harbor's RFC 0001, v1.x).

``atif``: a JSON object with ``"schema_version": "ATIF-v1.N"``, ``agent`` and ``steps``, checked against the ``atif``
    package's models (v1.8, which read every earlier 1.x file) before anything is read from it: Harbor's
    ``<trial>/agent/trajectory.json`` (its installed agents: mini-swe-agent, Terminus, OpenHands, ...), OpenHands'
    benchmark output, swepipe's own ``export --format atif``, or a converter's. Its ``source: "agent"`` steps are the
    replies: each tool call becomes a swepipe call by its function's name (``BASH_TOOLS`` with a ``command``, or
    Terminus' ``keystrokes`` ending in Enter; ``EDITOR_TOOLS`` with the editor's arguments, as OpenHands'
    ``str_replace_editor`` and ``file_editor`` take them; ``SUBMIT_TOOLS``), a step's calls replayed as one step
    each, its message with the first. A reply with no tool call stands for no call (swepipe's own export writes its
    format errors so). ``NO_EFFECT_TOOLS`` (OpenHands' ``think``, its task tracker) change nothing and are left out,
    with a note; any other tool refuses the file, naming the tool and the step. The ``system`` and ``user`` steps
    before the first reply are the task as the agent was given it.

    Where the end is kept: the submission is the root ``extra``'s ``submission``, ``git_patch``, ``model_patch`` or
    ``patch`` (OpenHands' ``test_result.git_patch`` too; swepipe's under ``extra.swepipe``), else what the
    mini-swe-agent submit command printed (Harbor's mini-swe-agent: ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``
    then the diff); the cost is ``final_metrics.total_cost_usd``, else the sum of the steps' ``metrics.cost_usd``
    (each checked by ``recorded_cost``). The task: the id the file records (``extra.instance_id``, ``task_id``,
    swepipe's), else, for Harbor's ``<trial>/agent/trajectory.json``, the trial's ``result.json`` ``task_name``
    (whose verifier reward of 1 is read as resolved), else the common rule.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import atif
from pydantic import ValidationError

from pipeline.interop.recorded import (
    BASH,
    EDITOR,
    SUBMIT,
    RecordedCall,
    RecordedStep,
    RecordedTrajectory,
    recorded_cost,
)
from pipeline.interop.trajectory_formats.common import (
    Refused,
    as_dict,
    as_list,
    as_string,
    bash_call,
    content_text,
    editor_call,
    instance_id,
    load_json,
    shorten,
    shown,
    submit_call,
)
from pipeline.interop.trajectory_formats.mini import SUBMIT_MARKERS
from pipeline.interop.trajectory_formats.swepipe import swepipe_calls

ATIF = "atif"

BASH_TOOLS = frozenset({BASH, "bash_command", "execute_bash", "terminal", "shell", "run_shell_command",
                        "execute_command"})
EDITOR_TOOLS = frozenset({EDITOR, "file_editor"})
SUBMIT_TOOLS = frozenset({SUBMIT, "finish", "mark_task_complete", "task_complete"})
NO_EFFECT_TOOLS = frozenset({"think", "task_tracker"})
EDITOR_COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")
EDITOR_ARGUMENTS = ("command", "path", "file_text", "old_str", "new_str", "insert_line", "view_range")
SWEPIPE_ACTIONS = (BASH, EDITOR, SUBMIT, "edit", "view")  # a swepipe agent's own actions a replay can run
HARBOR_TRIAL_RESULT = "result.json"  # Harbor's <trial>/result.json: the task's name, the verifier's reward
SUBMISSION_KEYS = ("submission", "git_patch", "model_patch", "patch")


def is_atif(data: dict[str, Any]) -> bool:
    version = data.get("schema_version")
    return isinstance(version, str) and version.startswith("ATIF-")


def read_atif(path: Path, data: dict[str, Any]) -> RecordedTrajectory:
    _check(data)
    notes: list[str] = []
    extra = as_dict(data.get("extra"))
    own = as_dict(extra.get("swepipe"))
    agent = as_dict(data.get("agent"))
    written_by_swepipe = agent.get("name") == "swepipe" and bool(own)
    if written_by_swepipe and own.get("role") == "principal":
        raise Refused("is swepipe's principal: one model call that writes edits, no agent steps to replay")
    if data.get("subagent_trajectories"):
        notes.append(f"{len(data['subagent_trajectories'])} embedded subagent trajectory(ies) not replayed: only "
                     "the root agent's own steps are")
    steps: list[RecordedStep] = []
    replies = [step for step in data["steps"] if step.get("source") == "agent"]
    for step in replies:
        if step.get("is_copied_context"):
            notes.append(f"step {step['step_id']} was copied from an earlier trajectory: left out")
            continue
        steps.extend(_steps_of(step, written_by_swepipe, notes))
    harbor = _harbor_trial(path)
    submission = _submission(extra, own) if (own.get("submission_is_patch", True)) else None
    submission = submission if submission is not None else _printed_submission(steps)
    recorded_id = (own.get("instance_id"), extra.get("instance_id"), extra.get("task_id"), harbor.get("task_name"))
    return RecordedTrajectory(
        source=path, format=ATIF, instance_id=instance_id(path, *recorded_id), steps=steps,
        submission=submission, exit_status=as_string(own.get("exit_status")) or as_string(extra.get("exit_status")),
        resolved=_harbor_resolved(harbor), model=as_string(agent.get("model_name")) or None,
        cost=_cost(data, notes), repo_root=as_string(extra.get("repo_root")) or None, notes=notes,
        task_text=_task_text(data["steps"]))


def _check(data: dict[str, Any]) -> None:
    """The file as the specification's models read it; Refused naming the first thing they refuse, with its step."""
    try:
        atif.Trajectory.model_validate(data)
    except ValidationError as error:
        problems = error.errors()
        first = problems[0] if problems else {"loc": (), "msg": str(error)}
        where = _where(data, tuple(first.get("loc") or ()))
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise Refused(f"is an ATIF trajectory ({shown(data.get('schema_version'))}) the specification's models "
                      f"refuse: {where}{shorten(str(first.get('msg')))}{more}") from None
    except RecursionError:
        raise Refused("is an ATIF trajectory nested too deeply to read") from None


def _where(data: dict[str, Any], location: tuple[Any, ...]) -> str:
    """``steps[3].tool_calls[0]: `` as ``step 4 (steps[3]), tool_calls[0]: ``; the path as is elsewhere."""
    if not location:
        return ""
    parts = [f"[{part}]" if isinstance(part, int) else f".{part}" for part in location]
    text = "".join(parts).lstrip(".")
    if len(location) >= 2 and location[0] == "steps" and isinstance(location[1], int):
        step = as_dict(as_list(data.get("steps"))[location[1]] if location[1] < len(as_list(data.get("steps")))
                       else None)
        step_id = step.get("step_id")
        named = f"step {shown(step_id)}" if isinstance(step_id, int) else f"the {location[1] + 1}th step"
        rest = "".join(parts[2:]).lstrip(".")
        return f"{named} (steps[{location[1]}]){', ' + rest if rest else ''}: "
    return f"{text}: "


def _steps_of(step: dict[str, Any], written_by_swepipe: bool, notes: list[str]) -> list[RecordedStep]:
    """The swepipe steps one reply stands for: one a call, the reply's text with the first."""
    number = step["step_id"]
    thought = content_text(step.get("message")) or ""
    calls = step.get("tool_calls") or []
    if not calls:
        return [RecordedStep(thought, None)]
    outputs = _outputs(step)
    made: list[RecordedStep] = []
    for call in calls:
        name, arguments = call["function_name"], call["arguments"]
        if name in NO_EFFECT_TOOLS:
            notes.append(f"step {number}: its {shown(name)} call changes nothing in the workspace; left out")
            continue
        if written_by_swepipe and as_dict(call.get("extra")).get("format") == "text" and name in SWEPIPE_ACTIONS:
            mapped = swepipe_calls(name, arguments.get("command"), number, notes)
        else:
            mapped = [_call(name, arguments, number)]
        output = outputs.get(call["tool_call_id"], outputs.get(None))
        for made_call in mapped:
            text = thought if not made else ""
            made.append(RecordedStep(text, made_call, output[1] if output and made_call["name"] == BASH else None,
                                     output[0] if output else None))
    if len(made) > 1:
        notes.append(f"step {number} made {len(made)} calls: replayed as one step each, the reply's text with the "
                     "first")
    if not made and all(call["function_name"] in NO_EFFECT_TOOLS for call in calls):
        return []  # the reply only thought aloud: nothing to replay, and no format error either
    return made or [RecordedStep(thought, None)]


def _outputs(step: dict[str, Any]) -> dict[str | None, tuple[str | None, int | None]]:
    """Each call's observation (its text and recorded exit code) by the call's id; None: a result of no call."""
    found: dict[str | None, tuple[str | None, int | None]] = {}
    for result in as_list(as_dict(step.get("observation")).get("results")):
        result = as_dict(result)
        extra = as_dict(result.get("extra"))
        code = extra.get("exit_code", extra.get("returncode"))
        exit_code = code if isinstance(code, int) and not isinstance(code, bool) and abs(code) < 2 ** 63 else None
        found.setdefault(as_string(result.get("source_call_id")), (content_text(result.get("content")), exit_code))
    return found


def _call(name: str, arguments: dict[str, Any], number: int) -> RecordedCall:
    if name in SUBMIT_TOOLS:
        return submit_call()
    if name in BASH_TOOLS:
        command = arguments.get("command", arguments.get("cmd"))
        if isinstance(command, str) and command.strip():
            if _submits(command):
                return submit_call()
            return bash_call(command)
        keystrokes = arguments.get("keystrokes")
        if isinstance(keystrokes, str) and keystrokes.endswith("\n") and keystrokes.strip():
            return bash_call(keystrokes[:-1])
        raise Refused(f"step {number}: its {shown(name)} call has no command to run (a command, or keystrokes "
                      "ending in Enter)")
    if name in EDITOR_TOOLS:
        command = arguments.get("command")
        if command not in EDITOR_COMMANDS or not isinstance(arguments.get("path"), str):
            raise Refused(f"step {number}: its {shown(name)} call's command {shown(command)} is not one of the "
                          f"editor's ({', '.join(EDITOR_COMMANDS)}) on a path")
        return editor_call({key: arguments[key] for key in EDITOR_ARGUMENTS if arguments.get(key) is not None})
    raise Refused(f"step {number} calls the tool {shown(name)}, which no swepipe tool stands for (bash: "
                  f"{', '.join(sorted(BASH_TOOLS))}; a file editor: {', '.join(sorted(EDITOR_TOOLS))}; submit: "
                  f"{', '.join(sorted(SUBMIT_TOOLS))})")


def _submits(command: str) -> bool:
    """mini-swe-agent's submission, as Harbor's mini-swe-agent records it: a command that echoes its marker first."""
    return any(command.lstrip().startswith(f"echo {marker}") for marker in SUBMIT_MARKERS)


def _printed_submission(steps: list[RecordedStep]) -> str | None:
    """What mini-swe-agent's submit command printed after its marker (the diff it handed in)."""
    for step in reversed(steps):
        if step.call is not None and step.call["name"] == SUBMIT and step.output:
            for marker in SUBMIT_MARKERS:
                if marker in step.output:
                    after = step.output.split(marker, 1)[1]  # the rest of the marker's line, then the diff
                    return after.split("\n", 1)[1] if "\n" in after else ""
    return None


def _submission(extra: dict[str, Any], own: dict[str, Any]) -> str | None:
    for holder in (own, extra, as_dict(extra.get("test_result"))):
        for key in SUBMISSION_KEYS:
            if isinstance(holder.get(key), str):
                return str(holder[key])
    return None


def _cost(data: dict[str, Any], notes: list[str]) -> float | None:
    total = as_dict(data.get("final_metrics")).get("total_cost_usd")
    if total is not None:
        return recorded_cost(total, notes, "final_metrics.total_cost_usd")
    costs = [as_dict(step.get("metrics")).get("cost_usd") for step in data["steps"]]
    amounts = [recorded_cost(cost, notes, f"step {step['step_id']}'s cost_usd")
               for cost, step in zip(costs, data["steps"], strict=True) if cost is not None]
    found = [amount for amount in amounts if amount is not None]
    if not found:
        return None
    total_found = math.fsum(found)
    return total_found if math.isfinite(total_found) else recorded_cost(total_found, notes, "the steps' costs")


def _task_text(steps: list[dict[str, Any]]) -> str | None:
    parts = []
    for step in steps:
        if step.get("source") == "agent":
            break
        text = content_text(step.get("message"))
        if text:
            parts.append(text)
    return "\n\n".join(parts) or None


def _harbor_trial(path: Path) -> dict[str, Any]:
    """Harbor's trial result beside ``<trial>/agent/trajectory.json``: ``<trial>/result.json``; {} when none."""
    if path.parent.name != "agent":
        return {}
    try:
        return as_dict(load_json(path.parent.parent / HARBOR_TRIAL_RESULT))
    except Refused:
        return {}


def _harbor_resolved(result: dict[str, Any]) -> bool | None:
    reward = as_dict(as_dict(result.get("verifier_result")).get("rewards")).get("reward")
    if isinstance(reward, (int, float)) and not isinstance(reward, bool) and math.isfinite(reward):
        return reward >= 1
    return None
