"""The client side of the in-container command server (see command_server.py)."""

from __future__ import annotations

import json
import time
from importlib.resources import files

from docker.errors import DockerException

from pipeline.runtime.docker_stream import FrameReader, StreamClosed

# Outside /tmp, which read-only containers mount as tmpfs (hiding what the image has there).
SERVER_PATH = "/usr/local/share/swepipe/command_server.py"
SERVER_SOURCE = files("pipeline.runtime").joinpath("command_server.py").read_text()
START_TIMEOUT = 20.0


class SessionUnavailable(Exception):
    """The server could not start (no python3 in the image) or stopped answering."""


class CommandSession:
    def __init__(self, api, container_id: str, workdir: str, env: dict[str, str]):
        self._api = api
        try:
            exec_id = api.exec_create(container_id, ["python3", "-u", SERVER_PATH], stdin=True, workdir=workdir,
                                      environment=env)["Id"]
            stream = api.exec_start(exec_id, socket=True)
        except DockerException as error:
            raise SessionUnavailable(str(error)) from error
        self._reader = FrameReader(stream)
        try:
            hello = json.loads(self._reader.read_line(time.monotonic() + START_TIMEOUT))
        except (TimeoutError, StreamClosed, ValueError) as error:
            self._reader.close()
            reason = self._reader.stderr_tail.decode(errors="replace").strip() or repr(error)
            raise SessionUnavailable(f"command server did not start: {reason}") from None
        self.server_pid = hello["pid"]

    def request(self, command: str, timeout: float, limit: int | None, cwd: str,
                deadline: float) -> tuple[dict, bytes, bytes]:
        """Run one command; raises TimeoutError past ``deadline`` and StreamClosed if the server died."""
        line = json.dumps({"command": command, "timeout": timeout, "limit": limit, "cwd": cwd}).encode() + b"\n"
        self._reader.sock.settimeout(max(deadline - time.monotonic(), 0.1))
        self._reader.sock.sendall(line)
        header = json.loads(self._reader.read_line(deadline))
        head = self._reader.read_exactly(header["head_len"], deadline)
        tail = self._reader.read_exactly(header["tail_len"], deadline)
        return header, head, tail

    def close(self) -> None:
        self._reader.close()
