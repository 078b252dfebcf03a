"""How many nodes' writes one Ray driver keeps up with.

On a cluster the driver alone writes the run directory: every node sends each write it makes (a trajectory's
journal line, a ledger row, a reply journal, a record) through one queue actor on the head, and the driver applies
them in order; when a task ends, the driver waits for its writes (a flush, FLUSH_TIMEOUT at most) before it counts
the task, and a flush that times out makes the task no result, run again by a rerun.

This drives the real driver (``RayDriver.execute``: its submit window, ray.wait loop, flushes and drain thread),
the real queue actor and the real node-side sender, with simulated nodes on a local Ray cluster bound to
127.0.0.1: each node runs K=10-rollout tasks one after another, and each rollout takes a step every
``--step-seconds`` and sends what a junior step writes (its trajectory journal's two lines, a ledger row, the
reply journal written and removed), with sizes like a real step's. Simulated nodes are threads of a few actor
processes (128 real Ray worker processes would not fit this machine); what they send is what that many nodes
send. For 1, 8, 32 and 128 nodes it prints the writes per second offered and applied, the latency from a
node's send to the driver's write (percentiles), and the flushes that timed out.

    python scripts/bench_driver.py [--nodes 1,8,32,128] [--seconds 40] [--step-seconds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

K = 10  # rollouts of a task, as the method runs them
GROUPS = 4  # actor processes the simulated nodes are spread over
# What one junior step sends, in order: (op, file, bytes). The sizes are a real step's: a reply of ~1.5 KB, an
# answer line holding a command's output (~4 KB, up to the 10 KB observation limit), a ledger row.
STEP_WRITES = (("append", "rollout-{r:02d}.trajectory.jsonl", 1500), ("write", "rollout-{r:02d}.trajectory.reply",
               2000), ("append", "../ledger.jsonl", 450), ("unlink", "rollout-{r:02d}.trajectory.reply", 0),
               ("append", "rollout-{r:02d}.trajectory.jsonl", 4000))


def node_group_class(ray: Any) -> Any:
    from pipeline.run.ray import node

    sender = node.sender

    @ray.remote(num_cpus=0, max_concurrency=1000)
    class NodeGroup:
        """Simulated nodes: each call is one task on one node, sending a K-rollout task's writes for ``seconds``."""

        def run_task(self, key: str, queue: Any, seconds: float, step_seconds: float) -> dict[str, Any]:
            put = sender(queue)
            put((key, "start", "node", str(os.getpid()).encode()))
            task = key.rpartition("#")[0]
            rng = random.Random(key)
            gap = step_seconds / (K * len(STEP_WRITES))
            started = time.monotonic()
            sent, next_at = 0, started
            while time.monotonic() - started < seconds:
                rollout = rng.randrange(K)
                for op, name, size in STEP_WRITES:
                    next_at += gap
                    time.sleep(max(0.0, next_at - time.monotonic()))
                    relative = f"tasks/{task}/junior/{name.format(r=rollout)}"
                    stamp = f"{time.time():.6f} ".encode()
                    data = b"" if op == "unlink" else stamp + b"x" * (size - len(stamp) - 1) + b"\n"
                    put((key, op, relative, data))
                    sent += 1
            return {"sent": sent}

    return NodeGroup


def measure(ray: Any, nodes: int, seconds: float, step_seconds: float, groups: list[Any]) -> dict[str, Any]:
    from pipeline.run.ray.driver import RayDriver

    latencies: list[float] = []
    outcome: dict[str, Any] = {"sent": 0, "done": 0, "applied": 0, "flush_timeouts": 0, "errors": []}

    class BenchDriver(RayDriver[str]):
        def item_id(self, item: str) -> str:
            return item

        def ship(self, item: str, key: str) -> Any:
            group = groups[int(item.rsplit("-", 1)[1]) % len(groups)]
            return group.run_task.remote(key, self.queue, seconds, step_seconds)

        def completed(self, item: str, result: Any) -> None:
            outcome["done"] += 1
            outcome["sent"] += result["sent"]

        def give_up(self, item: str, error: str) -> None:
            if "did not reach the driver" in error:
                outcome["flush_timeouts"] += 1
            else:
                outcome["errors"].append(error[:300])

        def _apply(self, item: Any) -> None:
            super()._apply(item)
            data = item[3]
            outcome["applied"] += item[1] in ("append", "write", "unlink")
            if item[1] in ("append", "write") and data[:1].isdigit():
                latencies.append(time.time() - float(data.split(b" ", 1)[0]))

    with tempfile.TemporaryDirectory() as root:
        driver = BenchDriver(ray, Path(root), "bench-driver", K, False, lambda text: None, has_work=True)
        started = time.monotonic()
        driver.execute([f"task-{i}" for i in range(nodes)], nodes)
        wall = time.monotonic() - started
        ray.kill(driver.queue.actor)
        ray.kill(driver.stop_flag)
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000 if latencies else float("nan")

    return {"nodes": nodes, "offered": outcome["sent"] / seconds, "applied": outcome["applied"] / wall,
            "p50": pct(0.5), "p99": pct(0.99), "max": pct(1.0), "flush_timeouts": outcome["flush_timeouts"],
            "errors": outcome["errors"], "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="1,8,32,128")
    parser.add_argument("--seconds", type=float, default=40.0, help="each simulated task's length")
    parser.add_argument("--step-seconds", type=float, default=5.0, help="a rollout's time per step")
    parser.add_argument("--json", action="store_true", help="print only the rows, as JSON")
    args = parser.parse_args()
    counts = [int(n) for n in args.nodes.split(",")]
    rows = run_cluster(counts, args.seconds, args.step_seconds)
    if args.json:
        print(json.dumps(rows))
        return
    print(f"one driver, simulated nodes each running a K={K} task: a step every {args.step_seconds:g} s per "
          f"rollout, {len(STEP_WRITES)} writes a step; tasks of {args.seconds:g} s")
    print_rows(rows)


def run_cluster(counts: list[int], seconds: float, step_seconds: float) -> list[dict[str, Any]]:
    # Read by Ray once, when imported: a one-machine cluster stays on 127.0.0.1 instead of the machine's other
    # address (pipeline.run.ray.connect.import_ray says it for a run).
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from ray.cluster_utils import Cluster

    from pipeline.run.ray.connect import RESOURCE, connect

    cluster = Cluster(initialize_head=True, head_node_args={
        "node_ip_address": "127.0.0.1", "num_cpus": 2, "resources": {RESOURCE: K * max(counts)},
        "node_name": "head", "include_dashboard": False})
    try:
        ray = connect(cluster.address)
        groups = [node_group_class(ray).remote() for _ in range(GROUPS)]
        ray.get([group.__ray_ready__.remote() for group in groups])
        return [measure(ray, n, seconds, step_seconds, groups) for n in counts]
    finally:
        import ray as ray_module

        ray_module.shutdown()
        cluster.shutdown()


def print_rows(rows: list[dict[str, Any]], label: str = "") -> None:
    print(f"{'nodes':>5} {'offered/s':>10} {'applied/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'flush timeouts':>15}  {label}")
    for row in rows:
        print(f"{row['nodes']:>5} {row['offered']:>10.0f} {row['applied']:>10.0f} {row['p50']:>8.1f} "
              f"{row['p99']:>8.1f} {row['max']:>8.1f} {row['flush_timeouts']:>15}  {row.get('source', '')}"
              + (f"  errors: {row['errors']}" if row["errors"] else ""))


if __name__ == "__main__":
    main()
