"""Docker runtime: one container per workspace.

Commands go to a small command server started in the container (one `docker exec` for the whole
session instead of one per command); images without python3 fall back to `docker exec` per command.
"""

from __future__ import annotations

import io
import itertools
import socket
import tarfile
import threading
import time
from pathlib import PurePosixPath
from typing import NamedTuple

import requests
from docker.errors import DockerException, NotFound

from pipeline.errors import ContainerDied, RuntimeUnavailable
from pipeline.runtime import containers
from pipeline.runtime.base import COMMAND_ENV, CommandResult, diff_command, read_diff, resolve_in
from pipeline.runtime.docker_session import SERVER_PATH, SERVER_SOURCE, CommandSession, SessionUnavailable
from pipeline.runtime.docker_stream import FrameReader, StreamClosed
from pipeline.runtime.limits import TMP_PATH, ContainerLimits, ResourceLimitHit, container_limits, with_disk_quota
from pipeline.runtime.output import DEFAULT_LIMIT, BoundedOutput, join_head_tail
from pipeline.runtime.seal import SEAL_LABEL, Seal
from pipeline.text import patchtext

# Past the command's own timeout (enforced inside the container by coreutils `timeout`), the
# client waits this long for the stream to close before it gives up on it.
CLIENT_GRACE = 10.0
_exec_ids = itertools.count()
_GO_MODE_DIR = 1 << 31  # os.ModeDir in the mode Docker reports for a path


