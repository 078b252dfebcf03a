"""Writing results so that a crash never leaves half a file and no secret reaches the disk.

Every file swepipe writes goes through here (``write_json_atomic``, ``write_text_atomic``,
``write_code_atomic``, ``append_jsonl``, ``redact_file``; ``remove`` for one it removes), so it passes the
redactor of ``pipeline.text.secrets``.

A process may also mirror its writes (``set_mirror``): every write under a root is then also handed, as
(op, path relative to the root, bytes), to a sink, in the order the files were changed. A Ray worker runs a
task in a scratch copy of the run directory and sends its writes to the driver, the one process that writes
the run directory itself (pipeline.run.ray.node, pipeline.run.ray.driver).
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from pipeline.text.printable import clean
from pipeline.text.secrets import StreamRedactor, redact, redact_data, redact_values

TORN_SUFFIX = ".torn"
_TEMP_NAME = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp$")  # what _replace's mkstemp names look like
_append_lock = threading.Lock()


class Mirror:
    """Where the writes under ``root`` also go: ``sink(op, relative_path, data)`` with op ``write`` (the file's
    whole new content), ``append`` (bytes added at its end) or ``unlink`` (the file went). Called under one lock,
    right after the local write, so the sink sees the writes in the order the files took them, also with many
    writing threads."""

    def __init__(self, root: Path, sink):
        self.root = Path(os.path.abspath(root))
        self.sink = sink
        self.lock = threading.RLock()

    def relative(self, path: Path) -> str | None:
        try:
            return Path(os.path.abspath(path)).relative_to(self.root).as_posix()
        except ValueError:
            return None


_mirror: Mirror | None = None


def set_mirror(root: Path, sink) -> Mirror:
    """Mirror every write under ``root`` to ``sink`` (see ``Mirror``) in this process, until ``clear_mirror``."""
    global _mirror
    _mirror = Mirror(root, sink)
    return _mirror


def clear_mirror() -> None:
    global _mirror
    _mirror = None


def apply_mirrored(root: Path, op: str, relative: str, data: bytes) -> None:
    """The other end of a mirror: one write a mirrored process made, applied under ``root`` (never outside it).

    The bytes were redacted where they were written; this process's own secret values are taken out too."""
    path = Path(os.path.abspath(Path(root) / relative))
    if not path.is_relative_to(Path(os.path.abspath(root))) or path == Path(os.path.abspath(root)):
        raise ValueError(f"a mirrored write outside {root}: {relative!r}")
    if op == "unlink":
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    clean = redact_values(data.decode("utf-8", errors="surrogateescape")).encode("utf-8", errors="surrogateescape")
    if op == "write":
        _replace_bytes(path, clean)
    elif op == "append":
        path.parent.mkdir(parents=True, exist_ok=True)
        with _append_lock, open(path, "ab", buffering=0) as handle:
            written = 0
            while written < len(clean):
                written += handle.write(clean[written:])
    else:
        raise ValueError(f"unknown mirrored write {op!r}")


@contextlib.contextmanager
def _mirrored(path: Path):
    """Yield a function that hands the write just made to the mirror's sink (a no-op when nothing mirrors
    ``path``); the local write and the hand-over happen under the mirror's lock."""
    mirror = _mirror
    relative = mirror.relative(path) if mirror is not None else None
    if mirror is None or relative is None:
        yield lambda op, data: None
        return
    with mirror.lock:
        yield lambda op, data: mirror.sink(op, relative, data)


