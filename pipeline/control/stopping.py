"""Stopping a run: the first Ctrl-C or SIGTERM stops it at once, cleanly; a second one ends the process.

First signal: ``requested()`` turns true, so no new model call, command or stage starts; the
cleanup callbacks run (every container of the run is removed, which kills running commands); the
main thread gets ``KeyboardInterrupt`` and the command saves what finished, says how to resume and
exits. Work cut short raises ``Stopped``, which no ``except Exception`` catches, so it is never
recorded as a result: the rerun resumes it without paying twice. A second signal exits at once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from pipeline.errors import InfrastructureFault

STOP = threading.Event()
_signal: list[int] = []  # the signal that asked for the stop
_fault: list[tuple[str, int]] = []  # (why, exit code) when a fault stopped the run (``fault``), not a signal
_cleanups: list[Callable[[], object]] = []
_at_exit: list[Callable[[], object]] = []  # run as the process ends without waiting for its threads
_installed = False
EXIT_CODES: dict[int, int] = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Stopped(BaseException):
    """The run is stopping: the work in hand was cut short and is not a result."""


def requested() -> bool:
    return STOP.is_set()


def check() -> None:
    """Raise Stopped when the run is stopping (before starting anything that costs time or money)."""
    if STOP.is_set():
        raise Stopped("the run is stopping")


def request() -> None:
    """Stop as the first signal does, from code, without raising KeyboardInterrupt (on a cluster worker, when
    the driver stops the run): nothing new starts, the cleanups run, work in hand ends with Stopped."""
    if STOP.is_set():
        return
    STOP.set()
    run_cleanups()


def fault(reason: str, code: int = 1) -> None:
    """Stop the run because of a fault that every task would meet (a model endpoint down past the outage time:
    exit 1; a rejected API key: exit 2), as a signal stops it: nothing new starts, the cleanups run, work in
    hand ends with Stopped and is resumed by a rerun. The first fault's reason and code are the ones kept."""
    if not _fault and not _signal:
        _fault.append((reason, code))
    request()


def reason() -> str | None:
    """Why a fault stopped the run (None: a signal, or no stop)."""
    return _fault[0][0] if _fault else None


def reset() -> None:
    """Forget an earlier stop (a cluster worker process that served a stopped run before; tests)."""
    STOP.clear()
    _signal.clear()
    _fault.clear()


def on_stop(cleanup: Callable[[], object]) -> None:
    """Run ``cleanup`` when a stop is requested (once; errors in it are ignored)."""
    if cleanup not in _cleanups:
        _cleanups.append(cleanup)


def at_exit(callback: Callable[[], object]) -> None:
    """Run ``callback`` when the process ends without waiting for its threads (``exit_now``, a second signal):
    what must be on record about the work it abandons (pipeline.models.client charges the calls in flight)."""
    if callback not in _at_exit:
        _at_exit.append(callback)


def _run_at_exit() -> None:
    _call_each(_at_exit)


def run_cleanups() -> None:
    _call_each(_cleanups)


def _call_each(callbacks: list[Callable[[], object]]) -> None:
    for callback in list(callbacks):
        try:
            callback()
        except InfrastructureFault:
            raise
        except Exception:  # noqa: BLE001 - a stop (or the exit) must go on whatever one of them does
            pass


def install(again: bool = False) -> None:
    """Take over SIGINT and SIGTERM; call it from the main thread before any work starts. ``again`` takes them
    back from a library that set its own handlers since (Ray's client ends the process on SIGTERM)."""
    global _installed
    if (_installed and not again) or threading.current_thread() is not threading.main_thread():
        return
    _installed = True
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _handle)


def _handle(signum, frame) -> None:
    if STOP.is_set():  # the second signal: out now
        run_cleanups()
        _run_at_exit()
        sys.stderr.write("\nstopped at once; if containers are left, `swepipe cleanup` removes them\n")
        sys.stderr.flush()
        os._exit(EXIT_CODES.get(signum, 1))
    _signal.append(signum)
    STOP.set()
    sys.stderr.write(f"\n{signal.Signals(signum).name}: stopping (no new model call or command starts; "
                     "containers are being removed). Signal again to exit at once.\n")
    sys.stderr.flush()
    run_cleanups()
    raise KeyboardInterrupt


def exit_code() -> int:
    """130 after Ctrl-C, 143 after SIGTERM, as a shell reports them; a fault's own code (``fault``)."""
    if _signal:
        return EXIT_CODES.get(_signal[0], 1)
    return _fault[0][1] if _fault else 1


def exit_now(code: int) -> NoReturn:
    """End the process without waiting for threads still blocked in a model call (they are abandoned, and
    charged: ``at_exit``)."""
    _run_at_exit()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
