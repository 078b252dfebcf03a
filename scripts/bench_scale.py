"""How `swepipe run --executor ray` scales from one node to two, measured on this machine.

Starts a local Ray cluster on 127.0.0.1 with one node, runs the same N bundled tasks, then the same with two
nodes (the same docker_slots each), and prints each run's wall time, its throughput and the scaling
efficiency: two-node throughput / (2 x one-node throughput), measured in the same invocation.

The model is scripted with a fixed latency per reply and the juniors' commands sleep, so a task's time is spent
waiting on the model and in containers, as with real providers, not on this machine's CPUs. Nothing here is
asserted: it prints what it measured.

    .venv/bin/python scripts/bench_scale.py --tasks 6 --sleep 6 --latency 0.5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def bash(command: str, latency: float) -> dict:
    return {"content": f"Next.\n```bash\n{command}\n```", "delay": latency,
            "usage": {"prompt_tokens": 1000, "completion_tokens": 100}}


def script(sleep: float, latency: float) -> dict:
    junior = [bash(f"sleep {sleep} && echo looked", latency), bash(f"sleep {sleep} && echo checked", latency),
              bash("submit", latency)]
    brief = {"analysis": "Nothing to change for the benchmark.", "spans": []}
    return {"junior": [junior],
            "senior": [{"content": f"```json\n{json.dumps(brief)}\n```\n```bash\nsubmit\n```", "delay": latency}],
            "principal": [{"content": "No edit.", "delay": latency}, {"content": "Still no edit.", "delay": latency}]}


def run_on(nodes: int, slots: int, ids: str, work: Path, label: str) -> float:
    """Seconds `swepipe run` took on a fresh local cluster of ``nodes`` nodes."""
    from ray.cluster_utils import Cluster

    from pipeline.rundir.layout import RunLayout

    cluster = Cluster(initialize_head=True, head_node_args={
        "node_ip_address": "127.0.0.1", "num_cpus": 1, "resources": {"docker_slots": slots}, "node_name": "node-1",
        "include_dashboard": False})
    try:
        for n in range(2, nodes + 1):
            cluster.add_node(node_ip_address="127.0.0.1", num_cpus=1, resources={"docker_slots": slots},
                             node_name=f"node-{n}")
        cluster.wait_for_nodes()
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", ids, "--config",
                               "config.yaml", "--run-id", label, "--executor", "ray", "--ray-address",
                               cluster.address, "--skip-image-check"], cwd=work, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "200"})
        seconds = time.monotonic() - started
    finally:
        cluster.shutdown()
    if done.returncode != 0:
        raise SystemExit(f"the {label} run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    predictions = [json.loads(line) for line in RunLayout(work / "runs" / label).predictions.read_text().splitlines()]
    by_node: dict[str, int] = {}
    for prediction in predictions:
        by_node[prediction.get("node", "?")] = by_node.get(prediction.get("node", "?"), 0) + 1
    print(f"{label}: {len(predictions)} task(s) in {seconds:.1f} s; tasks per node: {by_node}", flush=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=6, help="bundled tasks in the batch")
    parser.add_argument("-k", type=int, default=2, help="junior rollouts per task (the docker slots a task holds)")
    parser.add_argument("--slots", type=int, default=2, help="docker_slots of each node")
    parser.add_argument("--sleep", type=float, default=6.0, help="seconds each junior command sleeps")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds the scripted model takes per reply")
    args = parser.parse_args()

    from pipeline.tasks import load_tasks

    tasks = load_tasks("bundled")[: args.tasks]
    ids = ",".join(t.instance_id for t in tasks)
    with tempfile.TemporaryDirectory(prefix="swepipe-bench-") as tmp:
        work = Path(tmp)
        (work / "script.yaml").write_text(yaml.safe_dump(script(args.sleep, args.latency)))
        prices = {"input": 1.0, "output": 2.0}
        (work / "config.yaml").write_text(yaml.safe_dump({
            "models": {role: {"model": f"scripted/{work / 'script.yaml'}", "prices": prices}
                       for role in ("junior", "senior", "principal")},
            "juniors": {"k": args.k}, "limits": {"max_steps": 6}}))
        print(f"{len(tasks)} bundled task(s), k={args.k}, {args.slots} docker_slots per node, junior commands "
              f"sleep {args.sleep:g} s, {args.latency:g} s per model reply", flush=True)
        one = run_on(1, args.slots, ids, work, "bench-1-node")
        two = run_on(2, args.slots, ids, work, "bench-2-nodes")
    one_rate, two_rate = len(tasks) / one, len(tasks) / two
    print(f"throughput: 1 node {one_rate * 60:.2f} tasks/min, 2 nodes {two_rate * 60:.2f} tasks/min")
    print(f"scaling efficiency (2-node throughput / (2 x 1-node throughput)): {two_rate / (2 * one_rate):.2f}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
