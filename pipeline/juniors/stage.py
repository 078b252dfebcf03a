"""Stage 1: K rollouts of one task side by side; finished rollouts on disk (this run's or another's) are reused."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from pipeline.job import TaskJob
from pipeline.juniors.rollout import rollout_path, run_rollout
from pipeline.storage import write_json_atomic


def run_juniors(job: TaskJob, *, on_done=None) -> list[dict]:
    """Rollouts 0..k-1 of the task in junior/; returns their records in index order."""
    k, directory = job.config.juniors.k, job.paths.junior
    directory.mkdir(parents=True, exist_ok=True)
    if job.reuse_juniors_from is not None:
        copy_rollouts(job.reuse_juniors_from.junior, directory, k)
    records: dict[int, dict] = {}
    todo = []
    for index in range(k):
        previous = rollout_path(directory, index)
        if previous.exists():
            records[index] = json.loads(previous.read_text(encoding="utf-8"))
        else:
            todo.append(index)
    started = time.monotonic()
    if todo:
        client = job.client("junior")
        with ThreadPoolExecutor(max_workers=len(todo),
                                thread_name_prefix=f"junior-{job.task.instance_id[:20]}") as pool:
            futures = {pool.submit(run_rollout, job, index, client): index for index in todo}
            for future in as_completed(futures):
                index = futures[future]
                records[index] = future.result()
                if on_done:
                    on_done(records[index])
    job.seconds["junior"] = round(time.monotonic() - started, 2)
    return [records[index] for index in range(k)]


def copy_rollouts(source: Path, target: Path, k: int) -> int:
    """Finished rollouts of another run, taken as they are: their cost was paid there."""
    target.mkdir(parents=True, exist_ok=True)
    copied = 0
    for index in range(k):
        theirs, ours = rollout_path(source, index), rollout_path(target, index)
        if theirs.exists() and not ours.exists():
            record = json.loads(theirs.read_text(encoding="utf-8"))
            record["reused_from"] = str(source)
            write_json_atomic(ours, record)
            copied += 1
    return copied
