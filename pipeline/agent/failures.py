"""What an error under an action means for the agent, and how it is shown."""

from __future__ import annotations

from pipeline.agent.agent_run import Stop
from pipeline.control import stopping
from pipeline.errors import RuntimeUnavailable, describe, is_transport_error
from pipeline.records.trajectory import ExitReason


def workspace_failure(error: BaseException) -> BaseException:
    """What the runtime failing under an action means: Docker's API itself failed (RuntimeUnavailable: retried by
    the task, never a result), or the workspace is gone (this agent's runtime_error)."""
    stopping.check()  # the stop removed the container: not this agent's outcome
    if is_transport_error(error):
        return RuntimeUnavailable(f"the workspace's runtime failed: {describe(error)}")
    return Stop(ExitReason.RUNTIME_ERROR, str(error))


def briefly(error: BaseException, limit: int = 500) -> str:
    """An unexpected error in a few hundred characters (its text may quote a whole reply)."""
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"
