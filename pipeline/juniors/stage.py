"""Stage 1: K rollouts of one task side by side (or in waves, with ``juniors.schedule``); finished rollouts on disk
(this run's or another's) are reused."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from pipeline import pool_rules as waves
from pipeline.audit import audit_agent, task_subject
from pipeline.control import stopping
from pipeline.job import TaskJob
from pipeline.juniors.imported import imported_rollouts
from pipeline.juniors.imported_checks import checked_against_base
from pipeline.juniors.pool import build_pool
from pipeline.juniors.rollout import run_rollout
from pipeline.pool_rules import CandidatePool
from pipeline.records import Pool, Rollout, Unreadable
from pipeline.records.pool import Decision, Schedule, ScheduleDecision
from pipeline.records.retrieval import RetrievalFinding
from pipeline.rundir.layout import JuniorFiles
from pipeline.settings.config import ScheduleConfig
from pipeline.settings.model_spec import Role
from pipeline.tasks import Task

OnDone = Callable[[Rollout], object]  # told each rollout's record as it ends


def junior_stage(job: TaskJob, *, on_done: OnDone | None = None) -> tuple[list[Rollout], CandidatePool]:
    """The junior stage as a strategy runs it: the rollouts (``run_juniors``) as records, and their pool, written
    to junior/pool.json with the schedule's decisions when ``juniors.schedule`` is on."""
    records, schedule = _run(job, on_done)
    pool = build_pool(job.task.instance_id, records)
    write_pool(job, pool, schedule)
    return records, pool


def run_juniors(job: TaskJob, *, on_done: OnDone | None = None) -> list[Rollout]:
    """Rollouts 0..k-1 of the task in junior/ (with ``juniors.schedule`` on, 0..n-1 for the n its waves ran);
    returns their records in index order."""
    return _run(job, on_done)[0]


def write_pool(job: TaskJob, pool: CandidatePool, schedule: Schedule | None) -> None:
    """junior/pool.json: the pool, and the schedule's record (``pipeline.pool_rules.record``) when on."""
    data = pool.to_dict()
    if schedule is not None:
        data["schedule"] = schedule.to_dict()
    Pool.of(data).write(job.paths.junior_files.pool)


def _run(job: TaskJob, on_done: OnDone | None) -> tuple[list[Rollout], Schedule | None]:
    juniors, directory = job.config.juniors, job.paths.junior
    k = juniors.k
    directory.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if not juniors.schedule.enabled or k == 0:
        if job.reuse_juniors_from is not None:
            copy_rollouts(job.reuse_juniors_from.junior, directory, k, task=job.task)
        by_index, schedule = _rollouts(job, range(k), on_done), None
        records = [by_index[index] for index in range(k)]
        if juniors.imported:  # written into the run before it started (pipeline.juniors.imported)
            written = JuniorFiles(directory).rollouts()
            records += checked_against_base(job, imported_rollouts(written, k), written)
    else:
        records, schedule = _run_waves(job, on_done)
    job.seconds["junior"] = round(time.monotonic() - started, 2)
    return records, schedule


