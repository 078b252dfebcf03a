"""Joining a Ray cluster for ``--executor ray``: Ray imported only here, a clear error when it is missing
or no cluster answers, loopback kept on loopback; the cluster's nodes and their labels."""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
from pathlib import Path

from pipeline import stopping
from pipeline.errors import SwepipeError


INSTALL_HINT = "pip install 'swepipe[ray]'"
START_HINT = ("start a cluster first: on the head node `ray start --head --node-ip-address=<its address> "
              "--resources='{\"docker_slots\": N}'` (N: the containers the node can hold; on one machine "
              "`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head --node-ip-address=127.0.0.1 "
              "--resources='{\"docker_slots\": N}'` keeps it on loopback), then `ray start --address=<head>:6379 "
              "--resources='{\"docker_slots\": N}'` on every other node")
CALL_TIMEOUT = 60.0  # seconds for one call to a run's actor (queue, budget, stop flag) before it is given up
RESOURCE = "docker_slots"
LOOPBACK = ("127.", "localhost", "::1", "[::1]")


def import_ray(address: str = "auto"):
    """The ray module (imported here only: the thread executor never needs it), or a clear error."""
    if _is_loopback(_resolve_auto(address) if address == "auto" else address):
        # Ray turns 127.0.0.1 into the machine's other address unless told it is a one-machine cluster;
        # a head started on 127.0.0.1 (tests, one machine) listens on loopback only, so stay there.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise SwepipeError(f"the ray executor needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


def connect(address: str = "auto"):
    """Join the cluster at ``address`` (auto: the one `ray start` began on this machine; host:port;
    ray://host:port); a clear error, within seconds, when none answers there."""
    ray = import_ray(address)
    if ray.is_initialized():
        return ray
    target = _resolve_auto(address) if address == "auto" else address
    if target is None:
        raise SwepipeError(f"no Ray cluster found on this machine (--ray-address auto); {START_HINT}, or give "
                           "--ray-address host:port or ray://host:port")
    host, port = _host_port(target)
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as error:
        raise SwepipeError(f"no Ray cluster answers at {target} ({error}); {START_HINT}") from None
    options: dict = {"address": target, "namespace": "swepipe", "log_to_driver": False,
                     "logging_level": "ERROR"}
    if not target.startswith("ray://") and _is_loopback(target):
        options["_node_ip_address"] = "127.0.0.1"
    try:
        ray.init(**options)
    except Exception as error:  # noqa: BLE001 - whatever Ray raises, the user needs the same advice
        raise SwepipeError(f"cannot join the Ray cluster at {target} ({type(error).__name__}: {error}); "
                           f"{START_HINT}") from None
    if stopping._installed:
        stopping.install(again=True)  # ray.init set its own SIGTERM handler, which would end the driver at once
    return ray


def _resolve_auto(address: str) -> str | None:
    if address != "auto":
        return address
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
    with contextlib.suppress(OSError):
        return current.read_text().strip() or None
    return None


def _host_port(address: str) -> tuple[str, int]:
    rest = address.removeprefix("ray://")
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        raise SwepipeError(f"--ray-address {address}: expected auto, host:port or ray://host:port")
    return host.strip("[]"), int(port)


def _is_loopback(address: str | None) -> bool:
    if not address:
        return False
    host = address.removeprefix("ray://").rpartition(":")[0] or address
    return host.startswith(LOOPBACK)


def alive_nodes(ray) -> list[dict]:
    return [node for node in ray.nodes() if node.get("Alive")]


def node_labels(nodes: list[dict]) -> dict[str, str]:
    """A short name per node id: its node name (by default its address), with the id's head when names repeat."""
    names = [node.get("NodeName") or node.get("NodeManagerAddress") or "?" for node in nodes]
    return {node["NodeID"]: name if names.count(name) == 1 else f"{name}:{node['NodeID'][:6]}"
            for node, name in zip(nodes, names)}


def head_affinity() -> dict:
    """Actor options that keep the run's actors on the head node (it lives as long as the cluster)."""
    return {"num_cpus": 0, "resources": {"node:__internal_head__": 0.001}, "max_restarts": 0}
