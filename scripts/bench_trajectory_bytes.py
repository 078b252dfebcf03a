"""Bytes a junior rollout writes for its trajectory, against the trajectory's final size, at 10, 25 and 50 steps.

Each step's command prints about 8 KB (``seq``), as the commands of real rollouts often do. The rollout runs
through the command line (``swepipe rollouts``, one rollout, a scripted model, a bundled task in Docker) under
``strace``, which counts every byte the process writes to the rollout's files (its record, its live trajectory
and journal, the reply journal, and the temporary files the atomic writes rename): whatever code writes them.

``--baseline DIR`` measures a second source tree the same way in the same run (e.g. a worktree of an older
commit), so the two are compared under the same load:

    python scripts/bench_trajectory_bytes.py [--steps 10,25,50] [--baseline /tmp/before]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TASK = "instance_swepipe-bundled__tinyq-4f1623ef16b211dc68973510b8d464ccad2c727b"
# One traced write: the call, its file descriptor's path (strace -y), and the bytes it wrote.
WRITE = re.compile(r"^(?:\[pid +\d+\] |\d+ +)?p?writev?(?:64)?\(\d+<(?P<path>[^>]*)>.*\)\s+=\s+(?P<bytes>\d+)")


def rollout_bytes(source: Path, steps: int, scratch: Path) -> tuple[int, int]:
    """(bytes written to rollout-00's files, size of its final record) for a rollout of ``steps`` steps, with
    the swepipe of ``source``."""
    work = scratch / f"{source.name}-{steps}"
    work.mkdir(parents=True)
    replies = [f"```bash\nseq {i} {i + 1700}\n```" for i in range(steps - 1)] + ["```bash\nsubmit\n```"]
    (work / "replies.yaml").write_text(yaml.safe_dump({"junior": [replies]}))
    (work / "config.yaml").write_text(yaml.safe_dump({
        "models": {"junior": {"model": f"scripted/{work / 'replies.yaml'}", "free": True}},
        "limits": {"max_steps": steps, "observation_limit": 10_000}}))
    trace = work / "strace.txt"
    command = ["strace", "-f", "-qq", "-y", "-s", "0", "-e", "trace=write,pwrite64,writev,pwritev", "-e",
               "signal=none", "-o", str(trace), sys.executable, "-m", "pipeline.cli", "rollouts", "--task", TASK,
               "-k", "1", "--config", str(work / "config.yaml"), "--runs-dir", str(work / "runs"), "--run-id", "b"]
    env = {**os.environ, "PYTHONPATH": str(source)}
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        sys.exit(f"swepipe rollouts failed in {source} ({steps} steps):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    junior = work / "runs" / "b" / "tasks" / TASK / "junior"
    record = junior / "rollout-00.json"
    written = 0
    for line in trace.read_text(errors="replace").splitlines():
        match = WRITE.match(line)
        if match and Path(match["path"]).parent == junior and Path(match["path"]).name.lstrip(".").startswith(
                "rollout-00."):
            written += int(match["bytes"])
    steps_done = len(yaml.safe_load(record.read_text())["trajectory"]["steps"])
    if steps_done != steps:
        sys.exit(f"{source}: the rollout took {steps_done} steps, not {steps}")
    return written, record.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default="10,25,50")
    parser.add_argument("--baseline", type=Path, help="another source tree to measure beside this one")
    args = parser.parse_args()
    sources = [ROOT] + ([args.baseline.resolve()] if args.baseline else [])
    counts = [int(n) for n in args.steps.split(",")]
    results: dict[tuple[Path, int], tuple[int, int]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for steps in counts:
            for source in sources:  # alternated, so both see the same load
                results[source, steps] = rollout_bytes(source, steps, Path(scratch))
    print(f"bytes one junior rollout writes for its trajectory (each step's command prints ~8 KB; task {TASK[:40]})")
    header = f"{'steps':>5}  {'source':<28} {'written':>11} {'final record':>13} {'written/final':>14}"
    print(header)
    for steps in counts:
        for source in sources:
            written, final = results[source, steps]
            print(f"{steps:>5}  {str(source)[-28:]:<28} {written:>11,} {final:>13,} {written / final:>13.2f}x")
        if args.baseline:
            (now, _), (before, _) = results[ROOT, steps], results[sources[1], steps]
            print(f"{'':>5}  this tree writes {now / before:.3f} of the baseline's bytes")


if __name__ == "__main__":
    main()
