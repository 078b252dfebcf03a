"""What a failure is: the one taxonomy every stage, executor and command follows.

- **The model's own outcomes** are results: it submitted, ran out of steps, time or budget, kept replying in a
  form that cannot be used, filled its context window, or the provider refused the request itself. They end an
  agent or a stage with a recorded reason (pipeline.records.trajectory.ExitReason) and the task goes on.
- **Infrastructure faults** (``InfrastructureFault``) are not results: a provider or model server that does not
  answer past its retries, Docker or a transport failing, a cluster actor that times out or dies. They never
  write a final record: the rollout or stage stays unfinished (its trajectory kept), the task stays out of
  predictions.jsonl, and a rerun resumes it without paying twice. They are Exceptions, one tree under
  ``InfrastructureFault``; a handler of ``Exception`` in pipeline/ takes them first (``except InfrastructureFault:
  raise``) or names the errors it means, so none turns a fault into an answer (tests/test_fault_handlers.py holds
  it). ``pipeline.control.stopping.Stopped`` stays a BaseException, like KeyboardInterrupt: it passes every handler.
- **Configuration errors** (``ConfigurationError``: a rejected API key, a model the provider does not know) make
  every later call fail the same way: the run stops at once, exit 2, naming the role, model and endpoint.
- **Bad input or an unusable environment** before anything runs (``SwepipeError``): the CLI prints the message
  and exits 2.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class SwepipeError(Exception):
    """Bad input or an unusable environment, explained in the message."""


class DatasetError(SwepipeError):
    """A dataset that cannot be found, read or decoded; the message names file, row and column."""


class ConfigurationError(SwepipeError):
    """A setting that makes every call fail (authentication, an unknown model): nothing is worth retrying, and
    the run stops at once."""


class ContainerDied(SwepipeError):
    """A workspace's container stopped (killed, out of memory, exited) under an agent: what ran there ended
    it, so it is that agent's outcome (``runtime_error``), recorded like any other."""


class InfrastructureFault(Exception):
    """Something outside swepipe failed, so the work in hand has no answer: it is never recorded as a result.
    The task stays unfinished and a rerun of the same run id resumes it."""


class RuntimeUnavailable(InfrastructureFault):
    """Docker (or the local toolchain) is missing or failing, or an image cannot be had. It is retried, and a
    task it stops stays unfinished for a rerun; it is never a result."""


class ModelUnavailable(InfrastructureFault):
    """A model endpoint (a provider, a local model server) gave no usable answer past its retries: an outage,
    rate limits, timeouts, 5xx, a connection that fails."""

    def __init__(self, message: str, endpoint: str = "", billed=None):
        super().__init__(message)
        self.endpoint = endpoint
        self.billed = billed  # pipeline.models.client.Usage of the failed attempts, as the provider reported it


class ClusterFault(InfrastructureFault):
    """A cluster service (Ray's head, an actor of the run) timed out or died under the work."""


class StorageFault(InfrastructureFault):
    """A file of the run could not be written (the disk full, an I/O error), so the work in hand cannot be kept: it
    stops there, what was saved before stays, and a rerun resumes from it. The message says what the write met."""


def transport_errors() -> tuple[type[Exception], ...]:
    """Docker's API, an HTTP transport or a socket failing: infrastructure wherever it surfaces."""
    import requests
    from docker.errors import DockerException

    return DockerException, requests.exceptions.RequestException, ConnectionError, TimeoutError


def is_transport_error(error: BaseException) -> bool:
    return isinstance(error, transport_errors())


@contextlib.contextmanager
def ignoring_errors() -> Iterator[None]:
    """``contextlib.suppress(Exception)`` for best-effort work (a cleanup, a courtesy call), except that an
    InfrastructureFault raised there goes on: it is the caller's to handle, never silently an answer."""
    try:
        yield
    except InfrastructureFault:
        raise
    except Exception:  # noqa: BLE001 - best effort, as the caller says
        pass


def describe(error: BaseException) -> str:
    """``Type: first line of the message``, for records and one-line logs."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
