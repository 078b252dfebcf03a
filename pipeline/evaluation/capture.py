"""The tests' output, taken from the tests' container's own stdout and stderr as the Docker engine streams them out
of it, where nothing in the container can rewrite what it has written.

swepipe attaches to the container before it starts, and a thread writes each stream to a spool file outside the
container as it comes, until the streams close (the container has ended; every process of it ended with it). The
entry script prints a marker line on each stream once the setup is done (pipeline.evaluation.protocol.entry_script);
what follows the first one is the tests' output, which the parser reads in full. The marker is derived from the
patch, so that no patch can print it during the setup. The container keeps no log of its own (``log_config``):
the attached stream is the record.
"""

from __future__ import annotations

import hashlib
import socket
import struct
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from pipeline.evaluation.engine import InfraError
from pipeline.evaluation.protocol import TEST_LOGS
from pipeline.runtime.output import BoundedOutput

if TYPE_CHECKING:
    from docker.types import LogConfig

STREAMS = {1: "stdout", 2: "stderr"}  # Docker's stream ids in a frame's header
DRAIN_TIME = 120.0  # seconds the streams have to close once the container has ended
_LONGEST_MARKER_LINE = 200
_HEADER = struct.Struct(">BxxxI")  # a frame: its stream, three zero bytes, its payload's size


def log_config(attached: bool) -> LogConfig:
    """The log driver of a scoring container: none for the tests' (their attached streams are the record), the
    ``local`` driver (bytes kept as they were, whatever the daemon's default) for the parser's."""
    from docker.types import LogConfig

    return LogConfig(type="none") if attached else LogConfig(type="local", config={"max-size": "64m"})


def start_marker(instance_id: str, patch: str) -> str:
    """The marker line's first word: the same for the same scoring, and out of any patch's reach (a patch cannot
    hold the digest of itself)."""
    digest = hashlib.sha256(f"{instance_id}\0{patch}".encode("utf-8", errors="surrogatepass")).hexdigest()
    return f"swepipe-tests-start-{digest[:32]}"


@dataclass
class Captured:
    """One stream of the tests' container: what the setup printed on it (bounded) and whether the marker line
    was seen, with the words after it (git apply's exit status, the canaries' status)."""

    setup: BoundedOutput
    found: bool = False
    apply_status: str | None = None
    canary_status: str | None = None


class Sink(Protocol):
    """Where bytes are written: a binary file, or one capped by a ``SpoolBudget``."""

    def write(self, data: bytes | bytearray, /) -> object: ...


class MarkerSplitter:
    """One stream, fed as it arrives: what follows its first line ``<marker> <word>`` goes to ``tests_out``, what
    precedes it is the setup's (kept up to ``setup_limit`` bytes). Lines are split as they come, in bounded
    memory."""

    def __init__(self, marker: str, tests_out: Sink, setup_limit: int):
        self.captured = Captured(BoundedOutput(setup_limit))
        self._prefix = marker.encode() + b" "
        self._out = tests_out
        self._pending = bytearray()
        self._in_long_line = False  # inside a line too long to be the marker line

    def feed(self, chunk: bytes) -> None:
        captured = self.captured
        if captured.found:
            self._out.write(chunk)
            return
        pending = self._pending
        pending += chunk
        while not captured.found:
            end = pending.find(b"\n")
            if end < 0:
                if len(pending) > _LONGEST_MARKER_LINE:
                    captured.setup.feed(bytes(pending))
                    pending.clear()
                    self._in_long_line = True
                return
            line = bytes(pending[: end + 1])
            del pending[: end + 1]
            if not self._in_long_line and line.startswith(self._prefix):
                captured.found = True
                words = line[len(self._prefix):].decode("ascii", "replace").split()
                captured.apply_status = words[0] if words else ""
                captured.canary_status = words[1] if len(words) > 1 else None
                self._out.write(pending)
                pending.clear()
            else:
                captured.setup.feed(line)
            self._in_long_line = False

    def close(self) -> Captured:
        self.captured.setup.feed(bytes(self._pending))
        self._pending.clear()
        return self.captured


def split_at_marker(chunks: Iterable[bytes], marker: str, tests_out: Sink, setup_limit: int) -> Captured:
    """``chunks`` of one stream through a ``MarkerSplitter``."""
    splitter = MarkerSplitter(marker, tests_out, setup_limit)
    for chunk in chunks:
        splitter.feed(chunk)
    return splitter.close()


