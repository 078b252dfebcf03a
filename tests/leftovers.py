"""What a test's runs may leave behind (containers, a Ray node's scratch), counted for this test process only.

This machine's Docker engine and /tmp outlive a test process that was killed (Ctrl-C, a lost machine); what such a
process left is no run's of this one, and must not fail a test here (`swepipe cleanup` removes it)."""

from __future__ import annotations

import contextlib
import glob
import tempfile
import time
from pathlib import Path

from pipeline.runtime.images.disk import _epoch

STARTED = time.time() - 1.0  # Docker stamps creation in whole UTC seconds at worst


def run_containers(run_id: str | None = None, *, running: bool = False) -> list:
    """The containers of run ``run_id`` (any swepipe run's when None) this test process's runs started."""
    from pipeline.runtime import containers

    wanted = f"{containers.RUN_LABEL}={run_id}" if run_id else containers.LABEL
    # ignore_removed: one the run removes between the listing and its inspection is gone, not an error
    found = containers.client().containers.list(all=not running, filters={"label": wanted}, ignore_removed=True)
    return [c for c in found if _epoch(c.attrs.get("Created")) >= STARTED]


def no_containers_left(run_id: str | None = None) -> bool:
    return run_containers(run_id) == []


def _attempt_folders(run_id: str = "*") -> set[Path]:
    from pipeline.run.ray.node import SCRATCH_ROOT, run_folder

    runs = run_folder(run_id) if run_id != "*" else Path(tempfile.gettempdir()) / SCRATCH_ROOT / "*"
    return {Path(path) for path in glob.glob(str(runs / "*" / "attempt-*"))}


_BEFORE = _attempt_folders()  # every run's, as this test process found them


def scratch_left(run_id: str) -> list[Path]:
    """The scratch folders of ``run_id``'s tasks still on this machine's Ray nodes, made by this test process's
    runs, each with what is inside it, so that a failure shows what was left."""
    left = _attempt_folders(run_id) - _BEFORE
    return sorted(path for attempt in left for path in [attempt, *attempt.rglob("*")])


def lasting_files(root: Path) -> dict[str, int]:
    """The files of run directory ``root`` that last, and their sizes. What a run replaces or removes itself as it
    goes is left out: an atomic write's temporary file (``.name.XXXX.tmp``, renamed over its file a moment later),
    the journal of a paid reply (``*.reply``, rewritten by each call, removed once the trajectory holds the reply),
    the Ray driver's note of a task's attempt in flight (``ray_attempt.json``, removed once all it wrote is in the
    run directory) and a file gone between the listing and its size."""
    from pipeline.rundir.layout import TASK

    found = {}
    for path in root.rglob("*"):
        if (path.name.startswith(".") and path.name.endswith(".tmp")) or path.suffix == ".reply" or \
                path.name == TASK.ray_attempt.name:
            continue
        with contextlib.suppress(FileNotFoundError):
            if path.is_file():
                found[path.relative_to(root).as_posix()] = path.stat().st_size
    return found