class DockerRuntime:
    """A container of a prepared ``image`` that stays up (entrypoint overridden) until ``stop()``.

    ``image`` is used as it is: the image layer's ``prepare_image`` makes it available (and
    sanitised), and ``open_runtime`` (pipeline.runtime.factory) does both for a task.
    ``server_in_image`` says the image already carries the command server (sanitised images do).
    ``limits`` (pipeline.runtime.limits) bound what it may use; without them, the defaults for one
    container (``cpus`` and ``memory`` win). ``seal`` says how it was sealed (its image's record of what its
    sanitise step found: pipeline.runtime.seal) and whether it has the network.
    """

    def __init__(self, image: str, base_commit: str, *, run_id: str, workdir: str = "/app",
                 network: bool = False, cpus: float | None = None, memory: str | None = None,
                 env: dict[str, str] | None = None, platform: str | None = None,
                 extra_labels: dict[str, str] | None = None, command_server: bool = True,
                 server_in_image: bool = False, read_only: bool = False, limits: ContainerLimits | None = None):
        self.base_commit = base_commit
        self.workdir = PurePosixPath(workdir)
        self._env = {**COMMAND_ENV, **(env or {})}
        self._client = containers.client()
        containers.install_cleanup_handlers()
        self._server_in_image = server_in_image
        self.limits = limits or container_limits(_Sizes(cpus, memory))
        try:
            self.container = with_disk_quota(
                self._client.containers.run, self.limits, self._client,
                image=image, entrypoint=["tail", "-f", "/dev/null"], command=[], detach=True,
                working_dir=workdir, network_disabled=not network, environment=self._env,
                labels=containers.labels(run_id, **(extra_labels or {})), platform=platform,
                init=True,  # reaps the orphans that agents' background commands leave
                # Read-only: the repository and everything else refuse writes, even by root (/tmp is a tmpfs).
                read_only=read_only, **self.limits.docker_options(),
            )
        except DockerException as exc:
            raise RuntimeUnavailable(f"cannot start a container of {image}: {exc}") from exc
        containers.track(self.container)
        self._api = self._client.api
        self._lock = threading.Lock()  # guards the command servers below; no command runs under it
        self._sessions: list[CommandSession] = []  # every live command server, the first started first
        self._idle: list[CommandSession] = []  # those not running a command now
        self._use_session = command_server
        self.seal = self._found_seal()

    def _found_seal(self) -> Seal:
        """How this container is sealed: what the sanitise step found in its image's repository (kept with the
        image); an image no sanitise step of swepipe's made says so, and counts as not sealed."""
        config = self.container.attrs.get("Config") or {}
        seal = Seal.from_label((config.get("Labels") or {}).get(SEAL_LABEL))
        return seal.with_network(not config.get("NetworkDisabled", False), "docker")

    @property
    def _session(self) -> CommandSession | None:
        """The first live command server (None: not started yet, or the image has no python3)."""
        with self._lock:
            return self._sessions[0] if self._sessions else None

    def run(self, command: str, timeout: float = 60, output_limit: int | None = DEFAULT_LIMIT) -> CommandResult:
        """Run ``command`` in the workdir; through the command server when the image has python3.

        Calls from several threads run at once (a team's workers share one container): each takes an
        idle command server, or starts one more.
        """
        session = self._take_session()
        if session is None:
            return self._run_with_exec(command, timeout, output_limit)
        try:
            return self._run_in_session(session, command, timeout, output_limit)
        finally:
            self._give_back(session)

    def _give_back(self, session: CommandSession) -> None:
        with self._lock:
            if session in self._sessions:  # not dropped: ready for the next command
                self._idle.append(session)

    def _take_session(self) -> CommandSession | None:
        with self._lock:
            if self._idle:
                return self._idle.pop()
            if not self._use_session:
                return None
            try:
                if not self._server_in_image and not self._sessions:
                    self.write_file(SERVER_PATH, SERVER_SOURCE)
                session = CommandSession(self._api, self.container.id, str(self.workdir), self._env)
            except (SessionUnavailable, RuntimeUnavailable, DockerException):
                if not self._sessions:
                    self._use_session = False  # e.g. no python3 in the image: one `docker exec` per command
                return None
            self._sessions.append(session)
            return session

    def _run_in_session(self, session: CommandSession, command: str, timeout: float,
                        output_limit: int | None, *, probing: bool = False) -> CommandResult:
        started = time.monotonic()
        try:
            header, head, tail = session.request(command, timeout, output_limit, str(self.workdir),
                                                 deadline=started + timeout + CLIENT_GRACE)
        except TimeoutError:
            self._drop_session(kill=True, session=session)
            return CommandResult(-1, "", True, time.monotonic() - started, 0, 0)
        except (StreamClosed, OSError, ValueError, KeyError):
            self._drop_session(kill=False, session=session)
            self._require_running()
            stopped = CommandResult(-1, "[swepipe: the command server stopped during this command and was restarted]",
                                    False, time.monotonic() - started, 0, 0)
            if not probing:
                self._raise_if_limits_hit(stopped)
            return stopped
        exit_code = header["exit_code"]
        if (exit_code < 0 or exit_code >= 128) and not header["timed_out"]:  # perhaps its container died
            self._require_running()
        cut = header["total"] - len(head) - len(tail)
        result = CommandResult(exit_code=exit_code, output=join_head_tail(head, tail, cut),
                               timed_out=header["timed_out"], duration=time.monotonic() - started,
                               total_bytes=header["total"], cut_bytes=cut)
        if header.get("limits"):
            raise ResourceLimitHit(self._limit_message(header["limits"]), header["limits"], result)
        return result

    def _raise_if_limits_hit(self, stopped: CommandResult) -> None:
        """ResourceLimitHit when the container ran into its limits while its command server died under a command
        (the OOM killer's doing, say): a new server's first look at the counters tells, and kills what hit them."""
        session = self._take_session()
        if session is None:
            return
        try:
            self._run_in_session(session, "true", 30, 0, probing=True)
        except ResourceLimitHit as hit:
            raise ResourceLimitHit(str(hit), hit.limits, stopped) from None
        finally:
            self._give_back(session)

    def _limit_message(self, hit: list[str]) -> str:
        limits = self.limits.describe()
        what = {"pids": f"its process limit ({limits['pids']} processes and threads; a fork bomb?)",
                "memory": f"its memory limit ({limits['memory']}; a process was killed by the OOM killer)",
                "tmp": f"a full /tmp ({limits['tmp_size']}; emptied)",
                "file_size": f"the file-size limit ({limits['file_size']} per file)"}
        named = "; ".join(what.get(kind, kind) for kind in hit)
        return (f"the command ran into container {self.container.name}'s limits: {named}. "
                "What it started was killed.")

    def _drop_session(self, kill: bool, session: CommandSession | None = None) -> None:
        """Close a command server (by default the first) that failed; the next command starts another."""
        with self._lock:
            session = session or (self._sessions[0] if self._sessions else None)
            if session is None:
                return
            self._sessions = [s for s in self._sessions if s is not session]
            self._idle = [s for s in self._idle if s is not session]
        session.close()
        if kill:
            self._quiet(f"kill -KILL {session.server_pid}")

    def _run_with_exec(self, command: str, timeout: float, output_limit: int | None) -> CommandResult:
        pid_file = f"/tmp/.swepipe-exec-{next(_exec_ids)}.pid"
        # `timeout` makes itself a process-group leader and kills the whole group, so pipelines
        # and children die with the command; its pid on file lets the client kill the group too.
        wrapper = (f'timeout -k 2 {max(timeout, 0.1):.3f} bash -c "$1" < /dev/null & echo $! > {pid_file}; '
                   f'wait $!; status=$?; rm -f {pid_file}; exit $status')
        started = time.monotonic()
        try:
            exec_id = self._api.exec_create(self.container.id, ["bash", "-c", wrapper, "swepipe", command],
                                            workdir=str(self.workdir), environment=self._env)["Id"]
            reader = FrameReader(self._api.exec_start(exec_id, socket=True))
        except DockerException as exc:
            raise RuntimeUnavailable(f"cannot run a command in container {self.container.name}: {exc}") from exc
        output = BoundedOutput(output_limit)
        timed_out = False
        try:
            try:
                for chunk in reader.iter_payload(started + timeout + CLIENT_GRACE):
                    output.feed(chunk)
            except TimeoutError:
                timed_out = True
                self._kill_exec(pid_file)
            finally:
                reader.close()
            exit_code = self._exit_code(exec_id)
            if exit_code < 0 or exit_code >= 128:
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
            try:
                self.container.reload()
            except DockerException as exc:
                if isinstance(exc, NotFound):
                    raise ContainerDied(f"container {self.container.name} is gone: {exc}") from exc
                raise RuntimeUnavailable(f"container {self.container.name} cannot be inspected: {exc}") from exc
            if self.container.status != "running":
                raise ContainerDied(f"container {self.container.name} is no longer running "
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
        if _in_tmpfs(target):
            return self._read_through_exec(target)
        try:
            chunks, stat = self.container.get_archive(str(target))
        except NotFound as exc:
            raise FileNotFoundError(f"{target} does not exist in container {self.container.name}") from exc
        if stat and int(stat.get("mode") or 0) & _GO_MODE_DIR:  # before its whole tree is streamed and archived
            chunks.close()
            raise IsADirectoryError(f"{target} is a directory")
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
            member = archive.next()
            if member is None or not member.isfile():
                raise IsADirectoryError(f"{target} is not a regular file")
            reader = archive.extractfile(member)
            assert reader is not None  # a regular file's member always has a reader
            return reader.read()

    def write_file(self, path: str, data: bytes | str) -> None:
        target = resolve_in(self.workdir, path)
        payload = patchtext.to_bytes(data) if isinstance(data, str) else data
        if _in_tmpfs(target):
            self._write_through_exec(target, payload)
            return
        buffer = io.BytesIO()
        # Extracted at /, the tar's path creates missing parent folders without another exec.
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            info = tarfile.TarInfo(str(target).lstrip("/"))
            info.size, info.mtime = len(payload), int(time.time())
            # A tar entry replaces the file with its own mode and owner: an existing file keeps its own (an
            # executable script stays executable, and no mode change enters the diff).
            info.mode, info.uid, info.gid = self._mode_and_owner(target) or (0o644, 0, 0)
            archive.addfile(info, io.BytesIO(payload))
        try:
            written = self.container.put_archive("/", buffer.getvalue())
        except DockerException as exc:
            raise RuntimeUnavailable(f"cannot write {target} in container {self.container.name}: {exc}") from exc
        if not written:
            raise RuntimeUnavailable(f"cannot write {target} in container {self.container.name}")

    def _mode_and_owner(self, target: PurePosixPath) -> tuple[int, int, int] | None:
        """(permission bits, uid, gid) of the regular file at ``target``; None when there is none."""
        try:
            exit_code, output = self.container.exec_run(
                ["sh", "-c", '[ -f "$1" ] && [ ! -L "$1" ] && stat -c "%a %u %g" -- "$1"', "sh", str(target)])
        except DockerException as exc:
            raise RuntimeUnavailable(f"cannot look at {target} in container {self.container.name}: {exc}") from exc
        fields = (output or b"").split()
        if exit_code != 0 or len(fields) != 3:
            return None
        try:
            return int(fields[0], 8), int(fields[1]), int(fields[2])
        except ValueError:
            return None

    # The archive API reads and writes the container's layer, under a tmpfs mount (/tmp): there, a
    # process in the container does the reading and writing.

    def _read_through_exec(self, target: PurePosixPath) -> bytes:
        try:
            exit_code, (out, err) = self.container.exec_run(["cat", "--", str(target)], demux=True)
        except DockerException as exc:
            raise RuntimeUnavailable(f"cannot read {target} in container {self.container.name}: {exc}") from exc
        if exit_code != 0:
            problem = (err or b"").decode(errors="replace")
            if "Is a directory" in problem:
                raise IsADirectoryError(f"{target} is not a regular file")
            raise FileNotFoundError(f"{target} does not exist in container {self.container.name}: {problem.strip()}")
        return out or b""

    def _write_through_exec(self, target: PurePosixPath, payload: bytes) -> None:
        command = ['sh', '-c', 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", str(target)]
        try:
            exec_id = self._api.exec_create(self.container.id, command, stdin=True)["Id"]
            reader = FrameReader(self._api.exec_start(exec_id, socket=True))
        except DockerException as exc:
            raise RuntimeUnavailable(f"cannot write {target} in container {self.container.name}: {exc}") from exc
        try:
            reader.sock.settimeout(CLIENT_GRACE + len(payload) / 1e6)
            reader.sock.sendall(payload)
            reader.sock.shutdown(socket.SHUT_WR)
            for _ in reader.iter_payload(time.monotonic() + CLIENT_GRACE):
                pass
        except (OSError, TimeoutError) as exc:
            raise RuntimeUnavailable(f"cannot write {target} in container {self.container.name}: {exc}") from exc
        finally:
            reader.close()
        if self._exit_code(exec_id) != 0:
            raise RuntimeUnavailable(f"cannot write {target} in container {self.container.name}")

    def diff(self, max_bytes: int | None = None) -> str:
        return read_diff(self.run(diff_command(self.base_commit, max_bytes), timeout=300, output_limit=None),
                         self.container.name)

    def stop(self) -> None:
        with self._lock:
            sessions, self._sessions, self._idle = self._sessions, [], []
        for session in sessions:
            session.close()
        containers.remove(self.container)

    def __enter__(self) -> DockerRuntime:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class _Sizes(NamedTuple):
    """The two limits the constructor still takes directly, as container_limits reads a config."""

    cpus: float | None
    memory: str | None


def _in_tmpfs(target: PurePosixPath) -> bool:
    return target == PurePosixPath(TMP_PATH) or PurePosixPath(TMP_PATH) in target.parents
