"""A task's image made ready: a missing image pulled with progress (a registry's rate limit retried), and the
sanitised image cache. Names and registries are ``names``; disk, preflight, pruning and prefetch have their modules.

``prepare_image`` gives the image a task's container starts from; it starts no runtime itself (its
scratch container for sanitising is driven through the Docker SDK directly).
"""

from __future__ import annotations

import hashlib
import io
import random
import tarfile
import threading
import time

from docker.errors import APIError, DockerException
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

from pipeline.control import stopping
from pipeline.errors import RuntimeUnavailable
from pipeline.runtime import containers
from pipeline.runtime.base import COMMAND_ENV
from pipeline.runtime.docker_session import SERVER_PATH, SERVER_SOURCE
from pipeline.runtime.docker_stream import FrameReader
from pipeline.runtime.images.disk import touch
from pipeline.runtime.images.names import error_text, local_image, rate_limited, registry_host
from pipeline.runtime.limits import ContainerLimits, container_limits, with_disk_quota
from pipeline.runtime.output import BoundedOutput
from pipeline.runtime.sanitise import SANITISE_SCRIPT
from pipeline.runtime.seal import SEAL_LABEL, SEAL_SCRIPT, found

PULL_ATTEMPTS = 5  # tries of a pull a registry answers with its rate limit (429); other errors are not retried
PULL_BACKOFF = 5.0  # seconds before the second try, doubled for each one after, times a jitter in [0.5, 1]
PULL_MAX_WAIT = 60.0  # the longest one wait may be

_pull_locks: dict[str, threading.Lock] = {}  # image name -> held while it is pulled (by a task or a prefetch)
_pull_locks_guard = threading.Lock()


def ensure_image(name: str, platform: str | None = None, show_progress: bool = True, *,
                 attempts: int | None = None):
    """The local image ``name``, pulled first (with a progress bar) when it is missing.

    One pull of an image at a time in this process: a task that needs an image being pulled (by another task or
    by a prefetch) waits for that pull (a stop cuts the wait short) and pulls it itself only if it failed. A
    registry's rate limit is retried ``attempts`` times in all (``pull_image``).
    """
    found = local_image(name)
    if found is not None:
        return found
    with _pull_locks_guard:
        lock = _pull_locks.setdefault(name, threading.Lock())
    while not lock.acquire(timeout=0.2):
        stopping.check()
    try:
        found = local_image(name)  # pulled meanwhile
        if found is not None:
            return found
        pull_image(name, platform, show_progress=show_progress, attempts=attempts)
        try:
            return containers.client().images.get(name)
        except DockerException as exc:
            raise RuntimeUnavailable(f"image {name} was pulled but cannot be found ({exc}); check --platform") from exc
    finally:
        lock.release()


