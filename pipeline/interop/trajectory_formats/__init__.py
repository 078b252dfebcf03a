"""Other harnesses' agent trajectories, read for ``swepipe replay``: each file becomes a RecordedTrajectory
(pipeline.interop.recorded), every reply the one swepipe tool call it stands for.

Formats, told apart by their content (a reader a module; each module's docstring gives the shapes as their sources
write them, with the references to the harnesses' repositories):

``mini-swe-agent-1``, ``mini-swe-agent-2`` (``mini``): mini-swe-agent 1.x's and 2.x's ``<instance_id>.traj.json``,
    tagged ``"trajectory_format": "mini-swe-agent-1"`` and ``"mini-swe-agent-1.1"`` (2.x's messages are 2.x's under
    either tag).
``swe-agent`` (``swe_agent``): SWE-agent's ``<instance_id>.traj``, or its demonstrations that hold only ``history``.
``swepipe`` (``swepipe``): ``swepipe export --format trajectories`` (pipeline.interop.export), mini-swe-agent 1.x's
    shape with ``info.swepipe``.
``atif`` (``atif_format``): ATIF v1.x, ``"schema_version": "ATIF-v1.N"`` (Harbor's trials, OpenHands' output,
    ``swepipe export --format atif``).

What they share (the file's JSON, the values a file may hold, the tool calls a step becomes) is ``common``'s.

Which task a file is of: the id it records, else the task its name gives, else its folder's (``common.instance_id``,
one rule for every format); a file named for one task that records another is refused, naming both.

Paths are kept as written; ``repo_root`` says where the source had the repository (mini's environment ``cwd``,
SWE-agent's repository ``/<repo_name>``), for the replay to map. A reply's text beside its action is kept byte for
byte (a text-format reply's action block cut out of it). A file of any other shape, or none that can be read,
raises NotReplayable naming the file and why; so does a step no swepipe tool can stand for.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.interop.recorded import NotReplayable, RecordedCall, RecordedTrajectory, names_root
from pipeline.interop.trajectory_formats.atif_format import ATIF, is_atif, read_atif
from pipeline.interop.trajectory_formats.common import (
    TRAJECTORY_SUFFIXES,
    Refused,
    as_dict,
    as_string,
    kind,
    load_json,
    shown,
)
from pipeline.interop.trajectory_formats.mini import MINI_1, MINI_2, has_mini_2_messages, read_mini_1, read_mini_2
from pipeline.interop.trajectory_formats.swe_agent import SWE_AGENT, read_swe_agent
from pipeline.interop.trajectory_formats.swepipe import SWEPIPE, read_swepipe


def read_trajectory_file(path: Path) -> RecordedTrajectory:
    """The trajectory in ``path``, its format told from its content; NotReplayable (naming the file and why) for a
    file that is no trajectory of a known format, or holds a step swepipe's tools cannot stand for."""
    try:
        return _with_repo_root(_read(path, load_json(path)))
    except Refused as refused:
        raise NotReplayable(f"{path}: {refused}") from None


SWE_BENCH_ROOT = "/testbed"  # where SWE-bench's images, and the harnesses run on them, hold the repository


def _with_repo_root(recorded: RecordedTrajectory) -> RecordedTrajectory:
    """A trajectory whose source did not record its repository root, read as SWE-bench's when its calls name it."""
    if recorded.repo_root is None and any(names_root(text, SWE_BENCH_ROOT) for step in recorded.steps
                                          for text in _call_paths(step.call)):
        recorded.repo_root = SWE_BENCH_ROOT
        recorded.notes.append(f"the source recorded no repository root; taken as {SWE_BENCH_ROOT}, which its "
                              "calls name")
    return recorded


def _call_paths(call: RecordedCall | None) -> list[str]:
    """The texts of a step's call that name paths: a bash command, an editor's path."""
    arguments = call["arguments"] if call is not None else {}
    return [text for text in (arguments.get("command"), arguments.get("path")) if isinstance(text, str)]


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
        data = load_json(path)
    except Refused:
        return False
    return isinstance(data, dict) and _format_of(data) is not None


def _format_of(data: dict[str, Any]) -> str | None:
    """The format ``data`` is written in, from its keys; None for none this package reads."""
    if is_atif(data):
        return ATIF
    if isinstance(data.get("trajectory"), list) or isinstance(data.get("attempts"), list) or \
            (isinstance(data.get("history"), list) and not isinstance(data.get("messages"), list)):
        return SWE_AGENT
    if not isinstance(data.get("messages"), list):
        return None
    info = as_dict(data.get("info"))
    agent_type = as_string(as_dict(info.get("config")).get("agent_type")) or ""
    if isinstance(info.get("swepipe"), dict) or agent_type.startswith("swepipe."):
        return SWEPIPE
    tag = data.get("trajectory_format")
    if tag is None or (isinstance(tag, str) and tag.startswith("mini-swe-agent")):
        return MINI_2 if tag == "mini-swe-agent-1.1" or has_mini_2_messages(data["messages"]) else MINI_1
    return None


def _read(path: Path, data: Any) -> RecordedTrajectory:
    if not isinstance(data, dict):
        raise Refused(f"is no trajectory: its JSON is {kind(data)}, not an object")
    fmt = _format_of(data)
    if fmt is None:
        tag = data.get("trajectory_format")
        if isinstance(tag, str) and tag.startswith("mini-swe-agent"):
            raise Refused(f"is a {shown(tag)} trajectory without its list of messages")
        if tag is not None:
            raise Refused(f"has trajectory_format {shown(tag)}, which no reader here knows (mini-swe-agent-1, "
                          "mini-swe-agent-1.1)")
        raise Refused("is no trajectory of a known format: neither mini-swe-agent's (messages, info) nor "
                      "SWE-agent's (trajectory, history, info)")
    readers: dict[str, Callable[[Path, dict[str, Any]], RecordedTrajectory]] = {
        MINI_1: read_mini_1, MINI_2: read_mini_2, SWE_AGENT: read_swe_agent, SWEPIPE: read_swepipe, ATIF: read_atif}
    return readers[fmt](path, data)

