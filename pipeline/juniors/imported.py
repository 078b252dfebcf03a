"""Candidates taken in from elsewhere as junior rollouts (``run --juniors-from``): another swepipe run's
predictions, a predictions file (swepipe's, the official harness's or swebench's), or a folder of trajectories
(mini-swe-agent, SWE-agent, swepipe's export: their recorded submissions).

Each source's patch for a task becomes one rollout of that task, after this run's own K (rollout-NN with NN = K +
the source's place on the command line), named by its source and with the cost the source recorded for it, if
any: spent there, kept apart from this run's spend. The files are written into the run before its tasks start, so a
Ray node gets them with the task's folder, and a resumed run finds them in place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from pipeline.errors import SwepipeError
from pipeline.layout import RunLayout
from pipeline.records import Rollout, read_predictions
from pipeline.tasks import Task

IMPORTED = "imported"  # the exit reason and patch source of an imported rollout


@dataclasses.dataclass(frozen=True)
class ImportedCandidate:
    patch: str
    cost: float | None = None  # dollars the source recorded for it
    model: str | None = None


@dataclasses.dataclass(frozen=True)
class ImportedSource:
    path: Path
    kind: str  # "swepipe run", "predictions file", "trajectories"
    candidates: dict[str, ImportedCandidate]
    notes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.path.name


def read_source(path: Path) -> ImportedSource:
    """The candidates ``path`` holds, by instance id; SwepipeError naming the path when it holds none."""
    return _read_source(path.resolve())


@lru_cache(maxsize=16)
def _read_source(path: Path) -> ImportedSource:
    if path.is_dir() and RunLayout(path).predictions.exists():
        source = _from_run(path)
    elif path.is_dir():
        source = _from_trajectories(path)
    elif path.is_file():
        source = _from_predictions_file(path)
    else:
        raise SwepipeError(f"--juniors-from {path}: no such file or folder")
    if not source.candidates:
        raise SwepipeError(f"--juniors-from {path}: no candidate patch in it ({source.kind}"
                           f"{'; ' + '; '.join(source.notes[:3]) if source.notes else ''})")
    return source


def _from_run(path: Path) -> ImportedSource:
    lines = read_predictions(RunLayout(path).predictions)
    candidates = {}
    for instance_id, prediction in lines.records.items():
        cost = prediction.cost.get("total") if isinstance(prediction.cost, dict) else None
        model = (prediction.models or {}).get("principal") if isinstance(prediction.models, dict) else None
        candidates[instance_id] = ImportedCandidate(
            patch=prediction.model_patch or "", cost=float(cost) if isinstance(cost, (int, float)) else None,
            model=model if isinstance(model, str) else None)
    return ImportedSource(path, "swepipe run", candidates)


def _from_predictions_file(path: Path) -> ImportedSource:
    from pipeline.errors import DatasetError
    from pipeline.evaluation.predictions import load_predictions

    try:
        found = load_predictions(path)
    except DatasetError as error:
        raise SwepipeError(f"--juniors-from {path}: {error}") from None
    return ImportedSource(path, "predictions file", {p.instance_id: ImportedCandidate(p.patch, None, p.model or None)
                                                     for p in found})


def _from_trajectories(path: Path) -> ImportedSource:
    from pipeline.interop.recorded import NotReplayable
    from pipeline.interop.trajectory_formats import find_trajectories, read_trajectory_file

    candidates: dict[str, ImportedCandidate] = {}
    notes = []
    for file in find_trajectories([path]):
        try:
            recorded = read_trajectory_file(file)
        except NotReplayable as error:
            notes.append(str(error))
            continue
        if recorded.submission is None:
            notes.append(f"{file}: it records no submission")
        elif recorded.instance_id in candidates:
            notes.append(f"{file}: a second trajectory of {recorded.instance_id}; the first is kept")
        else:
            candidates[recorded.instance_id] = ImportedCandidate(recorded.submission, recorded.cost, recorded.model)
    return ImportedSource(path, "trajectories", candidates, tuple(notes))


def import_candidates(layout: RunLayout, tasks: list[Task], k: int, sources: list[str],
                      announce: Callable[[str], None] | None = None) -> None:
    """Write each source's candidate for each of ``tasks`` as rollout K + i (i: the source's place), unless it is
    there already (a resumed run); say per source how many tasks it has a candidate for."""
    for place, text in enumerate(sources):
        source = read_source(Path(text))
        held = [task for task in tasks if task.instance_id in source.candidates]
        if announce:
            lacking = len(tasks) - len(held)
            announce(f"--juniors-from {source.path} ({source.kind}): a candidate for {len(held)} of "
                     f"{len(tasks)} task(s)" + (f"; {lacking} task(s) have a smaller pool without it" if lacking
                                                else "") + (f"; {len(source.notes)} file(s) left out, e.g. "
                                                            f"{source.notes[0]}" if source.notes else ""))
        for task in held:
            path = layout.task(task.instance_id).junior_files.rollout(k + place)
            if not path.exists():
                imported_rollout(task, k + place, source).write(path)


def imported_rollout(task: Task, index: int, source: ImportedSource) -> Rollout:
    candidate = source.candidates[task.instance_id]
    return Rollout.of({"instance_id": task.instance_id, "index": index, "model": candidate.model or source.name,
                       "patch": candidate.patch, "patch_source": IMPORTED, "exit_reason": IMPORTED, "cost": 0.0,
                       "input_tokens": 0, "output_tokens": 0, "steps": 0, "imported_from": str(source.path),
                       "imported_cost": candidate.cost})


def imported_rollouts(directory_rollouts: dict[int, Path], k: int) -> list[Rollout]:
    """The imported rollouts of a task's junior folder (indices K and up), in index order."""
    found = []
    for index in sorted(directory_rollouts):
        if index >= k:
            record = Rollout.load(directory_rollouts[index])
            if record.imported_from:
                found.append(record)
    return found
