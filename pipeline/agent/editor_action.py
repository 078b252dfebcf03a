"""The editor action: its calls made in order until one fails, each recorded, their observations the answer."""

from __future__ import annotations

from typing import Any

from pipeline.agent.actions import EDIT, EDITOR, VIEW, Action, FormatError
from pipeline.agent.agent_run import AgentStep
from pipeline.agent.edit_actions import editor_calls
from pipeline.agent.failures import briefly, workspace_failure
from pipeline.edits.editor import Editor, EditorResult, open_editor
from pipeline.errors import ContainerDied, InfrastructureFault


def editor_kinds(commands: tuple[str, ...], tools: bool) -> tuple[str, ...]:
    """How the editor is asked for: one function in the tool format; in the text format ```view, and ```edit
    unless the editor only views."""
    if not commands:
        return ()
    if tools:
        return (EDITOR,)
    return (VIEW,) if commands == ("view",) else (EDIT, VIEW)


class EditorAction:
    def __init__(self, runtime: Any, output_limit: int, commands: tuple[str, ...]):
        self.commands = commands
        self.editor: Editor = open_editor(runtime, output_limit)

    def __call__(self, step: AgentStep, action: Action) -> str:
        try:
            results = self.apply(action)
        except FormatError:
            raise
        except (ContainerDied, OSError) as error:  # the runtime under the editor, as under a command
            raise workspace_failure(error) from error
        except InfrastructureFault:
            raise
        except Exception as error:  # noqa: BLE001 - a call no rule foresaw fails alone; the agent is told
            raise FormatError(f"your editor action could not be carried out ({briefly(error)})") from error
        step.edits = [result.record() for result in results]
        step.changed_files = sorted({result.written for result in results if result.written})
        observation = "\n\n".join(result.observation for result in results)
        if not results[-1].ok and len(results) > 1:
            observation += "\n\nThe edits before this one were made; the ones after it were not tried."
        step.output = observation
        return observation

    def apply(self, action: Action) -> list[EditorResult]:
        """The results of ``action``'s calls, made until one fails; FormatError when it holds none usable."""
        results: list[EditorResult] = []
        for call in editor_calls(action, self.commands):
            results.append(self.editor(call))
            if not results[-1].ok:
                break
        return results

    def restore(self, step: AgentStep) -> None:
        """A recorded editor action made again, as a resumed agent rebuilds its workspace: the same calls on the
        same files."""
        self.apply(Action(step.action, step.command or ""))
