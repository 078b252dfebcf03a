"""The actions a role adds beside bash and the editor (a team's delegate, wait, message, ...), and submit."""

from __future__ import annotations

from collections.abc import Callable

from pipeline.agent.actions import Action, ActionError, FormatError
from pipeline.agent.agent_run import AgentStep, Stop
from pipeline.agent.failures import briefly, workspace_failure
from pipeline.errors import ContainerDied, InfrastructureFault
from pipeline.records.trajectory import ExitReason


class RoleActions:
    """Each action's handler takes the action block's text; what it returns is the observation."""

    def __init__(self, handlers: dict[str, Callable[[str], str]]):
        self.handlers = handlers

    def __call__(self, step: AgentStep, action: Action) -> str:
        try:
            observation = self.handlers[action.kind](action.body)
        except (FormatError, Stop):
            raise
        except ActionError as error:
            observation = f"error: {error}"
        except (ContainerDied, OSError) as error:
            raise workspace_failure(error) from error
        except InfrastructureFault:
            raise
        except Exception as error:  # noqa: BLE001 - the action fails alone; the agent is told and goes on
            observation = f"error: the {action.kind} action failed ({briefly(error)})"
        step.output = observation
        return observation


class SubmitAction:
    """Ends the agent's work, unless its submission has a problem (a format error: the agent is asked again) or
    the role refuses to let it submit yet (not a format error: the refusal is the observation)."""

    def __init__(self, check: Callable[[str], str | None] | None = None,
                 guard: Callable[[], str | None] | None = None):
        self.check, self.guard = check, guard

    def __call__(self, step: AgentStep, action: Action) -> str:
        problem = self.check(action.body) if self.check else None
        if problem:
            raise FormatError(problem)
        refusal = self.guard() if self.guard else None
        if refusal:
            step.output = refusal
            return refusal
        raise Stop(ExitReason.SUBMITTED, submission=action.body)
