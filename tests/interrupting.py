"""Stopping a swepipe command the way a user does: Ctrl-C (SIGINT) once it has reached a given point."""

from __future__ import annotations

import signal
import subprocess
import time
from typing import Callable


def interrupt_when(proc: subprocess.Popen, reached: Callable[[], bool], what: str,
                   timeout: float = 120) -> tuple[str, str]:
    """Send ``proc`` SIGINT half a second after ``reached()`` first holds (failing, naming ``what``, if it does not
    within ``timeout`` seconds); its stdout and stderr once it has ended. It is killed whatever happens."""
    try:
        deadline = time.monotonic() + timeout
        while not reached():
            assert time.monotonic() < deadline, f"{what} never happened"
            time.sleep(0.2)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        return proc.communicate(timeout=60)
    finally:
        proc.kill()
