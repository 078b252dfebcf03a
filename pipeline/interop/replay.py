"""A recorded trajectory as the replies of swepipe's scripted model, and the replay set beside its record.

The replay runs swepipe's agent in the tool-call format: each recorded step is one call of bash, the editor or
submit (``RecordedStep.call``), its text the reply's content; a step whose source held no action is a reply with no
call, so swepipe counts a format error at the same step. Paths the source wrote under its own repository root
(``/testbed``) are mapped to the task's (``/app``) in bash commands and editor paths; file contents and thoughts are
sent as recorded.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from pipeline.interop.recorded import BASH, EDITOR, SUBMIT, RecordedCall, RecordedStep, RecordedTrajectory, root_pattern
from pipeline.rundir.storage import write_json_atomic
from pipeline.text import patchtext


class ScriptedReply(TypedDict):
    """A reply of the scripted model's script (pipeline.models.scripted): its text, and the call it makes."""

    content: str
    tool_calls: NotRequired[list[RecordedCall]]


def script_replies(recorded: RecordedTrajectory, workdir: str) -> tuple[list[ScriptedReply], list[str]]:
    """The scripted model's replies for ``recorded`` in the task's ``workdir``, and notes of what was changed on
    the way (paths mapped, a submit added after a trajectory that ended without one)."""
    notes: list[str] = []
    replies: list[ScriptedReply] = []
    mapped = 0
    for step in recorded.steps:
        call = step.call
        if call is not None and recorded.repo_root and recorded.repo_root != workdir:
            moved = map_call(call, recorded.repo_root, workdir)
            mapped += moved != call
            call = moved
        reply: ScriptedReply = {"content": step.thought}
        if call is not None:
            reply["tool_calls"] = [call]
        replies.append(reply)
    if mapped:
        notes.append(f"{recorded.repo_root} mapped to {workdir} in {mapped} step(s)")
    elif recorded.repo_root and root_pattern(recorded.repo_root) is None:
        notes.append(f"the source's repository root {recorded.repo_root!r} is no absolute folder below /: its paths "
                     "are replayed as written")
    last = recorded.steps[-1].call if recorded.steps else None
    if last is None or last["name"] != SUBMIT:
        replies.append({"content": "", "tool_calls": [{"name": SUBMIT, "arguments": {}}]})
        notes.append(f"the source ended without a submit ({recorded.exit_status or 'no exit status'}): the replay "
                     "submits the tree after the last recorded step")
    return replies, notes


def map_call(call: RecordedCall, root: str, workdir: str) -> RecordedCall:
    """``call`` with ``root`` (a directory, at a path boundary) read as ``workdir`` in a bash command or an editor
    path."""
    arguments = dict(call["arguments"])
    name = call["name"]
    if name == BASH and isinstance(arguments.get("command"), str):
        arguments["command"] = map_root(arguments["command"], root, workdir)
    elif name == EDITOR and isinstance(arguments.get("path"), str):
        arguments["path"] = map_root(arguments["path"], root, workdir)
    else:
        return call
    return {"name": name, "arguments": arguments}


def map_root(text: str, root: str, workdir: str) -> str:
    """``text`` with ``root`` read as ``workdir`` where it is the root component of a path (``root_pattern``):
    ``/testbed``, ``/testbed/x``, ``cd /testbed && ...``, ``"/testbed"``; ``/testbed-old`` and ``/home/u/testbed``
    are kept as they are, and so is everything for a root no path can be read under."""
    pattern = root_pattern(root)
    if pattern is None:
        return text
    target = workdir.rstrip("/") or "/"
    return pattern.sub(lambda _: target, text)


def max_steps(recorded: RecordedTrajectory) -> int:
    """The replies a replay sends: every recorded step, and a submit when the source ended without one."""
    return len(recorded.steps) + 1


@dataclasses.dataclass(frozen=True)
class PatchComparison:
    identical: bool | None  # None: no recorded patch to compare with
    only_replayed: list[str]
    only_recorded: list[str]
    differing: list[str]


def compare_patches(replayed: str, recorded: str | None) -> PatchComparison:
    """The replay's patch beside the recorded submission: identical, or the files only one changes and the files
    both change differently (with how many hunks differ)."""
    if recorded is None:
        return PatchComparison(None, [], [], [])
    mine, theirs = patchtext.file_sections(replayed), patchtext.file_sections(recorded)
    differing = []
    for key in sorted(mine.keys() & theirs.keys()):
        if mine[key] == theirs[key]:
            continue
        ours, others = patchtext.hunks(mine[key]), patchtext.hunks(theirs[key])
        changed = sum(a != b for a, b in zip(ours, others, strict=False)) + abs(len(ours) - len(others))
        differing.append(f"{shown_path(key)}: {changed} of {max(len(ours), len(others))} hunks differ"
                         if changed else f"{shown_path(key)}: the file's header differs (mode, index)")
    return PatchComparison(identical=replayed == recorded,
                           only_replayed=[shown_path(key) for key in sorted(mine.keys() - theirs.keys())],
                           only_recorded=[shown_path(key) for key in sorted(theirs.keys() - mine.keys())],
                           differing=differing)


def shown_path(key: str) -> str:
    """``a/x b/x`` as ``x``; any other header as git wrote it."""
    half = (len(key) - 1) // 2
    if len(key) % 2 == 1 and key[half] == " " and key.startswith("a/") and key[half + 1:].startswith("b/") \
            and key[2:half] == key[half + 3:]:
        return key[2:half]
    return key


def patch_files(patch: str) -> list[str]:
    return [shown_path(key) for key in patchtext.file_sections(patch)]


def exit_code_differences(recorded: list[RecordedStep], replayed: list[dict[str, Any]]) -> list[str]:
    """Steps whose command's exit status the source recorded and the replay got otherwise."""
    differ = []
    for number, (was, now) in enumerate(zip(recorded, replayed, strict=False), start=1):
        code = now.get("exit_code")
        if was.exit_code is not None and code is not None and was.exit_code != code:
            differ.append(f"step {number}: recorded {was.exit_code}, replayed {code}")
    return differ


def not_submitted(patch: str, submitted: list[str] | None, root: str | None) -> list[str]:
    """Files of the replay's patch the source's agent did not list to submit (when it listed any; a listed path
    may be absolute under the source's repository root)."""
    if submitted is None:
        return []
    prefix = (root or "").rstrip("/") + "/"
    listed = {path.removeprefix(prefix).removeprefix("./") for path in submitted}
    return [path for path in patch_files(patch) if path not in listed]


def write_recorded(path: Path, recorded: RecordedTrajectory) -> None:
    write_json_atomic(path, {**dataclasses.asdict(recorded), "source": str(recorded.source)})


def read_recorded(path: Path) -> RecordedTrajectory:
    """What write_recorded wrote (this run's own file)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    steps = [RecordedStep(**step) for step in data.pop("steps")]
    return RecordedTrajectory(**{**data, "source": Path(data["source"]), "steps": steps})