def write_json_atomic(path: Path, data) -> None:
    _replace(path, json.dumps(redact_data(data), indent=2) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (secrets redacted) in one step: readers see the old file or the new one."""
    _replace(path, redact(text))


def write_code_atomic(path: Path, text: str) -> None:
    """``write_text_atomic`` for code (a repository's source, a patch): only the environment's secret values
    are redacted, never key-shaped text, which in code is a test fixture that must stay byte for byte."""
    _replace(path, redact_values(text))


def _replace(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it over ``path``; on any failure (a
    full disk, text that cannot be encoded, an interrupt) the temporary file is removed and ``path`` kept."""
    _replace_bytes(path, text.encode("utf-8"))


def _file_mode() -> int:
    """The mode ``open`` gives a new file in this process (0o666 less the umask), read without changing it."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


# mkstemp makes its files 0600: an atomically written file gets the mode every other file of a run has.
_FILE_MODE = _file_mode()


def _temp_beside(path: Path) -> tuple[int, str]:
    """A new temporary file in ``path``'s folder (its descriptor and name), with the run's file mode."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.fchmod(fd, _FILE_MODE)
    return fd, tmp


def _replace_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with _mirrored(path) as mirror:
        fd, tmp = _temp_beside(path)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        mirror("write", data)


def remove(path: Path) -> None:
    """Remove ``path`` if it is there; a mirror is told (op ``unlink``), so a mirrored copy goes too."""
    with _mirrored(path) as mirror:
        try:
            path.unlink()
        except FileNotFoundError:
            return
        mirror("unlink", b"")


def remove_stale_temp_files(root: Path, older_than: float = 60.0) -> list[Path]:
    """Remove the temporary files a killed process left under ``root`` (call it while holding the run's lock;
    a write takes milliseconds, so a temporary file older than ``older_than`` seconds is nobody's)."""
    removed = []
    now = time.time()
    for directory, _, names in os.walk(root):
        for name in names:
            if _TEMP_NAME.match(name):
                path = Path(directory) / name
                with contextlib.suppress(OSError):
                    if now - path.stat().st_mtime >= older_than:
                        path.unlink()
                        removed.append(path)
    return removed


def redact_file(path: Path, block: int = 1 << 20) -> None:
    """Redact a file written by something else (a container's log), in place, as a stream: memory stays bounded
    however big the file is. Bytes that are not UTF-8 are kept as they were; a file with nothing to redact is
    left untouched."""
    try:
        source = open(path, "rb")
    except FileNotFoundError:
        return
    decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
    redactor = StreamRedactor()
    with _mirrored(path) as mirror, source:
        fd, tmp = _temp_beside(path)
        try:
            with os.fdopen(fd, "wb") as out:
                while piece := source.read(block):
                    out.write(redactor.feed(decoder.decode(piece)).encode("utf-8", errors="surrogateescape"))
                rest = redactor.feed(decoder.decode(b"", final=True)) + redactor.finish()
                out.write(rest.encode("utf-8", errors="surrogateescape"))
            if redactor.changed:
                os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if redactor.changed and _mirror is not None and _mirror.relative(path) is not None:
            mirror("write", path.read_bytes())  # whole, once: a scoring log is capped (pipeline.evaluation.logs)


def append_jsonl(path: Path, record: Mapping[str, object]) -> None:
    """One line (secrets redacted), written with a single call so concurrent appenders never interleave.

    A last line cut short (a killed process, a failed write) is repaired first (``repair_jsonl``), so this line
    never glues onto it. A write that fails (the disk full, an I/O error) raises its OSError with the file cut
    back to where it ended, so no half line is left behind; ``write_failure`` says what it met."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(redact_data(record)) + "\n").encode("utf-8")
    with _mirrored(path) as mirror, _append_lock, open(path, "a+b", buffering=0) as handle:
        size = handle.seek(0, os.SEEK_END)
        if size:
            handle.seek(size - 1)
            if handle.read(1) != b"\n":
                _repair(path, handle, size)
                size = handle.seek(0, os.SEEK_END)
        try:
            written = 0
            while written < len(line):
                written += handle.write(line[written:])
        except OSError as error:
            _take_back(path, handle, size, error)
            raise
        _failed_appends.pop(str(path), None)
        mirror("append", line)


_failed_appends: dict[str, str] = {}  # file -> what its last failed append met, while a half line may be left


def _take_back(path: Path, handle, size: int, error: OSError) -> None:
    """A failed append's bytes removed (the file ends where it did before); when even that fails, what the write
    met is remembered, so the repair of the half line names it instead of guessing a kill."""
    try:
        handle.truncate(size)
    except OSError:
        _failed_appends[str(path)] = write_failure(error)


_WRITE_FAILURES = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded", errno.EIO: "I/O error",
                   errno.EROFS: "read-only file system", errno.EFBIG: "file too large"}


def write_failure(error: OSError) -> str:
    """What a failed write met, in words and by its errno's name: ``disk full (ENOSPC: No space left on
    device)``."""
    name = errno.errorcode.get(error.errno, "") if isinstance(error.errno, int) else ""
    reason = error.strerror or str(error) or type(error).__name__
    detail = f"{name}: {reason}" if name else reason
    what = _WRITE_FAILURES.get(error.errno) if isinstance(error.errno, int) else None
    return f"{what} ({detail})" if what else detail


def repair_jsonl(path: Path) -> str | None:
    """Make ``path`` end at a whole line again after a write was cut short; returns what was done, or None.

    A last line that is a whole JSON object (only its newline is missing) is kept and ended; anything
    else after the last newline moves to ``<name>.torn`` beside the file. Either way it is said once, on
    stderr."""
    if not path.is_file():
        return None
    with _append_lock, open(path, "a+b", buffering=0) as handle:
        size = handle.seek(0, os.SEEK_END)
        if not size:
            return None
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return None
        return _repair(path, handle, size)


def _repair(path: Path, handle, size: int) -> str:
    start = _last_line_start(handle, size)
    handle.seek(start)
    tail = handle.read(size - start)
    try:
        whole = isinstance(json.loads(tail), dict)
    except ValueError:
        whole = False
    if whole:
        handle.write(b"\n")
        note = f"{path}: its last line had no newline (a write was cut short); the line is whole, so it was kept"
    else:
        torn = path.with_name(path.name + TORN_SUFFIX)
        with open(torn, "ab") as side:
            side.write(tail + b"\n")
        handle.truncate(start)
        failed = _failed_appends.pop(str(path), None)
        cause = (f"by a write that failed ({failed})" if failed else
                 "by a write that did not finish (a process killed while writing, or a write that failed)")
        note = (f"{path}: its last line was cut short {cause} ({len(tail)} bytes); it was moved to "
                f"{torn.name} and the file ends at the line before")
    print(clean(f"swepipe: {note}"), file=sys.stderr, flush=True)
    return note


def _last_line_start(handle, size: int, block: int = 65536) -> int:
    """Offset just after the last newline before ``size`` (0 if there is none)."""
    end = size
    while end > 0:
        begin = max(0, end - block)
        handle.seek(begin)
        chunk = handle.read(end - begin)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return begin + newline + 1
        end = begin
    return 0
