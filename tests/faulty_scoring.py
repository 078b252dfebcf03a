"""Docker failing under scoring, for fault tests: the real SDK call that starts a scoring's tests container
(``Container.start``) raises ``requests.exceptions.ConnectionError``, as it does when dockerd restarts under it,
while the counter file holds a number above zero (each failure takes one off); only for the instance named, when
one is.

In this process: ``monkeypatch.setattr(Container, "start", faulty_start(counter))``. In a command:
``python -c "import faulty_scoring; faulty_scoring.main()" eval ...`` with tests/ on PYTHONPATH and
$SWEPIPE_FAULT_FILE (and $SWEPIPE_FAULT_INSTANCE) set.
"""

import os
import sys
import threading
from pathlib import Path

import requests
from docker.models.containers import Container

_real_start = Container.start
_lock = threading.Lock()


def faulty_start(counter: Path, instance_id: str | None = None):
    def start(self, **kwargs):
        scoring = "entryscript.sh" in " ".join((self.attrs.get("Config") or {}).get("Cmd") or [])  # not an agent's
        wanted = instance_id is None or self.labels.get("swepipe.instance_id") == instance_id
        with _lock:
            left = int(counter.read_text() or 0) if counter.exists() else 0
            fail = scoring and wanted and left > 0
            if fail:
                counter.write_text(str(left - 1))
        if fail:
            raise requests.exceptions.ConnectionError(
                ("Connection aborted.", ConnectionResetError(104, "Connection reset by peer")))
        return _real_start(self, **kwargs)

    return start


def main() -> None:
    Container.start = faulty_start(Path(os.environ["SWEPIPE_FAULT_FILE"]),
                                               os.environ.get("SWEPIPE_FAULT_INSTANCE"))
    from pipeline.cli import main as swepipe

    sys.argv = ["swepipe", *sys.argv[1:]]
    swepipe()
