"""What keeps an imported candidate (``run --juniors-from``) out of the pool: a patch that touches a repository's own
``.git/``, a binary diff, or one that does not apply to the task's base commit. Such a rollout stays on record, its
patch emptied, with why in ``patch_error`` and which of the three in ``patch_dropped``; the pool counts it among the
rollouts whose patch could not be had (``failed``), and the command names it per task.

A patch is read as text first, when it is taken in (``unusable_patch``); whether it applies needs the task's
repository, so the junior stage asks ``git apply --check`` in a read-only workspace of the task, without the network
(``checked_against_base``), before it builds the pool.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from pathlib import Path

from pipeline.job import TaskJob
from pipeline.records import Rollout
from pipeline.runtime.base import apply_check
from pipeline.text import patchtext

GIT_DIR, BINARY, DOES_NOT_APPLY = "git_dir", "binary", "does_not_apply"  # patch_dropped, for each reason
CHECKER = "imported-check"  # the role of the workspace that checks imported patches against the base

_PATH_LINE = re.compile(r"(?:--- |\+\+\+ |rename from |rename to |copy from |copy to )(.*)")
_BINARY_LINE = re.compile(r"GIT binary patch$|Binary files .* differ$")


def unusable_patch(patch: str) -> tuple[str, str] | None:
    """Why ``patch`` cannot join the pool as it reads (``GIT_DIR`` or ``BINARY``, and the words for it, naming the
    file); None when nothing in its files' headers keeps it out."""
    for section in patchtext.sections(patch):
        header = re.split(r"(?m)^@@", section, maxsplit=1)[0].split("\n")
        for path in _header_paths(header):
            if any(part.lower() == ".git" for part in path.split("/")):
                return GIT_DIR, f"touches a repository's own .git/ ({_shown(path)}), which no fix edits"
        if any(_BINARY_LINE.match(line) for line in header):
            return BINARY, f"holds a binary diff ({_shown(header[0].removeprefix('diff --git '))}), which cannot " \
                           "be read or checked as text"
    return None


def _header_paths(header: list[str]) -> list[str]:
    """The paths a file's header names: its ---, +++, rename and copy lines (git quotes a path with odd characters,
    C-style); a header without them (a binary diff, a mode change) by the words of its ``diff --git`` line."""
    paths = [_unquoted(match.group(1)) for match in map(_PATH_LINE.match, header) if match]
    if not paths and header and header[0].startswith("diff --git "):
        paths = header[0].removeprefix("diff --git ").split(" ")
    return paths


_ESCAPE = re.compile(r'\\([0-7]{3}|[abtnvfr"\\])')
_ESCAPED = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def _unquoted(text: str) -> str:
    """A header's path as git wrote it: C-quoted when it holds odd characters (``"a/caf\\303\\251.py"``), the
    bytes its octal escapes stand for; else as it is, less a timestamp after a tab."""
    if len(text) >= 2 and text.startswith('"') and text.endswith('"'):
        raw = patchtext.to_bytes(text[1:-1])
        unescaped = re.sub(_ESCAPE.pattern.encode(), lambda m: bytes([_ESCAPED.get(m.group(1).decode(), 0)
                                                                     if len(m.group(1)) == 1
                                                                     else int(m.group(1), 8) & 0xFF]), raw)
        return patchtext.from_bytes(unescaped)
    return text.split("\t", 1)[0]


def _shown(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def left_out(rollout: Rollout, kind: str, why: str) -> Rollout:
    """``rollout`` kept out of the pool: its patch emptied, why in ``patch_error``, which check in
    ``patch_dropped``."""
    return Rollout.of({**rollout.to_dict(), "patch": "", "patch_error": f"imported patch {why}",
                       "patch_dropped": kind})


def checked_against_base(job: TaskJob, rollouts: list[Rollout], paths: dict[int, Path]) -> list[Rollout]:
    """``rollouts`` (the task's imported ones) with each patch not yet checked that does not apply to the base
    commit left out (``left_out``) and its record (``paths``: by index) rewritten, so a resumed run does not ask
    again; the others as they are. One read-only workspace of the task answers for all of them."""
    todo = [rollout for rollout in rollouts if (rollout.patch or "").strip() and not rollout.patch_error]
    if not todo:
        return rollouts
    problems: dict[int, str] = {}
    with job.open_runtime(CHECKER, read_only=True) as runtime:
        for rollout in todo:
            problem = apply_check(runtime, rollout.patch or "", f"/tmp/swepipe-imported-{uuid.uuid4().hex}.diff")
            if problem is not None:
                problems[rollout.index or 0] = problem
    checked = []
    for rollout in rollouts:
        problem = problems.get(rollout.index or 0)
        if problem is not None:
            said = "; ".join(line.strip() for line in problem.splitlines() if line.strip())
            rollout = left_out(rollout, DOES_NOT_APPLY, f"does not apply to the base commit: {_shown(said, 2000)}")
            rollout.write(paths[rollout.index or 0])
        checked.append(rollout)
    return checked


def left_out_lines(rollouts: Iterable[Rollout], kinds: Iterable[str] = (GIT_DIR, BINARY, DOES_NOT_APPLY)) -> list[str]:
    """A line per imported rollout left out of its pool for one of ``kinds``: its task, its source, why."""
    wanted = set(kinds)
    return [f"{rollout.instance_id}: rollout {rollout.index} from {rollout.imported_from} left out of the pool: "
            f"{rollout.patch_error}" for rollout in rollouts
            if rollout.imported_from and rollout.patch_dropped in wanted]
