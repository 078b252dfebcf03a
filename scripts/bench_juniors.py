"""Junior-stage speed on a bundled task, with a scripted model that waits 1 s per reply, in one run.

1. Parallel efficiency: wall time of K = 1, 4, 10 rollouts side by side; efficiency is a single
   rollout's wall time over K rollouts' wall time (1.0 means K rollouts cost no more time than one).
2. Harness time per step with the model's time taken out (median, Docker), beside a naive baseline:
   one `docker exec` subprocess per command, as a simple harness would run it.

    python scripts/bench_juniors.py [--steps 5] [--delay 1.0] [--ks 1,4,10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from pipeline.job import TaskJob
from pipeline.juniors.stage import run_juniors
from pipeline.models.budget import Budget
from pipeline.rundir.layout import TaskPaths
from pipeline.runtime.factory import open_runtime
from pipeline.settings.config import Containers, Juniors, Limits, RunConfig
from pipeline.settings.model_spec import ModelSpec
from pipeline.tasks import load_tasks
from pipeline.tasks.datasets import BUNDLED, defaults_for


def run_stage(task, k: int, steps: int, delay: float, scratch: Path) -> tuple[float, list[dict]]:
    scratch.mkdir(parents=True, exist_ok=True)
    script = scratch / f"k{k}.yaml"
    commands = [f"```bash\ngit status --short && ls > /dev/null && echo step {i}\n```" for i in range(steps)]
    script.write_text(yaml.safe_dump({"delay": delay, "junior": [commands + ["```bash\nsubmit\n```"]]}))
    config = RunConfig(models={"junior": ModelSpec(model=f"scripted/{script}", free=True)},
                       limits=Limits(max_steps=steps + 1), juniors=Juniors(k=k, temperatures=[0.0]))
    job = TaskJob(task=task, config=config, paths=TaskPaths(scratch / f"k{k}"), run_id=f"bench-juniors-{k}",
                  image_template=defaults_for(BUNDLED).image_template, budget=Budget("run"))
    started = time.monotonic()
    records = run_juniors(job)
    return time.monotonic() - started, records


def naive_exec_seconds(task, count: int) -> list[float]:
    runtime = open_runtime(task, "bench", Containers(), run_id="bench-juniors",
                           image_template=defaults_for(BUNDLED).image_template)
    try:
        times = []
        for i in range(count):
            started = time.monotonic()
            subprocess.run(["docker", "exec", "-w", "/app", runtime.container.id, "bash", "-c",
                            f"git status --short && ls > /dev/null && echo step {i}"], capture_output=True, check=True)
            times.append(time.monotonic() - started)
        return times
    finally:
        runtime.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--ks", default="1,4,10")
    args = parser.parse_args()
    task = next(t for t in load_tasks(BUNDLED) if t.repo_language == "python")
    ks = [int(k) for k in args.ks.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        run_stage(task, 1, 1, 0.0, Path(scratch) / "warm")  # sanitised image and litellm import, once
        walls, harness = {}, {}
        for k in ks:
            walls[k], records = run_stage(task, k, args.steps, args.delay, Path(scratch))
            harness[k] = [step["seconds"] - step["model_seconds"]
                          for record in records for step in record.trajectory["steps"]]
    naive = naive_exec_seconds(task, 30)
    single = walls[ks[0]]
    print(f"task {task.instance_id}: {args.steps} commands + submit per rollout, model waits {args.delay:.1f} s/reply")
    base = statistics.median(naive) * 1000
    print(f"{'K':>3} {'wall s':>8} {'efficiency':>11} {'harness ms/step (median, model excluded)':>42}")
    for k in ks:
        ours = statistics.median(harness[k]) * 1000
        print(f"{k:>3} {walls[k]:8.2f} {single / walls[k]:11.2f} {ours:30.1f}  ({ours / base:.2f}x baseline)")
    print(f"naive baseline (one docker exec subprocess per command, one container), median: {base:.1f} ms")


if __name__ == "__main__":
    main()