def frames(blocks: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """(stream id, payload) of each frame of Docker's multiplexed stream (a header: the stream's id, three zero
    bytes, the payload's size as 4 bytes big-endian; then the payload), read from ``blocks`` however they cut it.
    OSError when the blocks end inside a frame."""
    pending = b""
    for data in blocks:
        pending = pending + data if pending else data
        at, end = 0, len(pending)
        while end - at >= _HEADER.size:
            stream, size = _HEADER.unpack_from(pending, at)
            if end - at - _HEADER.size < size:
                break
            yield stream, pending[at + _HEADER.size: at + _HEADER.size + size]
            at += _HEADER.size + size
        pending = pending[at:]
    if pending:
        raise OSError(f"the stream ended inside a frame ({len(pending)} bytes left)")


class SpoolBudget:
    """The bytes the tests' output may take on this machine's disk, both streams together: what the official entry
    script's logs could take inside the container (its writable layer). Past it, output is counted, not kept."""

    def __init__(self, limit: int):
        self.left, self.dropped = limit, 0

    def writer(self, file: BinaryIO) -> _Capped:
        return _Capped(file, self)


class _Capped:
    def __init__(self, file: BinaryIO, budget: SpoolBudget):
        self.file, self.budget = file, budget

    def write(self, data: bytes | bytearray) -> None:
        kept = data[: max(0, self.budget.left)]
        if kept:
            self.file.write(kept)
        self.budget.left -= len(kept)
        self.budget.dropped += len(data) - len(kept)


def raw_socket(attached: Any) -> Any:
    """The socket under an attach socket (docker-py hands a SocketIO over it)."""
    return getattr(attached, "_sock", None) or attached


def write_input(attached: Any, pieces: Iterable[bytes], timeout: float) -> None:
    """``pieces`` written to an attached container's standard input, which is then closed (its reader sees the end
    of it); OSError when the engine does not take them."""
    raw = raw_socket(attached)
    raw.settimeout(timeout)
    for piece in pieces:
        raw.sendall(piece)
    raw.shutdown(socket.SHUT_WR)
    raw.settimeout(None)


class StreamCapture:
    """The tests' container's stdout and stderr, attached before it starts (``attach``), read by a thread into
    ``spool``/stdout.log and ``spool``/stderr.log (the tests' part of each, ``spool_limit`` bytes of both at the
    most: ``dropped`` counts the rest) until they close (``finish``); with ``stdin``, its standard input attached
    too, to be written once (``send``)."""

    def __init__(self, container: Any, marker: str, spool: Path, setup_limit: int, spool_limit: int,
                 stdin: bool = False):
        from docker.utils.socket import read

        self._read_socket = read
        self._socket = container.attach_socket(params={"stdout": 1, "stderr": 1, "stream": 1,
                                                       **({"stdin": 1} if stdin else {})})
        self._files = {name: open(spool / log, "wb") for name, log in zip(STREAMS.values(), TEST_LOGS, strict=True)}
        self.budget = SpoolBudget(spool_limit)
        self._splitters = {stream: MarkerSplitter(marker, self.budget.writer(self._files[name]), setup_limit)
                           for stream, name in STREAMS.items()}
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._read, name="swepipe-tests-output", daemon=True)
        self._thread.start()

    def _blocks(self, size: int = 1 << 20) -> Iterator[bytes]:
        while True:
            data = self._read_socket(self._socket, size)
            if data is None:  # interrupted: read again
                continue
            if not data:
                return
            yield data

    def _read(self) -> None:
        try:
            for stream, payload in frames(self._blocks()):
                splitter = self._splitters.get(stream)
                if splitter is not None:
                    splitter.feed(payload)
        except BaseException as error:  # noqa: BLE001 - handed to the scoring thread by finish()
            self._error = error
        finally:
            for file in self._files.values():
                file.close()

    def send(self, pieces: Iterable[bytes], timeout: float) -> None:
        """Write ``pieces`` to the container's standard input and close it (the reading goes on)."""
        try:
            write_input(self._socket, pieces, timeout)
        except OSError as error:
            raise InfraError(f"the tests' files could not be sent to their container: {error}") from error

    def finish(self, drain_time: float = DRAIN_TIME) -> dict[str, Captured]:
        """Once the container has ended: each stream's Captured. When the streams did not close within
        ``drain_time``, or reading them failed (the engine went away: its own error), the scoring has no result."""
        self._thread.join(drain_time)
        self.close()
        if self._thread.is_alive():  # still reading after the socket was shut down
            raise InfraError(f"the tests' output was still open {drain_time:.0f} s after their container ended")
        if isinstance(self._error, OSError) and not isinstance(self._error, ConnectionError):
            raise InfraError(f"the tests' output could not be read: {self._error}") from self._error
        if self._error is not None:
            raise self._error
        return {STREAMS[stream]: splitter.close() for stream, splitter in self._splitters.items()}

    def close(self, wait: float = 10.0) -> None:
        """Stop reading (a scoring cut short): the socket shut down, which wakes the thread, and closed."""
        if self._closed:
            return
        self._closed = True
        raw = raw_socket(self._socket)
        for end in (lambda: raw.shutdown(socket.SHUT_RDWR), self._socket.close):
            try:
                end()
            except OSError:
                pass
        if threading.current_thread() is not self._thread:
            self._thread.join(wait)
