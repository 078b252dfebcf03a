"""Where everything of a run lives on disk (docs/run-layout.md)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import SwepipeError
from pipeline.storage import remove_stale_temp_files, repair_jsonl
from pipeline.tasks.record import check_instance_id

_CANDIDATE_KEY = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def is_candidate_key(key) -> bool:
    """Whether ``key`` can be a candidate's key, which names its folder: letters, digits, '.', '_' and '-' only,
    never '.' or '..' (the pool writes 16 hex digits; a pool read back may hold any text)."""
    return isinstance(key, str) and bool(_CANDIDATE_KEY.fullmatch(key)) and key not in (".", "..")


class RunLocked(SwepipeError):
    """Another live process works in the same run directory."""


# Run directories this process holds the lock of: resolved path -> the open lock file's descriptor.
_HELD: dict[str, int] = {}
_held_guard = threading.Lock()


@dataclass(frozen=True)
class TaskPaths:
    root: Path

    @property
    def junior(self) -> Path:
        return self.root / "junior"

    @property
    def senior(self) -> Path:
        return self.root / "senior"

    @property
    def principal(self) -> Path:
        return self.root / "principal"

    @property
    def ledger(self) -> Path:
        return self.root / "ledger.jsonl"

    @property
    def eval(self) -> Path:
        return self.root / "eval"

    @property
    def analysis(self) -> Path:
        """``swepipe coverage --senior-at``: senior-at-NN/ holds the senior's brief on the first NN rollouts."""
        return self.root / "analysis"

    def senior_at(self, k: int) -> Path:
        return self.analysis / f"senior-at-{k:02d}"

    @property
    def candidates(self) -> Path:
        """``swepipe eval --candidates``: candidates/<key>/ holds the hidden tests' verdict on each distinct junior
        candidate of junior/pool.json (result.json, as eval/ holds the prediction's), read by ``swepipe whatif``."""
        return self.root / "candidates"

    def candidate_result(self, key: str) -> Path:
        if not is_candidate_key(key):
            raise SwepipeError(f"{self.root}: candidate key {key!r} is not a plain folder name (letters, digits, "
                               "'.', '_', '-')")
        return self.candidates / key / "result.json"


@dataclass(frozen=True)
class RunLayout:
    root: Path

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def predictions(self) -> Path:
        return self.root / "predictions.jsonl"

    @property
    def dataset(self) -> Path:
        """The dataset and split the run's tasks come from (pipeline.run.run_dataset), so that later commands on
        the run (eval, coverage, report, a resumed run) load the same tasks without --dataset again."""
        return self.root / "dataset.json"

    @property
    def repeat(self) -> Path:
        """With ``swepipe run --repeats N``: which repeat of which group this run is (pipeline.run.repeats)."""
        return self.root / "repeat.json"

    @property
    def lock_file(self) -> Path:
        return self.root / ".lock"

    def lock(self) -> None:
        """Hold the run directory for the life of this process (or until ``unlock``), so that a second
        ``swepipe run`` or ``swepipe rollouts`` on the same run id stops with RunLocked instead of
        writing the same files. The lock is an ``flock``: the kernel drops it when the holder dies, so
        the .lock file a killed process leaves blocks nobody. Taking it again in the same process is a
        no-op."""
        key = str(self.root.resolve())
        with _held_guard:
            if key in _HELD:
                return
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by child processes
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise RunLocked(f"run {self.run_id} ({self.root}) is in use by another swepipe process"
                                f"{holder}; wait for it to finish or stop it, or choose another --run-id") from None
            except OSError as error:
                os.close(fd)
                raise SwepipeError(f"cannot lock the run directory {self.root} ({self.lock_file}: {error})") from None
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                     "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode() + b"\n")
            _HELD[key] = fd

    def unlock(self) -> None:
        with _held_guard:
            fd = _HELD.pop(str(self.root.resolve()), None)
            if fd is not None:
                os.close(fd)  # closing the descriptor releases the flock

    def repair(self) -> list[str]:
        """After a killed session (call it holding the lock): JSON Lines files whose last line was cut short
        end at a whole line again, and abandoned temporary files go. Returns what was repaired."""
        files = [self.predictions, self.root / "infra_errors.jsonl", *sorted(self.root.glob("tasks/*/ledger.jsonl"))]
        notes = [note for note in map(repair_jsonl, files) if note]
        remove_stale_temp_files(self.root)
        return notes

    def task(self, instance_id: str) -> TaskPaths:
        """The folder of a task; an id that is no plain file name (read back from a run directory someone else
        wrote) is refused, so that no path outside the run is ever made from one."""
        try:
            check_instance_id(instance_id)
        except ValueError as error:
            raise SwepipeError(f"{self.root}: instance id {error}") from None
        return TaskPaths(self.root / "tasks" / instance_id)

    def finished(self) -> dict[str, dict]:
        """Predictions already written, by instance id (a line cut short by a crash is ignored), as the dicts the
        run's bookkeeping holds (no ``format``: that is the file's). Lenient on purpose: a task with any line is
        not run (and paid for) again; the reports read the file through pipeline.records.read_predictions."""
        done = {}
        if self.predictions.exists():
            for line in self.predictions.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                    done[record["instance_id"]] = record
                    record.pop("format", None)
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue
        return done


def repeat_run_id(group: str, number: int) -> str:
    """The run id of repeat ``number`` (1..N) of the repeats ``group``: a sibling of the others."""
    return f"{group}-r{number}"


def repeat_dirs(parent: Path, group: str) -> dict[int, Path]:
    """The run directories of the repeats ``group`` under ``parent`` (``<group>-r<number>``), by number."""
    name = re.compile(re.escape(group) + r"-r([1-9][0-9]*)")
    found = {int(match.group(1)): path for path in (parent.iterdir() if parent.is_dir() else ())
             if (match := name.fullmatch(path.name)) and path.is_dir()}
    return dict(sorted(found.items()))


def _read_holder(fd: int) -> str:
    """ " (pid N on host H since T)" from a held lock file, or "" when it cannot be read yet."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        holder = json.loads(os.read(fd, 4096).decode() or "{}")
        return f" (pid {holder['pid']} on {holder['host']}, since {holder['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return ""
