"""One process per run directory, and the repair after a killed one: what a session does to a run's directory
before it writes anything (pipeline.rundir.layout only names the files).

``lock_run(layout)`` holds the directory for the life of the process (or until ``unlock_run``), so that a
second ``swepipe run`` or ``swepipe rollouts`` on the same run id stops with RunLocked instead of writing the same
files.
The lock is an ``flock``: the kernel drops it when the holder dies, so the .lock file a killed process leaves
blocks nobody. Taking it again in the same process is a no-op."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time

from pipeline.errors import SwepipeError
from pipeline.rundir.layout import RunLayout
from pipeline.rundir.storage import remove_stale_temp_files, repair_jsonl


class RunLocked(SwepipeError):
    """Another live process works in the same run directory."""


# Run directories this process holds the lock of: resolved path -> the open lock file's descriptor.
_HELD: dict[str, int] = {}
_held_guard = threading.Lock()


def lock_run(layout: RunLayout) -> None:
    """Hold ``layout``'s run directory (see the module's docstring); RunLocked when another process holds it."""
    key = str(layout.root.resolve())
    with _held_guard:
        if key in _HELD:
            return
        layout.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(layout.lock_file, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by child processes
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise RunLocked(f"run {layout.run_id} ({layout.root}) is in use by another swepipe process"
                            f"{holder}; wait for it to finish or stop it, or choose another --run-id") from None
        except OSError as error:
            os.close(fd)
            raise SwepipeError(f"cannot lock the run directory {layout.root} ({layout.lock_file}: {error})") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode() + b"\n")
        _HELD[key] = fd


def unlock_run(layout: RunLayout) -> None:
    with _held_guard:
        fd = _HELD.pop(str(layout.root.resolve()), None)
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the flock


def repair_run(layout: RunLayout) -> list[str]:
    """After a killed session (call it holding the lock): JSON Lines files whose last line was cut short end at a
    whole line again, and abandoned temporary files go. Returns what was repaired."""
    files = [layout.predictions, layout.infra_errors, *layout.ledgers()]
    notes = [note for note in map(repair_jsonl, files) if note]
    remove_stale_temp_files(layout.root)
    return notes


def _read_holder(fd: int) -> str:
    """ " (pid N on host H since T)" from a held lock file, or "" when it cannot be read yet."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        holder = json.loads(os.read(fd, 4096).decode() or "{}")
        return f" (pid {holder['pid']} on {holder['host']}, since {holder['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return ""
