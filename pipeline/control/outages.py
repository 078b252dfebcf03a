"""Waiting out an endpoint that is down, then stopping the run cleanly: one breaker per endpoint.

An endpoint is whatever many calls share and can fail together: a model provider or server (its api_base, or
the provider of the model string), or the Docker engine. After ``pause_after`` consecutive infrastructure
failures on one endpoint its calls pause: one call at a time probes it, after waits that grow up to
``max_wait``; the others wait for that probe. A success closes the breaker for everyone. When the endpoint has
been failing for longer than ``outage_seconds``, the run stops as a stop does (``pipeline.control.stopping.fault``:
nothing new starts, containers are removed, exit 1, resumed by a rerun), instead of grinding through the queue.
So an outage costs a bounded number of calls, however many tasks are queued behind it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.control import stopping
from pipeline.errors import InfrastructureFault

FIRST_WAIT = 5.0  # seconds before the first probe of a paused endpoint; doubled for each probe after
OUTAGE_SECONDS = 300.0  # failing this long stops the run


@dataclass
class Settings:
    pause_after: int = 3  # consecutive failures on one endpoint before its calls pause
    outage_seconds: float = OUTAGE_SECONDS
    max_wait: float = 60.0  # the longest wait between two probes
    first_wait: float = FIRST_WAIT
    setting: str = "faults.outage_seconds"  # how the user sets outage_seconds, named in the messages


@dataclass
class _Endpoint:
    failures: int = 0  # consecutive
    since: float = 0.0  # monotonic time of the first of them
    error: str = ""  # the last one
    probes: int = 0  # failed probes since the breaker opened
    next_probe: float = 0.0
    probing: bool = False  # a call is probing the endpoint now


class Breakers:
    """The breakers of one process, by endpoint name; thread-safe."""

    def __init__(self, settings: Settings | None = None, clock=time.monotonic):
        self.settings = settings or Settings()
        self._clock = clock
        self._endpoints: dict[str, _Endpoint] = {}
        self._changed = threading.Condition()
        # called with one line when an endpoint pauses or answers again (a run's log)
        self.announce: Callable[[str], None] | None = None

    def configure(self, settings: Settings) -> None:
        with self._changed:
            self.settings = settings

    def reset(self) -> None:
        """Forget every endpoint's failures (tests; a cluster worker that served another run)."""
        with self._changed:
            self._endpoints.clear()
            self.settings = Settings()
            self.announce = None
            self._changed.notify_all()

    def admit(self, endpoint: str) -> bool:
        """Before a call to ``endpoint``: at once while it works; while it is paused, wait for this call's turn
        to probe it. True when this call is a probe (its outcome must be reported). Raises Stopped when the run
        stops meanwhile, this breaker's own outage stop included."""
        with self._changed:
            while True:
                stopping.check()
                state = self._endpoints.get(endpoint)
                if state is None or state.failures < self.settings.pause_after:
                    return False
                now = self._clock()
                if now - state.since > self.settings.outage_seconds:
                    break
                if not state.probing and now >= state.next_probe:
                    state.probing = True
                    return True
                wake = state.next_probe - now if not state.probing else self.settings.max_wait
                self._changed.wait(timeout=max(0.05, min(wake, 1.0)))  # short: a stop is noticed at once
        self._give_up(endpoint, state, now)  # outside the lock: the stop's cleanups remove containers
        stopping.check()
        raise AssertionError("unreachable: the outage stopped the run")

    def failed(self, endpoint: str, error: str, probe: bool = False) -> None:
        """A call to ``endpoint`` failed with an infrastructure error (after which it may be tried again)."""
        with self._changed:
            state = self._endpoints.setdefault(endpoint, _Endpoint())
            now = self._clock()
            if state.failures == 0:
                state.since = now
            state.failures += 1
            state.error = error
            opened = state.failures == self.settings.pause_after and not probe
            if probe or opened:
                if probe:
                    state.probing = False
                    state.probes += 1
                wait = min(self.settings.max_wait, self.settings.first_wait * 2 ** max(0, state.probes - 1))
                state.next_probe = now + (wait if probe else self.settings.first_wait)
            down = state.failures >= self.settings.pause_after and now - state.since > self.settings.outage_seconds
            self._changed.notify_all()
        if opened:
            self._say(f"{endpoint}: {state.failures} failures in a row ({error[:200]}); its calls pause, one at a "
                      f"time tries it again, for up to {self.settings.outage_seconds:g} s ({self.settings.setting})")
        if down:
            self._give_up(endpoint, state, now)

    def succeeded(self, endpoint: str) -> None:
        with self._changed:
            state = self._endpoints.pop(endpoint, None)
            if state is not None:
                self._changed.notify_all()
            was_paused = state is not None and state.failures >= self.settings.pause_after
            seconds = self._clock() - state.since if state is not None else 0.0
        if was_paused:
            self._say(f"{endpoint} answers again after {seconds:.0f} s")

    def _say(self, line: str) -> None:
        if self.announce is not None:
            try:
                self.announce(line)
            except InfrastructureFault:
                raise
            except Exception:  # noqa: BLE001 - a log line must not fail a call
                pass

    def released(self, endpoint: str) -> None:
        """A probe that ended without an outcome (a stop, a budget refusal): let another call probe."""
        with self._changed:
            state = self._endpoints.get(endpoint)
            if state is not None and state.probing:
                state.probing = False
                self._changed.notify_all()

    def paused(self, endpoint: str) -> bool:
        with self._changed:
            state = self._endpoints.get(endpoint)
            return state is not None and state.failures >= self.settings.pause_after

    def status(self) -> str:
        """The paused endpoints for a progress line: name, for how long, the error, when the next try is."""
        with self._changed:
            now, parts = self._clock(), []
            for name, state in sorted(self._endpoints.items()):
                if state.failures < self.settings.pause_after:
                    continue
                retry = "trying now" if state.probing else f"next try in {max(0, state.next_probe - now):.0f} s"
                parts.append(f"{name} failing for {now - state.since:.0f} s ({state.error[:80]}); {retry}")
            return "; ".join(parts)

    def _give_up(self, endpoint: str, state: _Endpoint, now: float) -> None:
        stopping.fault(f"{endpoint} has been failing for {now - state.since:.0f} s, longer than the outage time "
                       f"({self.settings.outage_seconds:g} s, {self.settings.setting}); the last error: "
                       f"{state.error}", 1)


BREAKERS = Breakers()  # the process's; a run configures it from its config (faults)