def _run_waves(job: TaskJob, on_done: OnDone | None) -> tuple[list[Rollout], Schedule]:
    """The schedule: waves of rollouts until a rule says the pool has converged or K have run. A decision on disk
    (junior/pool.json) is kept: a task whose schedule stopped starts no more rollouts, one cut short mid-wave
    finishes that wave."""
    settings, k, directory = job.config.juniors.schedule, job.config.juniors.k, job.paths.junior
    recorded = _recorded_decisions(directory)
    stop = next((d for d in recorded if d.decision == ScheduleDecision.STOP and d.converged), None)
    if stop is not None and isinstance(stop.rollouts, int) and 0 < stop.rollouts <= k \
            and all(JuniorFiles(directory).rollout(i).exists() for i in range(stop.rollouts)):
        kept = recorded[:recorded.index(stop) + 1]
        done = _rollouts(job, range(stop.rollouts), on_done)
        return [done[i] for i in range(stop.rollouts)], _schedule_record(settings, k, kept, directory)
    records: dict[int, Rollout] = {}
    decisions: list[Decision] = []
    before: CandidatePool | None = None
    for wave, size in enumerate(waves.wave_sizes(settings, k), start=1):
        if job.reuse_juniors_from is not None:
            copy_rollouts(job.reuse_juniors_from.junior, directory, size, start=len(records), task=job.task)
        records.update(_rollouts(job, range(len(records), size), on_done, check_stop=True))
        so_far = [records[i] for i in range(size)]
        pool = build_pool(job.task.instance_id, so_far)
        old = recorded[wave - 1] if wave <= len(recorded) else None
        went_on = old is not None and old.decision == ScheduleDecision.GO_ON
        if old is not None and old.rollouts == size and (went_on or size >= k):
            decision = old  # an earlier session's decision on the same rollouts
        else:
            decision = waves.judge(settings, k, wave, so_far, pool, before)
        decisions.append(decision)
        if decision is not old:  # on disk as soon as it is made
            write_pool(job, pool, _schedule_record(settings, k, decisions, directory))
        if decision.decision == ScheduleDecision.STOP:
            break
        before = pool
    run = waves.rollouts_run(decisions)
    return [records[i] for i in range(run)], _schedule_record(settings, k, decisions, directory)


def _schedule_record(settings: ScheduleConfig, k: int, decisions: list[Decision], directory: Path) -> Schedule:
    run = waves.rollouts_run(decisions)
    beyond = [index for index in JuniorFiles(directory).rollouts() if index >= run]
    return waves.record(settings, k, decisions, beyond)


def _recorded_decisions(directory: Path) -> list[Decision]:
    """The schedule's decisions an earlier session wrote into junior/pool.json ([] when none, or it cannot be
    read)."""
    pool = Pool.read(JuniorFiles(directory).pool)
    if isinstance(pool, Unreadable) or pool.schedule is None or pool.schedule.decisions is None:
        return []
    return list(pool.schedule.decisions)


def _rollouts(job: TaskJob, indices: range, on_done: OnDone | None,
              check_stop: bool = False) -> dict[int, Rollout]:
    """The records of rollouts ``indices``: those on disk as they are, the others run side by side
    (``check_stop``: none starts once the run is stopping, as between two waves)."""
    directory = job.paths.junior
    records: dict[int, Rollout] = {}
    todo = []
    for index in indices:
        previous = JuniorFiles(directory).rollout(index)
        if previous.exists():
            records[index] = Rollout.load(previous)
        else:
            todo.append(index)
    if todo:
        if check_stop:
            stopping.check()
        client = job.client(Role.JUNIOR)
        with ThreadPoolExecutor(max_workers=len(todo),
                                thread_name_prefix=f"junior-{job.task.instance_id[:20]}") as pool:
            futures = {pool.submit(run_rollout, job, index, client): index for index in todo}
            for future in as_completed(futures):
                index = futures[future]
                records[index] = future.result()
                if on_done:
                    on_done(records[index])
    return records


def copy_rollouts(source: Path, target: Path, k: int, start: int = 0, task: Task | None = None) -> int:
    """Finished rollouts ``start``..k-1 of another run, taken as they are: their cost was paid there. One that an
    older swepipe did not audit is audited here (``task``: the task it worked on)."""
    target.mkdir(parents=True, exist_ok=True)
    copied = 0
    for index in range(start, k):
        theirs, ours = JuniorFiles(source).rollout(index), JuniorFiles(target).rollout(index)
        if theirs.exists() and not ours.exists():
            record = Rollout.load(theirs)  # kept as it is, whatever format it was written in
            record.reused_from = str(source)
            if task is not None and record.retrieval is None and isinstance(record.trajectory, dict):
                record.retrieval = [RetrievalFinding.model_validate(finding)
                                    for finding in audit_agent(record.trajectory, task_subject(task))]
            record.write(ours)
            copied += 1
    return copied
