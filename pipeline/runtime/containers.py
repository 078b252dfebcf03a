"""Every container swepipe starts is labelled and tracked, so none outlives the run.

Containers are removed when their runtime stops, when the process exits, on SIGINT/SIGTERM, and
(for anything left by a killed process) by ``swepipe cleanup``, which finds them by label.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading

import docker
from docker.errors import DockerException, NotFound

from pipeline.errors import RuntimeUnavailable

LABEL = "swepipe"
RUN_LABEL = "swepipe.run_id"
SANITISED_REPOSITORY = "swepipe-sanitised"

_live: dict[str, docker.models.containers.Container] = {}
# Set when the process is being interrupted: work cut short then must not be recorded as a result.
shutting_down = threading.Event()
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
    return {LABEL: "1", RUN_LABEL: run_id, "swepipe.owner_pid": str(os.getpid()), **extra}


def track(container) -> None:
    with _lock:
        _live[container.id] = container


def remove(container) -> None:
    """Force-remove a container, quietly if it is already gone."""
    with _lock:
        _live.pop(container.id, None)
    try:
        container.remove(force=True)
    except NotFound:
        pass
    except DockerException:
        pass  # the engine went away; `swepipe cleanup` finds it by label later


def remove_all_tracked() -> int:
    with _lock:
        doomed = list(_live.values())
    for container in doomed:
        remove(container)
    return len(doomed)


def remove_labelled(run_id: str | None = None) -> list[str]:
    """Remove every swepipe container (of one run, when given); returns their names."""
    wanted = [f"{RUN_LABEL}={run_id}"] if run_id else [LABEL]
    found = client().containers.list(all=True, filters={"label": wanted})
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


_installed = False


def install_cleanup_handlers() -> None:
    """Remove tracked containers at exit and on SIGINT/SIGTERM, then let the signal do its work."""
    global _installed
    if _installed:
        return
    _installed = True
    atexit.register(remove_all_tracked)
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(signum)

        def handler(sig, frame, previous=previous):
            shutting_down.set()
            remove_all_tracked()
            if callable(previous):
                previous(sig, frame)
            elif sig == signal.SIGINT:
                raise KeyboardInterrupt
            else:
                sys.exit(128 + sig)

        signal.signal(signum, handler)
