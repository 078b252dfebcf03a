"""What a running (or killed) run's juniors hold so far, for the tests that act at a given moment of a run: each
rollout's live trajectory, read from its journal as every reader reads it (pipeline.records.trajectory)."""

from __future__ import annotations

from pathlib import Path

from pipeline.records.trajectory import read_trajectory
from pipeline.rundir.layout import whole_trajectory


def live_trajectory(trajectory: Path) -> dict:
    """The trajectory saved so far at ``trajectory`` (``X.json``; its journal folded in), ``{}`` while there is none."""
    data = read_trajectory(trajectory, "replace").data
    return data if isinstance(data, dict) else {}


def live_steps(junior: Path) -> dict[str, list]:
    """The steps of every live rollout trajectory in the junior folder ``junior``, by journal file name."""
    found = {}
    for journal in sorted(junior.glob("rollout-*.trajectory.jsonl")):
        data = read_trajectory(whole_trajectory(journal)).data
        found[journal.name] = (data.get("steps") if isinstance(data, dict) else None) or []
    return found
