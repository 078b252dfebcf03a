"""Trajectory journals that cannot be written, for fault tests: the one function an agent's journal appends with
(``pipeline.agent.journal.append_jsonl``) raises OSError, disk full (ENOSPC) and I/O error (EIO) in turn, once this
process has made $SWEPIPE_FAULT_AFTER appends, for as long as the file $SWEPIPE_FAULT_FILE exists (a disk that
filled up, or fails, until someone frees or fixes it).

In a command: ``python -c "import faulty_journal; faulty_journal.main()" run ...`` with tests/ on PYTHONPATH.
"""

import errno
import os
import sys
import threading
from pathlib import Path

_lock = threading.Lock()


def failing_append(real, flag: Path, after: int):
    made = [0]

    def append_jsonl(path: Path, record: dict) -> None:
        with _lock:
            made[0] += 1
            number = made[0]
        if number > after and flag.exists():
            code = errno.ENOSPC if number % 2 else errno.EIO
            raise OSError(code, os.strerror(code))
        real(path, record)

    return append_jsonl


def main() -> None:
    from pipeline.agent import journal

    journal.append_jsonl = failing_append(journal.append_jsonl, Path(os.environ["SWEPIPE_FAULT_FILE"]),
                                          int(os.environ.get("SWEPIPE_FAULT_AFTER", "0")))
    from pipeline.cli import main as swepipe

    sys.argv = ["swepipe", *sys.argv[1:]]
    swepipe()
