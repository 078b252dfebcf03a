"""Reading the multiplexed stdout/stderr frames of a `docker exec` socket, with a deadline."""

from __future__ import annotations

import socket
import struct
import time

STDOUT, STDERR = 1, 2


class StreamClosed(Exception):
    """The exec's stream ended."""


class FrameReader:
    """Pulls frames off the raw socket; stdout bytes are buffered for line/exact reads."""

    def __init__(self, stream):
        self.stream = stream
        self.sock = getattr(stream, "_sock", stream)
        self._stdout = bytearray()
        self.stderr_tail = bytearray()  # for diagnostics only

    def next_frame(self, deadline: float) -> tuple[int, bytes]:
        """One (stream id, payload) pair; TimeoutError past the deadline, StreamClosed at the end."""
        header = self._recv_exactly(8, deadline)
        kind, length = struct.unpack(">BxxxL", header)
        return kind, self._recv_exactly(length, deadline) if length else b""

    def iter_payload(self, deadline: float):
        """Every payload chunk until the stream ends, read in pieces so nothing big is held."""
        while True:
            try:
                header = self._recv_exactly(8, deadline)
            except StreamClosed:
                return
            _, length = struct.unpack(">BxxxL", header)
            while length:
                chunk = self._recv_some(min(length, 1 << 16), deadline)
                yield chunk
                length -= len(chunk)

    def read_line(self, deadline: float) -> bytes:
        while b"\n" not in self._stdout:
            self._fill(deadline)
        line, _, rest = bytes(self._stdout).partition(b"\n")
        self._stdout[:] = rest
        return line

    def read_exactly(self, size: int, deadline: float) -> bytes:
        while len(self._stdout) < size:
            self._fill(deadline)
        data = bytes(self._stdout[:size])
        del self._stdout[:size]
        return data

    def _fill(self, deadline: float) -> None:
        kind, payload = self.next_frame(deadline)
        if kind == STDERR:
            self.stderr_tail = (self.stderr_tail + payload)[-4000:]
        else:
            self._stdout += payload

    def _recv_some(self, size: int, deadline: float) -> bytes:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(size)
        except socket.timeout as exc:
            raise TimeoutError from exc
        if not data:
            raise StreamClosed
        return data

    def _recv_exactly(self, size: int, deadline: float) -> bytes:
        data = b""
        while len(data) < size:
            data += self._recv_some(size - len(data), deadline)
        return data

    def close(self) -> None:
        try:
            self.stream.close()
        except OSError:
            pass
