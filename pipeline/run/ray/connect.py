"""Joining a Ray cluster for ``--executor ray``: Ray imported only here, a clear error when it is missing, no
cluster answers or the cluster refuses this machine's token, loopback kept on loopback; the cluster's nodes and
their labels."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path
from typing import Any, TypedDict

from pipeline.control import stopping
from pipeline.errors import InfrastructureFault, SwepipeError

INSTALL_HINT = "pip install 'swepipe[ray]'"
START_HINT = ("start a cluster first: on the head node `ray start --head --node-ip-address=<its address> "
              "--resources='{\"docker_slots\": N}'` (N: the containers the node can hold; on one machine "
              "`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head --node-ip-address=127.0.0.1 "
              "--resources='{\"docker_slots\": N}'` keeps it on loopback), then `ray start --address=<head>:6379 "
              "--resources='{\"docker_slots\": N}'` on every other node")
TOKEN_HINT = ("this machine needs the head's token: copy the head's ~/.ray/auth_token to ~/.ray/auth_token here (or "
              "anywhere, with RAY_AUTH_TOKEN_PATH naming it), or export RAY_AUTH_TOKEN=<what `ray get-auth-token` "
              "prints on the head>")
PROBE_TIMEOUT = 10.0  # seconds to wait for the head's answer to the authentication probe
CALL_TIMEOUT = 60.0  # seconds for one call to a run's actor (queue, budget, stop flag) before it is given up
RESOURCE = "docker_slots"
LOOPBACK = ("127.", "localhost", "::1", "[::1]")


def import_ray(address: str = "auto") -> Any:
    """The ray module (imported here only: the thread executor never needs it), or a clear error."""
    if _is_loopback(_auto_address()[0] if address == "auto" else address):
        # Ray turns 127.0.0.1 into the machine's other address unless told it is a one-machine cluster;
        # a head started on 127.0.0.1 (tests, one machine) listens on loopback only, so stay there.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise SwepipeError(f"the ray executor needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


def connect(address: str = "auto") -> Any:
    """Join the cluster at ``address`` (auto: the one `ray start` began on this machine; host:port;
    ray://host:port); a clear error, within seconds, when none answers there or it refuses this machine's token."""
    ray = import_ray(address)
    if ray.is_initialized():
        return ray
    target, found_in = (address, "") if address != "auto" else _auto_address()
    if target is None:
        raise SwepipeError(f"no Ray cluster found on this machine (--ray-address auto: RAY_ADDRESS is unset and "
                           f"{found_in} names none); {START_HINT}, or give --ray-address host:port or "
                           "ray://host:port")
    host, port = _host_port(target)
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as error:
        stale = (f", the address in {found_in} (--ray-address auto): the cluster `ray start` last began on this "
                 "machine is gone, stopped without `ray stop` (which removes that file); delete it"
                 if found_in.endswith(ADDRESS_FILE) else "")
        raise SwepipeError(f"no Ray cluster answers at {target} ({error}){stale}; {START_HINT}") from None
    options: dict[str, Any] = {"address": target, "namespace": "swepipe", "log_to_driver": False,
                               "logging_level": "ERROR"}
    if not target.startswith("ray://") and _is_loopback(target):
        options["_node_ip_address"] = "127.0.0.1"
    _send_token_if_any()
    if not target.startswith("ray://"):
        _check_token(ray, target)
    try:
        ray.init(**options)
    except InfrastructureFault:
        raise
    except Exception as error:  # noqa: BLE001 - whatever Ray raises, the user needs the same advice
        raise SwepipeError(f"cannot join the Ray cluster at {target} ({type(error).__name__}: {error}); "
                           f"{START_HINT}") from None
    if stopping._installed:
        stopping.install(again=True)  # ray.init set its own SIGTERM handler, which would end the driver at once
    return ray


ADDRESS_FILE = "ray_current_cluster"


def _auto_address() -> tuple[str | None, str]:
    """The cluster ``auto`` means, as Ray finds it (RAY_ADDRESS, else the address file of Ray's temporary
    directory, which `ray start` writes and `ray stop` removes), and where it was found."""
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"], "RAY_ADDRESS"
    # ray._common.utils.get_default_system_temp_dir: RAY_TMPDIR, else TMPDIR, else /tmp
    temp = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    current = Path(temp) / "ray" / ADDRESS_FILE
    with contextlib.suppress(OSError):
        return current.read_text().strip() or None, str(current)
    return None, str(current)


def _send_token_if_any() -> None:
    """Ray (2.60) starts a head with token authentication when the head has a token, but a driver given an
    address sends none unless RAY_AUTH_MODE=token: send this machine's token whenever it has one, as Ray itself
    does for ``auto`` (a cluster without authentication ignores it). RAY_AUTH_MODE, when set, is obeyed."""
    try:
        from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available
    except ImportError:  # a Ray without token authentication
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def _check_token(ray: Any, target: str) -> None:
    """Ask the head once whether it takes this machine's token: ray.init would retry for 20 s and then say only
    that it could not connect. Anything but a refusal is left to ray.init."""
    try:
        from ray._raylet import GcsClient  # type: ignore[attr-defined]  # ray's _raylet.pyi omits it; the module has it
    except ImportError:
        return
    answer: list[BaseException | None] = []

    def probe() -> None:
        try:
            GcsClient(address=target)
            answer.append(None)
        except BaseException as error:  # noqa: BLE001 - sorted below
            answer.append(error)

    asker = threading.Thread(target=probe, name="ray auth probe", daemon=True)  # a silent listener blocks it
    asker.start()
    asker.join(PROBE_TIMEOUT)
    refused = answer[0] if answer else None
    if not isinstance(refused, getattr(ray.exceptions, "AuthenticationError", ())):
        return
    mode = os.environ.get("RAY_AUTH_MODE", "")
    if mode.lower() == "token":
        source = ("RAY_AUTH_TOKEN" if os.environ.get("RAY_AUTH_TOKEN") else
                  os.environ.get("RAY_AUTH_TOKEN_PATH") or "~/.ray/auth_token")
        why = f"it refused this machine's token (from {source}), which is not the head's"
    elif mode:
        why = f"this machine sends no token (RAY_AUTH_MODE={mode}; unset it)"
    else:
        why = "this machine has no token (none in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)"
    raise SwepipeError(f"the Ray cluster at {target} requires token authentication and {why}; {TOKEN_HINT}")


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


def alive_nodes(ray: Any) -> list[dict[str, Any]]:
    return [node for node in ray.nodes() if node.get("Alive")]


def node_labels(nodes: list[dict[str, Any]]) -> dict[str, str]:
    """A short name per node id: its node name (by default its address), with the id's head when names repeat."""
    names = [node.get("NodeName") or node.get("NodeManagerAddress") or "?" for node in nodes]
    return {node["NodeID"]: name if names.count(name) == 1 else f"{name}:{node['NodeID'][:6]}"
            for node, name in zip(nodes, names, strict=True)}


class ActorOptions(TypedDict):
    """The Ray options a run's actors are made with."""

    num_cpus: int
    resources: dict[str, float]
    max_restarts: int


def head_affinity() -> ActorOptions:
    """Actor options that keep the run's actors on the head node (it lives as long as the cluster)."""
    return {"num_cpus": 0, "resources": {"node:__internal_head__": 0.001}, "max_restarts": 0}