def pull_image(name: str, platform: str | None = None, *, show_progress: bool = False, attempts: int | None = None,
               backoff: float | None = None, max_wait: float | None = None) -> None:
    """Pull ``name`` through the Docker engine, with the user's `docker login` credentials (the SDK sends those
    of ``~/.docker/config.json``, ``$DOCKER_CONFIG``, its credential store or helpers, for the image's registry).

    A pull the registry refuses for its rate limit is tried ``attempts`` times in all, waiting exponentially
    longer between tries (with jitter, each wait at most ``max_wait``; a stop ends the wait with ``Stopped``);
    then, or at once for any other error, RuntimeUnavailable says why and what to do.
    """
    attempts = max(1, PULL_ATTEMPTS if attempts is None else attempts)
    backoff = PULL_BACKOFF if backoff is None else backoff
    max_wait = PULL_MAX_WAIT if max_wait is None else max_wait
    repository, _, tag = name.rpartition(":") if ":" in name.split("/")[-1] else (name, "", "latest")
    waited = 0.0
    for attempt in range(1, attempts + 1):
        stopping.check()
        try:
            _pull(repository, tag or "latest", platform, show_progress)
            return
        except DockerException as exc:
            if not rate_limited(exc):
                raise RuntimeUnavailable(
                    f"image {name} is not available locally and could not be pulled ({exc}). "
                    "Build it (bundled tasks: `swepipe images build`), or check --image-template and --platform."
                ) from exc
            if attempt == attempts:
                host = registry_host(name)
                login = "`docker login`" if host == "docker.io" else f"`docker login {host}`"
                raise RuntimeUnavailable(
                    f"image {name}: the registry {host} refused the pull with its rate limit (429 too many "
                    f"requests: {error_text(exc, 300)}), {attempts} time(s) over {waited:.0f} s of waiting. {login} on "
                    "every machine that pulls (an account's limit is higher than an anonymous one), or point "
                    "--image-template at a registry mirror or a private registry that holds the images, then run "
                    "the command again"
                ) from exc
            wait = min(max_wait, backoff * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
            if stopping.STOP.wait(wait):
                raise stopping.Stopped("the run is stopping") from exc
            waited += wait


def _pull(repository: str, tag: str, platform: str | None, show_progress: bool) -> None:
    layers: dict[str, tuple[int, int]] = {}
    # the image's name as the task's description: in the column's format it would be read as a format string
    with Progress(TextColumn("pulling {task.description}", markup=False), BarColumn(), DownloadColumn(),
                  TimeElapsedColumn(), disable=not show_progress, transient=True) as progress:
        bar = progress.add_task(f"{repository}:{tag}", total=None)
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
# Outside /tmp, a tmpfs that the archive API cannot write into; the script's own scratch space (TMPDIR) is on
# the container's layer too, next to the repository, so its fresh history moves into place without a copy.
_SCRIPT_PATH = "/usr/local/share/swepipe/sanitise.sh"
_SEAL_PATH = "/usr/local/share/swepipe/seal.sh"
_SCRATCH_TMP = "/usr/local/share/swepipe/tmp"
# Past the script's own timeout (enforced in the container by coreutils `timeout`), how long the
# client waits for the exec's stream to close.
_CLIENT_GRACE = 10.0


def prepare_image(name: str, base_commit: str, *, platform: str | None = None, workdir: str = "/app",
                  sanitise: bool = True, show_progress: bool = False, limits: ContainerLimits | None = None) -> str:
    """The image a task's container should start from: ``name`` made available locally and, when
    ``sanitise``, its cached sanitised image (which also carries the command server)."""
    source = ensure_image(name, platform=platform, show_progress=show_progress)
    touch(source.id)  # least recently used first, when the image cache is pruned
    if not sanitise:
        return source.id
    sanitised = sanitised_image(source, base_commit, workdir, limits=limits)
    touch(sanitised)
    return sanitised


def sanitised_image(image, base_commit: str, workdir: str = "/app", timeout: float = 3600,
                    limits: ContainerLimits | None = None) -> str:
    """An image of ``image`` whose repository holds nothing newer than ``base_commit``.

    Sanitising rewrites the repository's history store, which costs seconds to minutes on a
    large repository, so it is done once per (image, base commit) and committed as an image that
    every rollout of the task starts from. What the repository holds once it is done (``seal.sh``: commits, refs,
    remotes, reflogs, objects beyond HEAD) is the image's ``SEAL_LABEL``, which its containers report.
    """
    identity = f"{image.id}\0{base_commit}\0{SANITISE_SCRIPT}\0{SEAL_SCRIPT}\0{SERVER_PATH}\0{SERVER_SOURCE}"
    key = hashlib.sha256(identity.encode()).hexdigest()[:24]
    name = f"{containers.SANITISED_REPOSITORY}:{key}"
    with _sanitise_locks_guard:
        lock = _sanitise_locks.setdefault(name, threading.Lock())
    with lock:
        if local_image(name) is not None:
            return name
        started = time.monotonic()
        docker_client = containers.client()
        containers.install_cleanup_handlers()
        limits = limits or container_limits()
        try:
            # The agents' limits, but no file-size limit: the script writes the whole history as one pack.
            scratch = with_disk_quota(
                docker_client.containers.run, limits, docker_client,
                image=image.id, entrypoint=["tail", "-f", "/dev/null"], command=[], detach=True, working_dir=workdir,
                network_disabled=True, environment=COMMAND_ENV, labels=containers.labels("sanitise"), init=True,
                **limits.docker_options(file_size=False),
            )
        except DockerException as exc:
            raise RuntimeUnavailable(f"cannot start a container of {image.id}: {exc}") from exc
        containers.track(scratch)
        try:
            _put_files(scratch, {_SCRIPT_PATH: SANITISE_SCRIPT, _SEAL_PATH: SEAL_SCRIPT, SERVER_PATH: SERVER_SOURCE})
            limit = f"timeout -k 2 {max(timeout, 0.1):.3f}"
            exit_code, output, timed_out = _exec(
                scratch, f"mkdir -p {_SCRATCH_TMP} && TMPDIR={_SCRATCH_TMP} {limit} bash {_SCRIPT_PATH} {base_commit} "
                         f"&& {limit} bash {_SEAL_PATH}; status=$?; "
                         f"rm -rf {_SCRIPT_PATH} {_SEAL_PATH} {_SCRATCH_TMP}; exit $status", workdir,
                timeout + _CLIENT_GRACE)
            if exit_code != 0 or timed_out:
                note = f" (timed out after {timeout:.0f} s)" if timed_out else ""
                raise RuntimeUnavailable(
                    f"cannot sanitise the repository at {workdir} in {image.tags or image.id} "
                    f"for base commit {base_commit}{note}: {output.strip()[-2000:]}"
                )
            scratch.commit(
                repository=containers.SANITISED_REPOSITORY, tag=key,
                conf={"Labels": {containers.LABEL: "1", "swepipe.source_image": image.id,
                                 "swepipe.base_commit": base_commit, SEAL_LABEL: found(output, True).label(),
                                 "swepipe.sanitise_seconds": f"{time.monotonic() - started:.1f}"}},
            )
        except DockerException as exc:
            raise RuntimeUnavailable(f"cannot sanitise {image.tags or image.id} for base commit "
                                     f"{base_commit}: {exc}") from exc
        finally:
            containers.remove(scratch)
        return name


def _put_files(container, files: dict[str, str]) -> None:
    """Write text files at absolute paths in ``container`` (missing folders created) in one archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path, text in files.items():
            payload = text.encode()
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(payload), 0o644, int(time.time())
            archive.addfile(info, io.BytesIO(payload))
    if not container.put_archive("/", buffer.getvalue()):
        raise RuntimeUnavailable(f"cannot write {', '.join(files)} in container {container.name}")


def _exec(container, command: str, workdir: str, wait: float) -> tuple[int, str, bool]:
    """Run ``command`` with bash in ``container``: its exit code, merged output (tail kept) and whether
    the client gave up waiting for it after ``wait`` seconds."""
    api = containers.client().api
    exec_id = api.exec_create(container.id, ["bash", "-c", command], workdir=workdir,
                              environment=COMMAND_ENV)["Id"]
    reader = FrameReader(api.exec_start(exec_id, socket=True))
    output = BoundedOutput(64_000)  # the tail: seal.sh's lines, one per repository
    try:
        for chunk in reader.iter_payload(time.monotonic() + wait):
            output.feed(chunk)
    except TimeoutError:
        return -1, output.text(), True
    except OSError as exc:
        raise RuntimeUnavailable(f"container {container.name} stopped answering: {exc}") from exc
    finally:
        reader.close()
    for _ in range(100):
        info = api.exec_inspect(exec_id)
        if not info.get("Running") and info.get("ExitCode") is not None:
            exit_code = info["ExitCode"]
            return exit_code, output.text(), exit_code == 124
        time.sleep(0.05)
    return -1, output.text(), False
