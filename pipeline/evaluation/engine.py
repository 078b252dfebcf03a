"""Scoring's calls to the Docker engine, through the engine's breaker (pipeline.control.outages, endpoint ``docker``).

A scoring whose engine does not answer (a refused or dropped connection, a timeout: dockerd restarting or down)
is tried again: at once a few times, then, once the breaker has paused the engine, when it is this scoring's
turn to probe it, for as long as the outage lasts. An engine down past the outage time stops the run as a stop
does (``Stopped``: nothing is recorded for the scorings cut short, a rerun scores them). Any other Docker failure
(the engine answered with an error: an image it cannot find, a container it cannot create) is the instance's
``infra_error`` at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import requests
from docker.errors import APIError

from pipeline.control import stopping
from pipeline.control.outages import BREAKERS

DOCKER = "docker"  # the engine's endpoint name in pipeline.control.outages
TRIES = 3  # tries of one scoring while the engine does not answer and the breaker has not paused it

T = TypeVar("T")


class InfraError(Exception):
    """The environment failed, so the patch was never scored."""


class EngineDown(InfraError):
    """The Docker engine did not answer (no connection, a connection dropped, a timeout)."""


def engine_down(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is the engine not answering, rather than the engine answering with
    an error."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, APIError):
            return False
        if isinstance(cause, (requests.exceptions.ConnectionError, requests.exceptions.Timeout, ConnectionError,
                              TimeoutError)):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def through_breaker(call: Callable[[], T]) -> T:
    """``call()`` (which raises InfraError, EngineDown when the engine did not answer) through the engine's
    breaker, tried again while the engine does not answer, as the module says."""
    tries = 0
    while True:
        probe = BREAKERS.admit(DOCKER)
        try:
            result = call()
        except EngineDown as error:
            BREAKERS.failed(DOCKER, str(error), probe)
            stopping.check()  # an outage past the outage time stopped the run: this scoring is not a result
            if not BREAKERS.paused(DOCKER):
                tries += 1
                if tries >= TRIES:
                    raise
            continue
        except InfraError:
            BREAKERS.succeeded(DOCKER)  # the engine answered, with an error of this instance's
            raise
        except BaseException:
            if probe:
                BREAKERS.released(DOCKER)
            raise
        BREAKERS.succeeded(DOCKER)
        return result
