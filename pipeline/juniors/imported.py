"""Candidates taken in from elsewhere as junior rollouts (``run --juniors-from``): another swepipe run's
predictions, a predictions file (swepipe's, the official harness's or swebench's), or a folder of trajectories
(mini-swe-agent, SWE-agent, swepipe's export: their recorded submissions).

Each source's patch for a task becomes one rollout of that task, after this run's own K (rollout-NN with NN = K +
the source's place on the command line), named by its source and with the cost the source recorded for it, if
any: spent there, kept apart from this run's spend. The files are written into the run before its tasks start, so a
Ray node gets them with the task's folder, and a resumed run finds them in place.

The trajectories behind a candidate are audited for reaching for the answer (pipeline.audit; their harnesses were
not sealed): a folder's trajectory itself, a swepipe run's agents' trajectories of the task (its juniors, senior,
solo agent or team). A predictions file holds none: its candidates are recorded as unaudited. Each source's
findings are named when it is taken in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from pipeline.audit import FindingData, audit_agent, task_subject
from pipeline.errors import SwepipeError
from pipeline.interop.recorded import RecordedTrajectory, audit_recorded, recorded_cost
from pipeline.juniors.imported_checks import BINARY, DOES_NOT_APPLY, GIT_DIR, left_out, left_out_lines, unusable_patch
from pipeline.records import Rollout, Unreadable, read_predictions, read_trajectory
from pipeline.rundir.layout import RunLayout
from pipeline.tasks import Task

IMPORTED = "imported"  # the exit reason and patch source of an imported rollout


@dataclasses.dataclass(frozen=True)
class ImportedCandidate:
    patch: str
    cost: float | None = None  # dollars the source recorded for it
    model: str | None = None
    recorded: RecordedTrajectory | None = None  # the trajectory it came from, when the source holds one


@dataclasses.dataclass(frozen=True)
class ImportedSource:
    path: Path
    kind: str  # "swepipe run", "predictions file", "trajectories"
    candidates: dict[str, ImportedCandidate]
    notes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.path.name


def refuse_own_run(given: str, source: Path, run_root: Path) -> None:
    """SwepipeError when ``source`` (named ``given`` on the command line) is the run at ``run_root`` itself, lies
    inside it (its predictions file, a task's folder) or holds it (a folder of trajectories above it): its own
    files would be read as candidates from elsewhere, and would change under the run. Paths are compared resolved,
    symbolic links followed, so another name for the same folder is refused too."""
    mine, theirs = run_root.resolve(), source.resolve()
    if theirs == mine:
        raise SwepipeError(f"--juniors-from {given}: is this run itself ({run_root}); a run cannot take its own "
                           "predictions in as candidates (give another run, or another --run-id)")
    if mine in theirs.parents:
        raise SwepipeError(f"--juniors-from {given}: lies inside this run's directory ({run_root}); a run cannot "
                           "take its own files in as candidates")
    if theirs in mine.parents:
        raise SwepipeError(f"--juniors-from {given}: holds this run's directory ({run_root}), whose own files would "
                           "be read as candidates; give the folder of the trajectories alone")


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
    candidates, notes = {}, list[str]()
    for instance_id, prediction in lines.records.items():
        cost = prediction.cost.get("total") if isinstance(prediction.cost, dict) else None
        model = (prediction.models or {}).get("principal") if isinstance(prediction.models, dict) else None
        candidates[instance_id] = ImportedCandidate(
            patch=prediction.model_patch or "", cost=recorded_cost(cost, notes, instance_id),
            model=model if isinstance(model, str) else None)
    return ImportedSource(path, "swepipe run", candidates, tuple(notes))


def _from_predictions_file(path: Path) -> ImportedSource:
    from pipeline.errors import DatasetError
    from pipeline.interop.predictions import load_predictions

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
            candidates[recorded.instance_id] = ImportedCandidate(recorded.submission, recorded.cost, recorded.model,
                                                                 recorded)
    return ImportedSource(path, "trajectories", candidates, tuple(notes))


def import_candidates(layout: RunLayout, tasks: list[Task], k: int, sources: list[str],
                      announce: Callable[[str], None] | None = None) -> None:
    """Write each source's candidate for each of ``tasks`` as rollout K + i (i: the source's place), unless it is
    there already (a resumed run); say per source how many tasks it has a candidate for."""
    for place, text in enumerate(sources):
        refuse_own_run(text, Path(text), layout.root)
        source = read_source(Path(text))
        held = [task for task in tasks if task.instance_id in source.candidates]
        if announce:
            lacking = len(tasks) - len(held)
            announce(f"--juniors-from {source.path} ({source.kind}): a candidate for {len(held)} of "
                     f"{len(tasks)} task(s)" + (f"; {lacking} task(s) have a smaller pool without it" if lacking
                                                else "") + _notes_said(source.notes))
        written = []
        for task in held:
            path = layout.task(task.instance_id).junior_files.rollout(k + place)
            if not path.exists():
                imported_rollout(task, k + place, source).write(path)
            written.append(Rollout.load(path))
        if announce and written:
            for line in left_out_lines(written, (GIT_DIR, BINARY)):
                announce(line)
            announce(audit_summary(source, written))


def not_applying(layout: RunLayout, tasks: list[Task], k: int) -> list[str]:
    """A line per imported candidate the junior stage found does not apply to its task's base commit (left out of
    the pool), for the command to say once the tasks ran."""
    return [line for task in tasks
            for line in left_out_lines(imported_rollouts(layout.task(task.instance_id).junior_files.rollouts(), k),
                                       (DOES_NOT_APPLY,))]


def _notes_said(notes: tuple[str, ...], shown: int = 10) -> str:
    """What reading a source left out or read loosely (files, costs), a line each; the first ``shown``."""
    if not notes:
        return ""
    lines = [f"\n  {note}" for note in notes[:shown]]
    more = f"\n  ... and {len(notes) - shown} more" if len(notes) > shown else ""
    return f"; {len(notes)} note(s):" + "".join(lines) + more


def imported_rollout(task: Task, index: int, source: ImportedSource) -> Rollout:
    candidate = source.candidates[task.instance_id]
    audited = _audited(task, source, candidate)
    rollout = Rollout.of({"instance_id": task.instance_id, "index": index, "model": candidate.model or source.name,
                          "patch": candidate.patch, "patch_source": IMPORTED, "exit_reason": IMPORTED, "cost": 0.0,
                          "input_tokens": 0, "output_tokens": 0, "steps": 0, "imported_from": str(source.path),
                          "imported_cost": candidate.cost, **audited})
    unusable = unusable_patch(candidate.patch)
    return left_out(rollout, *unusable) if unusable else rollout


def _audited(task: Task, source: ImportedSource, candidate: ImportedCandidate) -> dict[str, object]:
    """``retrieval``: the findings on the trajectories behind the candidate; or ``unaudited`` and why not."""
    if candidate.recorded is not None:
        return {"retrieval": audit_recorded(candidate.recorded, task.repo, task.base_commit,
                                            task_subject(task).task_text)}
    if source.kind == "swepipe run":
        found = _run_findings(RunLayout(source.path), task)
        if found is not None:
            return {"retrieval": found}
        return {"unaudited": "the swepipe run holds no trajectory of the task"}
    return {"unaudited": f"a {source.kind} holds no trajectory"}


def _run_findings(layout: RunLayout, task: Task) -> list[FindingData] | None:
    """The findings on a swepipe run's agents' trajectories of ``task`` (its junior rollouts, senior, solo agent,
    team lead and workers), each naming its agent; None when it holds none."""
    paths = layout.task(task.instance_id)
    subject = task_subject(task)
    trajectories: list[tuple[str, object]] = []
    for index, path in sorted(paths.junior_files.rollouts().items()):
        record = Rollout.read(path)
        if not isinstance(record, Unreadable) and record.trajectory:
            trajectories.append((f"rollout-{index:02d}", record.trajectory))
    agents = [("senior", paths.senior_files.trajectory), ("solo", paths.solo_files.trajectory),
              *((path.name.split(".")[0], path) for path in paths.team_files.trajectories())]
    for name, path in agents:
        read = read_trajectory(path)
        if isinstance(read.data, dict):
            trajectories.append((name, read.data))
    if not trajectories:
        return None
    return [finding for name, trajectory in trajectories for finding in audit_agent(trajectory, subject, name)]


def audit_summary(source: ImportedSource, rollouts: list[Rollout]) -> str:
    """What the retrieval audit found on a source's candidates: how many came from trajectories that reached for
    the answer (each task's first finding: its step, kind and command's first line), how many could not be
    audited."""
    reached = [rollout for rollout in rollouts if rollout.retrieval]
    missing = [rollout for rollout in rollouts if rollout.unaudited]
    said = (f"--juniors-from {source.path}: {len(reached)} of {len(rollouts)} candidate(s) from trajectories that "
            "reached for the answer")
    for rollout in reached[:10]:
        first = (rollout.retrieval or [])[0]
        command = str(first.command or "").split("\n", 1)[0][:160]
        said += (f"\n  {rollout.instance_id}: step {first.step} ({first.kind}) {command}"
                 + (f" (and {len(rollout.retrieval or []) - 1} more)" if len(rollout.retrieval or []) > 1 else ""))
    if len(reached) > 10:
        said += f"\n  ... and {len(reached) - 10} more (the task pages list every finding)"
    if missing:
        said += f"\n  {len(missing)} of {len(rollouts)} not audited: {missing[0].unaudited}"
    return said


def imported_rollouts(directory_rollouts: dict[int, Path], k: int) -> list[Rollout]:
    """The imported rollouts of a task's junior folder (indices K and up), in index order."""
    found = []
    for index in sorted(directory_rollouts):
        if index >= k:
            record = Rollout.load(directory_rollouts[index])
            if record.imported_from:
                found.append(record)
    return found
