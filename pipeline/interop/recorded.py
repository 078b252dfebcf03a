"""Another harness's trajectory, as read for a replay: the model's replies in order, each as the one swepipe action
it stands for, with what the source recorded about it (exit code), and the source's own verdicts.

Readers of each format (``pipeline.interop.trajectory_formats``) make these; ``swepipe replay`` feeds the
actions back to swepipe's agent, in the tool-call format, as the model's replies (nothing is called, nothing paid).
"""

from __future__ import annotations

import math
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from pipeline.audit import AgentAction, FindingData, Subject, audit, finding_dicts

# The action format a replay runs in: every recorded step becomes one call of swepipe's tools.
BASH, EDITOR, SUBMIT = "bash", "str_replace_editor", "submit"  # as pipeline.agent.actions names them


class RecordedCall(TypedDict):
    """A swepipe tool call a recorded reply stands for (``RecordedStep.call``)."""

    name: str  # bash, str_replace_editor or submit
    arguments: dict[str, Any]  # as the source recorded them: JSON, read loosely by the tools they are given to


@dataclass(frozen=True)
class RecordedStep:
    """One reply of the recorded model.

    ``call`` is the swepipe tool call it stands for, ``{"name": "bash" | "str_replace_editor" | "submit",
    "arguments": {...}}`` with the arguments swepipe's tools take (bash: ``command``; the editor: ``command``,
    ``path``, ``file_text``, ``old_str``, ``new_str``, ``insert_line``, ``view_range``; submit: none), or None when
    the reply held no action the source ran (its own format error): replayed as a reply without a call, so
    swepipe counts a format error at the same step. ``thought`` is the reply's text beside the action, as recorded.
    ``exit_code`` is the exit status the source recorded for the step's command, when it did; ``output`` what the
    source recorded it printed (its observation), when it did."""

    thought: str
    call: RecordedCall | None
    exit_code: int | None = None
    output: str | None = None


@dataclass
class RecordedTrajectory:
    """A trajectory read from ``source``: its steps, and what the source says of its end."""

    source: Path
    format: str  # "mini-swe-agent-1", "mini-swe-agent-2", "swe-agent", "swepipe"
    instance_id: str
    steps: list[RecordedStep]
    submission: str | None = None  # the recorded final patch, when the source holds one
    submitted_files: list[str] | None = None  # the files the agent listed to submit (mini-swe-agent 2.x), if any
    exit_status: str | None = None  # the source's own reason the agent ended ("Submitted", "LimitsExceeded", ...)
    resolved: bool | None = None  # the source's verdict, when it holds one
    model: str | None = None
    cost: float | None = None  # dollars the source recorded for this trajectory
    repo_root: str | None = None  # where the source had the repository ("/testbed"); mapped to the task's on replay
    task_text: str | None = None  # the task as the source's agent was given it (the messages before its first reply)
    notes: list[str] = field(default_factory=list)  # what the reader had to leave out or read loosely


def recorded_cost(value: Any, notes: list[str], whose: str = "") -> float | None:
    """Dollars a source recorded (a trajectory's cost, a swepipe run's prediction's total), as an amount: a finite
    number, 0 or more; None when it recorded none. Anything else (NaN, an infinity, a number too large for a
    float, a negative number, a boolean, text) is left out, and ``notes`` says so, naming ``whose`` it was. Every
    reader of another tool's costs takes them through here, so no record holds an amount that is none."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            cost = float(value)
        except OverflowError:
            cost = math.inf
        if math.isfinite(cost) and cost >= 0:
            return cost
    notes.append(f"{whose + ': ' if whose else ''}the recorded cost {_shown_amount(value)} is no amount of dollars; "
                 "left out")
    return None


def _shown_amount(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return "(a number too large for a float)"  # its digits may be more than Python shows
    if isinstance(value, (str, int, float, bool)):
        text = repr(value)
        return text if len(text) <= 80 else text[:80] + "..."
    return "(a list)" if isinstance(value, list) else "(an object)" if isinstance(value, dict) else \
        f"({type(value).__name__})"


# A source's repository root is read as a path's root component only: at the start of a word (the text's start,
# whitespace, or what the shell and tools put before a path: quotes, =, :, ;, &, |, parentheses, <, >, a backquote,
# a brace or comma of a brace expansion), and followed by the end of that path or a deeper part (/). So /testbed,
# /testbed/x, "cd /testbed && ...", "/testbed" and PATH=/x:/testbed are the root; /testbed-old, /testbed.bak,
# /home/u/testbed and ${R}/testbed are other paths.
_PATH_START = r"(?<![^\s'\"=:;&|()<>`{,])"
_PATH_END = r"(?=$|[/\s'\":;&|()<>`},])"


def root_pattern(root: str | None) -> re.Pattern[str] | None:
    """What finds ``root`` (an absolute folder, "/testbed") as the root component of paths in a text; None for a
    root no path can be read under: none, a relative one, "/" itself."""
    if not root or not root.startswith("/"):
        return None
    folder = posixpath.normpath(root)
    if folder in ("/", "//"):
        return None
    return re.compile(_PATH_START + re.escape(folder) + _PATH_END)


def names_root(text: str, root: str | None) -> bool:
    """Whether ``text`` holds a path under ``root`` (the folder itself or below it)."""
    pattern = root_pattern(root)
    return pattern is not None and pattern.search(text) is not None


class NotReplayable(ValueError):
    """A trajectory that cannot be replayed, and why (a tool swepipe has no counterpart for, a file that is no
    trajectory of a known format); the message names the file."""


def recorded_actions(recorded: RecordedTrajectory) -> list[AgentAction]:
    """The actions of a recorded trajectory, for the retrieval audit (pipeline.audit): each bash step's command
    and output, each editor step's path; steps numbered from 1, as replay's notes number them."""
    actions = []
    for number, step in enumerate(recorded.steps, start=1):
        if step.call is None:
            continue
        name, arguments = step.call["name"], step.call["arguments"]
        if name == BASH and isinstance(arguments.get("command"), str):
            actions.append(AgentAction(number, arguments["command"], output=step.output))
        elif name == EDITOR and isinstance(arguments.get("path"), str):
            path = arguments["path"]
            actions.append(AgentAction(number, f"{arguments.get('command')} {path}", path=path))
    return actions


def recorded_subject(recorded: RecordedTrajectory, repo: str | None = None, base_commit: str | None = None,
                     task_text: str = "") -> Subject:
    """What the audit knows of the task a recorded trajectory worked on: the dataset's task when it is read
    (``repo``, ``base_commit``, its ``task_text``), and what the trajectory itself holds (its instance id, the task
    as its agent was given it, where its repository was)."""
    return Subject(instance_id=recorded.instance_id, repo=repo, base_commit=base_commit,
                   task_text="\n\n".join(text for text in (task_text, recorded.task_text or "") if text),
                   repo_root=recorded.repo_root)


def audit_recorded(recorded: RecordedTrajectory, repo: str | None = None, base_commit: str | None = None,
                   task_text: str = "") -> list[FindingData]:
    """The retrieval audit's findings on a recorded trajectory (its source's harness was not sealed), as a record's
    ``retrieval`` holds them; the task as ``recorded_subject`` knows it."""
    return finding_dicts(audit(recorded_actions(recorded), recorded_subject(recorded, repo, base_commit, task_text)))
