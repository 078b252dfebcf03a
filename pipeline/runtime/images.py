"""Task image names, pulling a missing image with progress, and the sanitised image cache."""

from __future__ import annotations

import hashlib
import string
import threading
import time

from docker.errors import APIError, DockerException, ImageNotFound
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

from pipeline.errors import RuntimeUnavailable, SwepipeError
from pipeline.runtime import containers
from pipeline.runtime.docker_session import SERVER_PATH, SERVER_SOURCE
from pipeline.runtime.sanitise import SANITISE_SCRIPT

def image_name(template: str, fields: dict[str, str]) -> str:
    """Fill ``template`` from a task's fields, e.g. ``jefzda/sweap-images:{dockerhub_tag}``."""
    names = {name for _, name, _, _ in string.Formatter().parse(template) if name}
    missing = sorted(n for n in names if not fields.get(n))
    if missing:
        raise SwepipeError(
            f"image template {template!r} uses {', '.join(missing)}, which the task "
            f"{fields.get('instance_id', '?')} does not have; fix --image-template"
        )
    return template.format(**fields)


def ensure_image(name: str, platform: str | None = None, show_progress: bool = True):
    """The local image ``name``, pulled first (with a progress bar) when it is missing."""
    docker_client = containers.client()
    try:
        return docker_client.images.get(name)
    except ImageNotFound:
        pass
    repository, _, tag = name.rpartition(":") if ":" in name.split("/")[-1] else (name, "", "latest")
    try:
        _pull(repository, tag or "latest", platform, show_progress)
        return docker_client.images.get(name)
    except DockerException as exc:
        raise RuntimeUnavailable(
            f"image {name} is not available locally and could not be pulled ({exc}). "
            "Build it (bundled tasks: `swepipe images build`), or check --image-template and --platform."
        ) from exc


def _pull(repository: str, tag: str, platform: str | None, show_progress: bool) -> None:
    layers: dict[str, tuple[int, int]] = {}
    with Progress(TextColumn(f"pulling {repository}:{tag}"), BarColumn(), DownloadColumn(),
                  TimeElapsedColumn(), disable=not show_progress, transient=True) as progress:
        bar = progress.add_task("pull", total=None)
        for event in containers.client().api.pull(repository, tag=tag, platform=platform,
                                                  stream=True, decode=True):
            if "error" in event:
                raise APIError(event["error"])
            detail = event.get("progressDetail") or {}
            if event.get("id") and detail.get("total"):
                layers[event["id"]] = (detail.get("current", 0), detail["total"])
                progress.update(bar, completed=sum(c for c, _ in layers.values()),
                                total=sum(t for _, t in layers.values()))


_sanitise_locks: dict[str, threading.Lock] = {}
_sanitise_locks_guard = threading.Lock()


def sanitised_image(image, base_commit: str, workdir: str = "/app", timeout: float = 3600) -> str:
    """An image of ``image`` whose repository holds nothing newer than ``base_commit``.

    Sanitising rewrites the repository's history store, which costs seconds to minutes on a
    large repository, so it is done once per (image, base commit) and committed as an image that
    every rollout of the task starts from.
    """
    key = hashlib.sha256(f"{image.id}\0{base_commit}\0{SANITISE_SCRIPT}\0{SERVER_PATH}\0{SERVER_SOURCE}".encode()).hexdigest()[:24]
    name = f"{containers.SANITISED_REPOSITORY}:{key}"
    with _sanitise_locks_guard:
        lock = _sanitise_locks.setdefault(name, threading.Lock())
    with lock:
        try:
            containers.client().images.get(name)
            return name
        except ImageNotFound:
            pass
        from pipeline.runtime.docker import DockerRuntime  # the runtime module imports this one

        started = time.monotonic()
        scratch = DockerRuntime(image.id, base_commit, run_id="sanitise", workdir=workdir, sanitise=False)
        try:
            scratch.write_file("/tmp/swepipe-sanitise.sh", SANITISE_SCRIPT)
            scratch.write_file(SERVER_PATH, SERVER_SOURCE)
            result = scratch.run(f"bash /tmp/swepipe-sanitise.sh {base_commit}; status=$?; "
                                 "rm -f /tmp/swepipe-sanitise.sh; exit $status",
                                 timeout=timeout, output_limit=None)
            if not result.ok:
                raise RuntimeUnavailable(
                    f"cannot sanitise the repository at {workdir} in {image.tags or image.id} "
                    f"for base commit {base_commit}: {result.output.strip()[-2000:]}"
                )
            scratch.container.commit(
                repository=containers.SANITISED_REPOSITORY, tag=key,
                conf={"Labels": {containers.LABEL: "1", "swepipe.source_image": image.id,
                                 "swepipe.base_commit": base_commit,
                                 "swepipe.sanitise_seconds": f"{time.monotonic() - started:.1f}"}},
            )
        finally:
            scratch.stop()
        return name
