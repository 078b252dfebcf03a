"""A local Ray cluster for tests, every node on 127.0.0.1 (the `cluster` fixture of conftest): a head that runs
the run's actors and offers no docker slots, and two nodes with SLOTS docker_slots each."""

from __future__ import annotations

import contextlib
import re
import subprocess
from pathlib import Path

from leftovers import no_containers_left, scratch_left  # noqa: F401 - the cluster tests' checks

SLOTS = 2  # per node: one task of k = 2 juniors at a time
NODES = ("node-b", "node-c")


@contextlib.contextmanager
def local_cluster():
    from ray.cluster_utils import Cluster

    local = Cluster(initialize_head=True, head_node_args={
        "node_ip_address": "127.0.0.1", "num_cpus": 1, "resources": {"docker_slots": 0}, "node_name": "head",
        "include_dashboard": False})
    try:
        for name in NODES:
            local.add_node(node_ip_address="127.0.0.1", num_cpus=1, resources={"docker_slots": SLOTS},
                           node_name=name)
        local.wait_for_nodes()
        yield local
    finally:
        local.shutdown()


def cluster_pids(cluster) -> set[int]:
    """The pids of the cluster's processes and all their descendants."""
    roots = {info.process.pid for node in cluster.list_all_nodes()
             for infos in node.all_processes.values() for info in infos if info.process is not None}
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, grew = set(roots), True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in found} - found
        found |= more
        grew = bool(more)
    return found


def listening(pids: set[int]) -> list[str]:
    """Local addresses the cluster's processes listen on (TCP and UDP)."""
    out = subprocess.run(["ss", "-H", "-ltunp"], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        owners = {int(pid) for pid in re.findall(r"pid=(\d+)", line)}
        if owners & pids:
            found.append(line.split()[4])
    return found
