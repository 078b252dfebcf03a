"""The one workspace a team shares: commands serialised and journalled, and which files each command changed."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from pipeline.runtime.base import GIT_QUIET, CommandResult, Runtime
from pipeline.runtime.output import DEFAULT_LIMIT
from pipeline.storage import append_jsonl, write_text_atomic

_MARK = "@@swepipe-team@@"
# Dirty paths (status and content hash) of the working tree; hashes of regular files in one git process.
SNAPSHOT = (
    f'st=$({GIT_QUIET} -c core.quotepath=off status --porcelain=v1 -uall --no-renames 2>/dev/null | head -n 2000); '
    'files=$(printf "%s\\n" "$st" | while IFS= read -r l; do p="${l:3}"; '
    '[ -n "$p" ] && [ -f "$p" ] && printf "%s\\n" "$p"; done); '
    f'printf "%s\\n" "$st"; echo {_MARK}; printf "%s\\n" "$files"; echo {_MARK}; '
    '[ -z "$files" ] || printf "%s\\n" "$files" | git hash-object --stdin-paths 2>/dev/null; true'
)


class SharedWorkspace:
    """A Runtime whose calls are serialised by one lock (LocalRuntime has none of its own).

    Each agent acts through its own view (``for_agent``), which writes every command it ran to the
    journal, in order, so that a resumed team rebuilds the working tree by replaying them.
    """

    def __init__(self, runtime: Runtime, journal: Path | None = None):
        self.runtime = runtime
        self.workdir, self.base_commit = runtime.workdir, runtime.base_commit
        self.journal = journal
        self.lock = threading.RLock()
        self._generation = 0  # commands run so far; a snapshot taken at the same generation is still true
        self._snapshot: tuple[int, dict[str, str]] | None = None

    def for_agent(self, name: str) -> AgentView:
        return AgentView(self, name)

    def run(self, command: str, timeout: float = 60, output_limit: int | None = DEFAULT_LIMIT,
            agent: str | None = None) -> CommandResult:
        with self.lock:
            self._generation += 1
            result = self.runtime.run(command, timeout=timeout, output_limit=output_limit)
            if agent is not None and self.journal is not None:
                append_jsonl(self.journal, {"agent": agent, "command": command, "timeout": timeout,
                                            "exit_code": result.exit_code})
            return result

    def run_tracked(self, command: str, timeout: float = 60, output_limit: int | None = DEFAULT_LIMIT,
                    agent: str | None = None) -> tuple[CommandResult, set[str]]:
        """Run ``command`` and name the repository paths it changed (nobody else runs in between)."""
        with self.lock:
            before = self.snapshot()
            result = self.run(command, timeout=timeout, output_limit=output_limit, agent=agent)
            after = self.snapshot()
        changed = {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}
        return result, changed

    def replay(self, completed: dict[str, int]) -> int:
        """Run again the journal's commands that the agents' saved trajectories show as done, in order.

        ``completed`` is, per agent, how many of its commands its trajectory holds with their
        output; a command run after the last save is left out, as its agent will run it again.
        """
        if self.journal is None or not self.journal.exists():
            return 0
        seen: dict[str, int] = {}
        kept = []
        for line in self.journal.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut short by a kill
            agent = entry.get("agent", "")
            seen[agent] = seen.get(agent, 0) + 1
            if seen[agent] <= completed.get(agent, 0):
                kept.append(entry)
        with self.lock:
            for entry in kept:
                self._generation += 1
                self.runtime.run(entry["command"], timeout=entry.get("timeout", 60), output_limit=1000)
        # The journal now says exactly what the working tree holds.
        write_text_atomic(self.journal, "".join(json.dumps(entry) + "\n" for entry in kept))
        return len(kept)

    def snapshot(self) -> dict[str, str]:
        with self.lock:
            if self._snapshot is not None and self._snapshot[0] == self._generation:
                return self._snapshot[1]
            result = self.runtime.run(SNAPSHOT, timeout=120, output_limit=None)
            state = _parse_snapshot(result.output) if result.exit_code == 0 else {}
            self._snapshot = (self._generation, state)
            return state

    def read_file(self, path: str) -> bytes:
        with self.lock:
            return self.runtime.read_file(path)

    def write_file(self, path: str, data: bytes | str) -> None:
        with self.lock:
            self._generation += 1
            self.runtime.write_file(path, data)

    def diff(self) -> str:
        with self.lock:
            return self.runtime.diff()

    def stop(self) -> None:
        self.runtime.stop()


class AgentView:
    """One agent's hands on the shared workspace: its commands go to the journal under its name."""

    def __init__(self, workspace: SharedWorkspace, agent: str):
        self.workspace, self.agent = workspace, agent
        self.workdir, self.base_commit = workspace.workdir, workspace.base_commit

    def run(self, command: str, timeout: float = 60, output_limit: int | None = DEFAULT_LIMIT) -> CommandResult:
        return self.workspace.run(command, timeout, output_limit, agent=self.agent)

    def run_tracked(self, command: str, timeout: float = 60,
                    output_limit: int | None = DEFAULT_LIMIT) -> tuple[CommandResult, set[str]]:
        return self.workspace.run_tracked(command, timeout, output_limit, agent=self.agent)

    def read_file(self, path: str) -> bytes:
        return self.workspace.read_file(path)

    def write_file(self, path: str, data: bytes | str) -> None:
        self.workspace.write_file(path, data)

    def diff(self) -> str:
        return self.workspace.diff()


def _parse_snapshot(output: str) -> dict[str, str]:
    parts = output.split(_MARK + "\n")
    if len(parts) != 3:
        return {}
    status, files, hashes = (part.splitlines() for part in parts)
    state = {line[3:]: line[:2] for line in status if len(line) > 3}
    for path, digest in zip((f for f in files if f), hashes):
        state[path] = f"{state.get(path, '??')} {digest}"
    return state
