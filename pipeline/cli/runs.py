"""RUN on the command line: every command that reads a run takes it as a run id (under --runs-dir) or a run
directory, through the one resolver here (``run_directory``, the one `swepipe export` has always used)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

RUN_HELP = "A run id (under --runs-dir) or a run directory."

Run = Annotated[str, typer.Argument(metavar="RUN", help=RUN_HELP)]


def run_directory(run: str, runs_dir: Path) -> Path:
    """The run directory ``run`` names (an id under ``runs_dir``, or a directory); SwepipeError naming both places
    looked at when there is none."""
    from pipeline.errors import SwepipeError
    from pipeline.rundir.layout import RunLayout

    candidates = [Path(run)] + ([runs_dir / run] if run and "/" not in run and run not in (".", "..") else [])
    folders = [path for path in candidates if path.is_dir()]
    if not folders:
        raise SwepipeError(f"unknown run {run!r}: no directory {Path(run)} and no run {run!r} under "
                           f"{runs_dir}/ (pass a run id or runs/<run-id>)")
    for root in folders:
        layout = RunLayout(root)
        if layout.predictions.exists() or layout.tasks.is_dir():
            return root
    raise SwepipeError(f"{folders[0]} is not a run directory (it has no predictions.jsonl and no tasks/)")


def run_directories(runs: list[str], runs_dir: Path) -> list[Path]:
    return [run_directory(run, runs_dir) for run in runs]


def runs_or_repeats(run: str, runs_dir: Path) -> list[Path]:
    """The run ``run`` names, or when it names no run but a group of repeats (`run --repeats N` writes
    ``<group>-r1`` .. ``<group>-rN``), the repeats' directories by number."""
    from pipeline.rundir.layout import repeat_dirs

    for spelled in _spellings(run, runs_dir):
        if not spelled.is_dir() and (repeats := repeat_dirs(spelled.parent, spelled.name)):
            return list(repeats.values())
    return [run_directory(run, runs_dir)]


def run_id_of(run: str) -> str:
    """The id of the run ``run`` names, whether or not its directory is still here (``swepipe cleanup`` removes
    containers by the id they are labelled with): a directory's name, or the id itself."""
    path = Path(run)
    return path.resolve().name if path.is_dir() else path.name


def _spellings(run: str, runs_dir: Path) -> list[Path]:
    """Where ``run`` could be: the path as given, and for a bare name the run of that id."""
    bare = run and "/" not in run and run not in (".", "..")
    return [Path(run), *([runs_dir / run] if bare else [])]
