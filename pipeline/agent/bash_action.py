"""The bash action: one command in the agent's workspace, its exit code and output the observation."""

from __future__ import annotations

from typing import Any

from pipeline.agent.actions import Action
from pipeline.agent.agent_run import AgentStep, Stop
from pipeline.agent.failures import workspace_failure
from pipeline.errors import ContainerDied
from pipeline.records.trajectory import ExitReason
from pipeline.runtime.limits import ResourceLimitHit
from pipeline.settings.config import Limits
from pipeline.text.prompts import render


class BashAction:
    def __init__(self, runtime: Any, limits: Limits, track_writes: bool = False):
        self.runtime, self.limits, self.track_writes = runtime, limits, track_writes

    def __call__(self, step: AgentStep, action: Action) -> str:
        limits = self.limits
        try:
            if self.track_writes:
                result, changed = self.runtime.run_tracked(action.command, timeout=limits.command_timeout,
                                                           output_limit=limits.observation_limit)
                step.changed_files = sorted(changed)
            else:
                result = self.runtime.run(action.command, timeout=limits.command_timeout,
                                          output_limit=limits.observation_limit)
        except ResourceLimitHit as hit:  # a fork bomb, a runaway write: killed, and the end of this agent
            if hit.result is not None:
                step.exit_code, step.output, step.timed_out = (hit.result.exit_code, hit.result.output,
                                                               hit.result.timed_out)
            raise Stop(ExitReason.RESOURCE_LIMIT, str(hit)) from None
        except (ContainerDied, OSError) as error:
            raise workspace_failure(error) from error
        step.exit_code, step.output, step.timed_out = result.exit_code, result.output, result.timed_out
        step.command_seconds = round(result.duration, 4)
        return render("observation.md.j2", exit_code=result.exit_code, output=result.output,
                      timed_out=result.timed_out, timeout=int(limits.command_timeout), cut_bytes=result.cut_bytes)

    def restore(self, step: AgentStep) -> None:
        """A recorded command run again, as a resumed agent rebuilds its workspace."""
        try:
            self.runtime.run(step.command, timeout=self.limits.command_timeout, output_limit=1000)
        except ResourceLimitHit:
            pass  # it ran into the limits the first time too, and was killed again
