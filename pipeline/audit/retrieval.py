"""The retrieval audit: a trajectory read for the agent reaching for the answer instead of deriving it.

Only the agent's own actions are read: the commands of its bash calls and the paths of its editor calls, never
the task's text, the model's prose or what a command printed (a problem statement that links github.com, an output
full of commit hashes). Each action's command is read as the shell reads it (``pipeline.audit.invocations``: the
programs it runs, through ``&&``, pipes, subshells, ``bash -c``, ``eval``, inline Python and Node) and judged by
three rules, one a kind of reaching (KINDS):

- ``history`` (``pipeline.audit.history``): history beyond the base commit (other refs, reflogs, unreachable
  objects, a commit not reachable from the base);
- ``network`` (``pipeline.audit.network``): the repository, its fix or a newer release fetched over the network;
- ``outside`` (``pipeline.audit.outside``): the solution read from outside the task (the host's files, another
  task's folder, a harness's run files, a copy of the project installed elsewhere).

A step yields at most one finding a kind: its number, the command as recorded (its first COMMAND_CHARS characters)
and the first reason found. The audit never raises, whatever a trajectory holds; each module's docstring lists
what it flags and what it leaves alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from pipeline.audit.history import KnownHashes, git_subcommand, history_reason
from pipeline.audit.invocations import invocations
from pipeline.audit.network import network_reason
from pipeline.audit.outside import editor_reason, outside_reason
from pipeline.audit.project import Subject

KINDS = {"history": "read history beyond the base commit",
         "network": "fetched the repository, its fix or a release over the network",
         "outside": "read from outside the task"}
COMMAND_CHARS = 4000
_EDITOR_ACTIONS = ("str_replace_editor", "edit", "view")


@dataclass(frozen=True)
class AgentAction:
    """One action of the agent: a bash command (``path`` None), or an editor call (``command`` as ``"view
    /path"``, ``path`` its path); ``output`` what the command printed (read only for the hashes an honest git
    command showed); ``step`` its number as the trajectory's reader numbers it."""

    step: int
    command: str
    path: str | None = None
    output: str | None = None


class FindingData(TypedDict):
    """A finding as a record's ``retrieval`` list holds it (pipeline.records.retrieval.RetrievalFinding)."""

    kind: str
    step: int
    command: str
    reason: str
    agent: NotRequired[str]  # whose, where a record holds several agents' findings


@dataclass(frozen=True)
class Reaching:
    """One finding: a step that reached for the answer, of one kind (a key of KINDS), and why."""

    kind: str  # a key of KINDS
    step: int
    command: str  # as recorded, its first COMMAND_CHARS characters
    reason: str

    def to_dict(self) -> FindingData:
        return {"kind": self.kind, "step": self.step, "command": self.command, "reason": self.reason}


def audit(actions: Iterable[AgentAction], subject: Subject) -> list[Reaching]:
    """The findings of ``actions`` (in the order they ran) on the task ``subject``, in step order."""
    known = KnownHashes()
    known.add(subject.base_commit or "")
    known.add_text(subject.task_text)
    findings: list[Reaching] = []
    for action in actions:
        if not isinstance(action.command, str):
            continue
        found = _step(action, subject, known)
        findings += found
        if action.path is None and not any(finding.kind == "history" for finding in found) and \
                _runs_git(action.command):
            known.add_text(action.output)
    return findings


def _step(action: AgentAction, subject: Subject, known: KnownHashes) -> list[Reaching]:
    shown = action.command[:COMMAND_CHARS] + ("…" if len(action.command) > COMMAND_CHARS else "")
    if action.path is not None:
        why = editor_reason(action.path, subject)
        return [Reaching("outside", action.step, shown, why)] if why else []
    reasons: dict[str, str] = {}
    for invocation in invocations(action.command):
        for kind in KINDS:
            if kind not in reasons:
                why = (history_reason(invocation, known) if kind == "history" else
                       network_reason(invocation, subject) if kind == "network" else
                       outside_reason(invocation, subject))
                if why:
                    reasons[kind] = f"{_shown_words(invocation.words)}: {why}"
    return [Reaching(kind, action.step, shown, reasons[kind]) for kind in KINDS if kind in reasons]


def _runs_git(command: str) -> bool:
    return any(git_subcommand(invocation) is not None for invocation in invocations(command))


def _shown_words(words: tuple[str, ...], limit: int = 160) -> str:
    text = " ".join(words)
    return text if len(text) <= limit else text[:limit] + "…"


# -- the actions of a trajectory ---------------------------------------------------------------------------------

def agent_actions(trajectory: Any) -> list[AgentAction]:
    """The actions of a swepipe agent's trajectory (pipeline.agent.agent_run.AgentRun as a dict, as its record or
    file holds it): each bash step's command and output, each editor call's path; steps numbered by their
    ``index`` (from 0, as task pages number them). Whatever else a file holds is skipped."""
    steps = trajectory.get("steps") if isinstance(trajectory, dict) else None
    actions: list[AgentAction] = []
    for position, step in enumerate(steps if isinstance(steps, list) else []):
        if not isinstance(step, dict):
            continue
        index = step.get("index")
        number = index if isinstance(index, int) and not isinstance(index, bool) else position
        command, output = step.get("command"), step.get("output")
        if step.get("action") in (None, "", "bash") and isinstance(command, str):
            actions.append(AgentAction(number, command, output=output if isinstance(output, str) else None))
        elif step.get("action") in _EDITOR_ACTIONS:
            edits = step.get("edits")
            for edit in edits if isinstance(edits, list) else []:
                path = edit.get("path") if isinstance(edit, dict) else None
                if isinstance(path, str):
                    actions.append(AgentAction(number, f"{edit.get('command')} {path}", path=path))
    return actions


def finding_dicts(findings: list[Reaching], agent: str | None = None) -> list[FindingData]:
    """Findings as a record's ``retrieval`` list holds them (``agent``: whose, where a record holds several)."""
    found = []
    for finding in findings:
        data = finding.to_dict()
        if agent:
            data["agent"] = agent
        found.append(data)
    return found


def audit_agent(trajectory: Any, subject: Subject, agent: str | None = None) -> list[FindingData]:
    """The findings on a swepipe agent's trajectory (``agent_actions``), as a record's ``retrieval`` holds them."""
    return finding_dicts(audit(agent_actions(trajectory), subject), agent)


def reached_line(reached: Any) -> str:
    """What a pool candidate's ``reached`` entries (``{rollout, findings}``) say, in one line for the senior's and
    the principal's prompts: each rollout's first finding (its step, what it meant, the command's first line) and
    how many more it has; "" for none. The commands are shown as recorded, cut, never interpreted."""
    parts = []
    for entry in reached if isinstance(reached, list) else []:
        findings = [f for f in entry.get("findings") or [] if isinstance(f, dict)] if isinstance(entry, dict) else []
        if not findings:
            continue
        first = findings[0]
        command = str(first.get("command") or "")
        line = command.split("\n", 1)[0]
        line = line[:120] + ("…" if len(line) > 120 or "\n" in command else "")
        more = f"; {len(findings) - 1} more step(s)" if len(findings) > 1 else ""
        parts.append(f"rollout {entry.get('rollout')} at step {first.get('step')} "
                     f"{KINDS.get(str(first.get('kind')), 'reached for the answer')}: {line}{more}")
    return "; ".join(parts)
