"""Every container swepipe starts is labelled and tracked, so none outlives the run.

Containers are removed when their runtime stops, when the process exits, on SIGINT/SIGTERM, and
(for anything left by a killed process) by ``swepipe cleanup``, which finds them by label.
"""

from __future__ import annotations

import atexit
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
from docker.errors import DockerException, NotFound

from pipeline.control import stopping
from pipeline.errors import InfrastructureFault, RuntimeUnavailable, is_transport_error

LABEL = "swepipe"
RUN_LABEL = "swepipe.run_id"
OWNER_LABEL = "swepipe.owner"  # host:pid:start of the process that started it (``remove_orphans``)
SESSION_LABEL = "swepipe.session"  # the cluster session (a Ray driver's nonce) a node started it for
SANITISED_REPOSITORY = "swepipe-sanitised"

_live: dict[str, docker.models.containers.Container] = {}
_session: dict[str, str] = {}  # SESSION_LABEL for the containers this process starts (pipeline.run.ray.node)
_lock = threading.Lock()
_client: docker.DockerClient | None = None


def client() -> docker.DockerClient:
    """One shared client; a clear error when no Docker engine answers."""
    global _client
    if _client is None:
        try:
            candidate = docker.from_env(timeout=120)
            candidate.ping()
        except DockerException as exc:
            raise RuntimeUnavailable(
                f"no Docker engine answers ({exc}). Start one (e.g. `dockerd &` as root) "
                "or set DOCKER_HOST, then retry."
            ) from exc
        _client = candidate
    return _client


def labels(run_id: str, **extra: str) -> dict[str, str]:
    return {LABEL: "1", RUN_LABEL: run_id, **_session, "swepipe.owner_pid": str(os.getpid()),
            OWNER_LABEL: _owner(os.getpid()), **extra}


def _owner(pid: int) -> str:
    """``host:pid:start``: the process on this host, told apart from a later one given the same pid."""
    return f"{socket.gethostname()}:{pid}:{_start_time(pid)}"


def _start_time(pid: int) -> str:
    """The process's start (in clock ticks since boot, /proc/<pid>/stat field 22); "" where there is no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat[stat.rfind(")") + 2:].split()  # after the command name, which may hold spaces and parentheses
    return fields[19] if len(fields) > 19 else ""


def owner_gone(owner: str) -> bool:
    """Whether the process named by an OWNER_LABEL value has ended; False when that cannot be known here (another
    host, a label this version did not write)."""
    host, _, rest = owner.partition(":")
    pid, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit() or not start:
        return False
    return _start_time(int(pid)) != start


def remove_orphans(run_id: str) -> list[str]:
    """Remove the containers of run ``run_id`` whose process on this host died without removing them (kill -9,
    the OOM killer), as a resumed run starts; a live session's containers, or another host's, are left alone."""
    found = client().containers.list(all=True, filters={"label": [f"{RUN_LABEL}={run_id}"]}, ignore_removed=True)
    orphans = [c for c in found if owner_gone((c.labels or {}).get(OWNER_LABEL, ""))]
    for container in orphans:
        remove(container)
    return [c.name for c in orphans]


def set_session(session: str | None) -> None:
    """Label the containers this process starts from now on with a cluster session (None: no more), so that
    session's cleanup removes them and never those of another driver's run of the same id."""
    _session.clear()
    if session:
        _session[SESSION_LABEL] = session


def track(container) -> None:
    """Remember ``container`` for removal; one started while the run is stopping is removed at once."""
    with _lock:
        _live[container.id] = container
    if stopping.requested():
        remove(container)
        raise stopping.Stopped("the run is stopping")


def remove(container) -> None:
    """Force-remove a container, quietly if it is already gone."""
    with _lock:
        _live.pop(container.id, None)
    try:
        container.remove(force=True)
    except NotFound:
        pass
    except InfrastructureFault:
        raise
    except Exception as error:
        if not isinstance(error, DockerException) and not is_transport_error(error):
            raise
        # The engine went away: tried again by the stop's or the exit's cleanup; `swepipe cleanup` finds it by
        # label too.
        with _lock:
            _live[container.id] = container


def remove_all_tracked() -> int:
    """Remove every container this process started and has not removed yet, several at a time."""
    with _lock:
        doomed = list(_live.values())
    if len(doomed) > 1:
        try:
            with ThreadPoolExecutor(max_workers=min(8, len(doomed)), thread_name_prefix="remove") as pool:
                list(pool.map(remove, doomed))
            return len(doomed)
        except RuntimeError:  # at exit, once the interpreter stops new threads (atexit runs after that): one by one
            pass
    for container in doomed:
        remove(container)
    return len(doomed)


def remove_labelled(run_id: str | None = None, session: str | None = None) -> list[str]:
    """Remove every swepipe container (of one run, and of one cluster session of it, when given: labels match
    exactly); returns their names."""
    wanted = [f"{RUN_LABEL}={run_id}"] if run_id else [LABEL]
    if session:
        wanted.append(f"{SESSION_LABEL}={session}")
    found = client().containers.list(all=True, filters={"label": wanted}, ignore_removed=True)  # others remove too
    for container in found:
        remove(container)
    return [c.name for c in found]


def remove_sanitised_images() -> list[str]:
    images = client().images.list(name=SANITISED_REPOSITORY)
    removed = []
    for image in images:
        for tag in image.tags:
            try:
                client().images.remove(tag, force=True)
                removed.append(tag)
            except NotFound:
                pass
    return removed


_registered = False


def install_cleanup_handlers() -> None:
    """Remove tracked containers at exit and when the run is stopped (the signals: pipeline.control.stopping)."""
    global _registered
    if not _registered:
        _registered = True
        atexit.register(remove_all_tracked)
        stopping.on_stop(remove_all_tracked)
