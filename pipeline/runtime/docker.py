"""Docker runtime: one container per workspace, commands run through `docker exec`."""

from __future__ import annotations

import io
import itertools
import socket
import struct
import tarfile
import time
from pathlib import PurePosixPath

import requests
from docker.errors import DockerException, NotFound

from pipeline.errors import RuntimeUnavailable
from pipeline.runtime import containers
from pipeline.runtime.base import CommandResult, diff_command, resolve_in
from pipeline.runtime.images import ensure_image, sanitised_image
from pipeline.runtime.output import DEFAULT_LIMIT, BoundedOutput

COMMAND_ENV = {"TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat", "PIP_PROGRESS_BAR": "off"}
# Past the command's own timeout (enforced inside the container by coreutils `timeout`), the
# client waits this long for the stream to close before it gives up on it.
CLIENT_GRACE = 10.0
_exec_ids = itertools.count()


class DockerRuntime:
    """A container of ``image`` that stays up (entrypoint overridden) until ``stop()``."""

    def __init__(self, image: str, base_commit: str, *, run_id: str, workdir: str = "/app",
                 network: bool = False, cpus: float | None = None, memory: str | None = None,
                 env: dict[str, str] | None = None, sanitise: bool = True, platform: str | None = None,
                 show_pull_progress: bool = True, extra_labels: dict[str, str] | None = None):
        self.base_commit = base_commit
        self.workdir = PurePosixPath(workdir)
        self._env = {**COMMAND_ENV, **(env or {})}
        self._client = containers.client()
        containers.install_cleanup_handlers()
        source = ensure_image(image, platform=platform, show_progress=show_pull_progress)
        start_from = sanitised_image(source, base_commit, workdir) if sanitise else source.id
        try:
            self.container = self._client.containers.run(
                start_from, entrypoint=["tail", "-f", "/dev/null"], command=[], detach=True,
                working_dir=workdir, network_disabled=not network, environment=self._env,
                labels=containers.labels(run_id, **(extra_labels or {})),
                nano_cpus=int(cpus * 1e9) if cpus else None, mem_limit=memory, platform=platform,
            )
        except DockerException as exc:
            raise RuntimeUnavailable(f"cannot start a container of {image}: {exc}") from exc
        containers.track(self.container)
        self._api = self._client.api

    def run(self, command: str, timeout: float = 60, output_limit: int | None = DEFAULT_LIMIT) -> CommandResult:
        pid_file = f"/tmp/.swepipe-exec-{next(_exec_ids)}.pid"
        # `timeout` makes itself a process-group leader and kills the whole group, so pipelines
        # and children die with the command; its pid on file lets the client kill the group too.
        wrapper = (f'timeout -k 2 {max(timeout, 0.1):.3f} bash -c "$1" < /dev/null & echo $! > {pid_file}; '
                   f'wait $!; status=$?; rm -f {pid_file}; exit $status')
        started = time.monotonic()
        try:
            exec_id = self._api.exec_create(self.container.id, ["bash", "-c", wrapper, "swepipe", command],
                                            workdir=str(self.workdir), environment=self._env)["Id"]
            stream = self._api.exec_start(exec_id, socket=True)
        except DockerException as exc:
            raise RuntimeUnavailable(f"cannot run a command in container {self.container.name}: {exc}") from exc
        output = BoundedOutput(output_limit)
        try:
            finished = _read_frames(stream, output, deadline=started + timeout + CLIENT_GRACE)
            timed_out = not finished
            if timed_out:
                self._kill_exec(pid_file)
            exit_code = self._exit_code(exec_id)
            if exit_code < 0 or exit_code >= 128:  # killed by a signal: perhaps with its container
                self._require_running()
        except (DockerException, OSError, requests.exceptions.RequestException) as exc:
            raise RuntimeUnavailable(f"container {self.container.name} stopped answering: {exc}") from exc
        duration = time.monotonic() - started
        if exit_code in (124, 137) and duration >= timeout:
            timed_out = True
        return CommandResult(exit_code=exit_code, output=output.text(), timed_out=timed_out,
                             duration=duration, total_bytes=output.total, cut_bytes=output.cut)

    def _require_running(self, grace: float = 1.0) -> None:
        """Raise if the container died; a kill takes a moment to show in its status, hence the grace."""
        deadline = time.monotonic() + grace
        while True:
            self.container.reload()
            if self.container.status != "running":
                raise RuntimeUnavailable(f"container {self.container.name} is no longer running "
                                         f"(status {self.container.status})")
            if time.monotonic() >= deadline:
                return
            time.sleep(0.1)

    def _exit_code(self, exec_id: str) -> int:
        for _ in range(50):
            info = self._api.exec_inspect(exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return info["ExitCode"]
            time.sleep(0.05)
        return -1

    def _kill_exec(self, pid_file: str) -> None:
        self._quiet(f'pid=$(cat {pid_file} 2>/dev/null) && kill -KILL -- -"$pid" 2>/dev/null; rm -f {pid_file}')

    def _quiet(self, command: str) -> None:
        try:
            self.container.exec_run(["bash", "-c", command])
        except DockerException:
            pass

    def read_file(self, path: str) -> bytes:
        target = resolve_in(self.workdir, path)
        try:
            chunks, _ = self.container.get_archive(str(target))
        except NotFound as exc:
            raise FileNotFoundError(f"{target} does not exist in container {self.container.name}") from exc
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
            member = archive.next()
            if member is None or not member.isfile():
                raise IsADirectoryError(f"{target} is not a regular file")
            return archive.extractfile(member).read()

    def write_file(self, path: str, data: bytes | str) -> None:
        target = resolve_in(self.workdir, path)
        payload = data.encode() if isinstance(data, str) else data
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            info = tarfile.TarInfo(target.name)
            info.size, info.mode, info.mtime = len(payload), 0o644, int(time.time())
            archive.addfile(info, io.BytesIO(payload))
        self._quiet(f"mkdir -p '{target.parent}'")
        if not self.container.put_archive(str(target.parent), buffer.getvalue()):
            raise RuntimeUnavailable(f"cannot write {target} in container {self.container.name}")

    def diff(self) -> str:
        result = self.run(diff_command(self.base_commit), timeout=300, output_limit=None)
        if not result.ok:
            raise RuntimeUnavailable(f"git diff failed in {self.container.name}: {result.output.strip()}")
        return result.output

    def stop(self) -> None:
        containers.remove(self.container)

    def __enter__(self) -> DockerRuntime:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _read_frames(stream, output: BoundedOutput, deadline: float) -> bool:
    """Copy the exec's multiplexed stdout/stderr frames into ``output`` until the stream ends.

    Returns False when the deadline passed first. Frames are read straight off the socket so a
    command printing hundreds of megabytes never sits in memory.
    """
    sock = getattr(stream, "_sock", stream)
    try:
        while True:
            header = _recv_exactly(sock, 8, deadline)
            if header is None:
                return True
            _, length = struct.unpack(">BxxxL", header)
            while length:
                chunk = _recv_some(sock, min(length, 1 << 16), deadline)
                if chunk is None:
                    return True
                output.feed(chunk)
                length -= len(chunk)
    except TimeoutError:
        return False
    finally:
        try:
            stream.close()
        except OSError:
            pass


def _recv_some(sock, size: int, deadline: float) -> bytes | None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    sock.settimeout(remaining)
    try:
        data = sock.recv(size)
    except socket.timeout as exc:
        raise TimeoutError from exc
    return data or None


def _recv_exactly(sock, size: int, deadline: float) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = _recv_some(sock, size - len(data), deadline)
        if chunk is None:
            return None
        data += chunk
    return data
