"""The one workspace a team shares: commands run concurrently, journalled, and which files each may have changed.

Workers share one working tree, as a real team does, so their commands (tests, builds, edits) run at
the same time, each with its own timeout. Nothing traces a process's writes, so a change is pinned on
commands by time: each command's *window* runs from a snapshot of the tree taken before it starts to
one taken after it ends, and every change between the two is attributed to it. When other agents'
commands overlapped that window, a change may be theirs: ``writes`` names, per path, the other agents
whose own windows also saw that path change (or that are still running), and a path nobody else can
have changed is the agent's for sure. A stray write is therefore always reported: for sure when its
author ran alone, as possibly its author's (naming the others) when several ran at once.

An editor call that writes (``JournalledEditor``: create, str_replace, insert, undo_edit) takes part as a command
does: it has a seq, overlaps the commands running around it, and its one line in the journal holds the call
itself; the path it wrote is its agent's for sure. The editors of one workspace share one lock, so two agents'
edits of one file never interleave (no lost update).

The journal (``commands.jsonl``) holds one line per agent command (or written edit), written in the order the commands
**finished** (a line waits for those of commands that ended before it), so the file is in finishing
order; each line also has the command's start order (``seq``), its start and end times (Unix
seconds), the paths its window saw change and the commands it overlapped. A resumed
team restores the workspace from the journal in file order, one command or edit at a time (edits through their
agents' editors, which so get back their undo history): the working tree comes back as it was
whenever concurrent commands changed different files or the one that finished later wrote last.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pipeline.edits.editor import Editor, EditorCall, EditorResult
from pipeline.rundir.storage import append_jsonl, write_text_atomic
from pipeline.runtime.base import GIT_QUIET, CommandResult, Runtime
from pipeline.runtime.output import DEFAULT_LIMIT

log = logging.getLogger(__name__)
JOURNAL_ORDER = "finished"  # the journal's lines are in the order their commands finished
_MARK = "@@swepipe-team@@"
# Dirty paths (status and content hash) of the working tree; hashes of regular files in one git process.
# GIT_OPTIONAL_LOCKS=0: the status never takes .git/index.lock, so an agent's own git command running at
# the same time is not refused.
SNAPSHOT = (
    'export GIT_OPTIONAL_LOCKS=0; '
    f'st=$({GIT_QUIET} -c core.quotepath=off status --porcelain=v1 -uall --no-renames 2>/dev/null | head -n 2000); '
    'files=$(printf "%s\\n" "$st" | while IFS= read -r l; do p="${l:3}"; '
    '[ -n "$p" ] && [ -f "$p" ] && printf "%s\\n" "$p"; done); '
    f'printf "%s\\n" "$st"; echo {_MARK}; printf "%s\\n" "$files"; echo {_MARK}; '
    '[ -z "$files" ] || printf "%s\\n" "$files" | git hash-object --stdin-paths 2>/dev/null; true'
)


class SharedWorkspace:
    """A Runtime several agents use at once (through ``for_agent``); commands are not serialised.

    ``lock`` guards only the bookkeeping (who is running, the journal, the snapshot cache): no command
    runs under it. The runtime must take concurrent ``run`` calls (LocalRuntime and DockerRuntime do).
    """

    def __init__(self, runtime: Runtime, journal: Path | None = None):
        self.runtime = runtime
        self.workdir, self.base_commit = runtime.workdir, runtime.base_commit
        self.journal = journal
        self.lock = threading.RLock()
        self._seq = 0  # agent commands started so far (their start order)
        self._running: dict[int, dict] = {}  # seq -> the journal entry of a command whose window is open
        self.commands: dict[int, dict] = {}  # seq -> the journal entry of a finished command
        self._executing = 0  # commands whose process runs now (agent commands and file writes)
        self._starts = 0  # how many ever started: a snapshot is still true while this is unchanged and none runs
        self._snapshot: tuple[int, dict[str, str]] | None = None
        self._finished = 0  # agent commands whose process has ended (a ticket each, in that order)
        self._journalled = 0  # the tickets up to this one have their journal line written (or have none)
        self._done: set[int] = set()  # tickets past ``_journalled`` already done (line written, or none to write)
        self._turn = threading.Condition(self.lock)

    def for_agent(self, name: str) -> AgentView:
        return AgentView(self, name)

    # -- commands ----------------------------------------------------------------------------

    def run(self, command: str, timeout: float = 60, output_limit: int | None = DEFAULT_LIMIT,
            agent: str | None = None) -> CommandResult:
        """An agent's command (journalled, its window's changes recorded), or with no agent a read of the tree."""
        if agent is None:
            return self.runtime.run(command, timeout=timeout, output_limit=output_limit)
        return self.run_tracked(command, timeout, output_limit, agent)[0]

    def run_tracked(self, command: str, timeout: float = 60, output_limit: int | None = DEFAULT_LIMIT,
                    agent: str = "") -> tuple[CommandResult, set[str]]:
        """Run ``command`` for ``agent``; the paths that changed in its window (see the module's docstring)."""
        entry = self._open(agent, command=command, timeout=timeout)  # before the first snapshot: its window
        ticket = None
        try:
            before = self.snapshot()
            self._started(entry)
            try:
                result = self.runtime.run(command, timeout=timeout, output_limit=output_limit)
            finally:
                ticket = self._ended(entry)
            after = self.snapshot()
        except BaseException:
            with self.lock:
                self._running.pop(entry["seq"], None)
                if ticket is not None:
                    self._journal_in_turn(ticket, None)
            raise
        changed = {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}
        with self.lock:
            self._running.pop(entry["seq"], None)
            entry.update(exit_code=result.exit_code, changed=sorted(changed))
            self.commands[entry["seq"]] = entry
            self._journal_in_turn(ticket, entry)
        return result, changed

    def run_edit(self, agent: str, call: EditorCall, apply: Callable[[EditorCall], EditorResult]) -> EditorResult:
        """``apply(call)`` for ``agent``, as a command would run: overlapping the commands around it, and
        journalled (the call itself) when it wrote a file."""
        entry = self._open(agent, edit=call.to_dict())
        self._started(entry)
        result = None
        try:
            result = apply(call)
        finally:
            ticket = self._ended(entry)
            with self.lock:
                self._running.pop(entry["seq"], None)
                written = result.written if result is not None else None
                if written is not None:
                    entry.update(ok=True, changed=[written], certain=True)
                    self.commands[entry["seq"]] = entry
                self._journal_in_turn(ticket, entry if written is not None else None)
        return result

    def _open(self, agent: str, **fields) -> dict:
        """A new journal entry for ``agent``, its window open: it and the entries open now overlap."""
        with self.lock:
            self._seq += 1
            entry = {"seq": self._seq, "agent": agent, **fields, "overlapped": sorted(self._running)}
            for other in self._running.values():
                other["overlapped"].append(entry["seq"])
            self._running[entry["seq"]] = entry
        return entry

    def _started(self, entry: dict) -> None:
        """``entry``'s process begins: a snapshot taken from now until it ends is not kept."""
        with self.lock:
            self._executing += 1
            self._starts += 1
        entry["started"] = time.time()

    def _ended(self, entry: dict) -> int:
        """``entry``'s process has ended; its ticket, the order its journal line takes (``_journal_in_turn``)."""
        with self.lock:
            entry["ended"] = time.time()
            self._finished += 1
            self._executing -= 1
            return self._finished

    def _journal_in_turn(self, ticket: int, entry: dict | None) -> None:
        """Under the lock: write ``entry``'s journal line once every command that ended before it is done with
        its line, so the file is in finishing order even when an earlier finisher's closing snapshot is slower
        (a resumed team restores from it in that order). ``None``: a command cut short has no line; nobody waits
        for it, nor for a line that could not be written."""
        try:
            while entry is not None and self._journalled + 1 < ticket:
                self._turn.wait()
            if entry is not None and self.journal is not None:
                append_jsonl(self.journal, entry)
        finally:
            self._done.add(ticket)
            while self._journalled + 1 in self._done:
                self._journalled += 1
                self._done.discard(self._journalled)
            self._turn.notify_all()

    def writes(self, agent: str) -> dict[str, list[str]]:
        """Each path ``agent``'s commands saw change, with the other agents that may have changed it instead
        (those whose overlapping commands saw it change too, or are still running); [] when it was surely
        ``agent``."""
        found: dict[str, set[str]] = {}
        with self.lock:
            for entry in self.commands.values():
                if entry["agent"] != agent:
                    continue
                overlapping = (self.commands.get(seq) or self._running.get(seq) for seq in entry.get("overlapped", []))
                others = [o for o in overlapping if o is not None and o["agent"] != agent]
                for path in entry.get("changed", []):
                    suspects = found.setdefault(path, set())
                    if entry.get("certain"):  # an editor write: its agent's, whoever else ran
                        continue
                    suspects.update(o["agent"] for o in others if "changed" not in o or path in o["changed"])
        return {path: sorted(suspects) for path, suspects in sorted(found.items())}

    def attributed(self, agent: str) -> bool:
        """Whether every command of ``agent`` on record says what it changed (a journal from before this record
        does not: its workers' earlier records stand)."""
        with self.lock:
            return all("changed" in e for e in self.commands.values() if e["agent"] == agent)

    def restore(self, completed: dict[str, int], editors: dict[str, JournalledEditor] | None = None) -> int:
        """Run again the journal's commands and edits that the agents' saved trajectories show as done, in its order.

        ``completed`` is, per agent, how many of its commands and written edits its trajectory holds with
        their output; one made after the last save is left out, as its agent will make it again. ``editors``
        are the agents' editors, through which their edits are made again.
        The journal is in finishing order (``JOURNAL_ORDER``), and so is the restore, one command at a time.
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
        for entry in kept:
            with self.lock:
                self._starts += 1
            if "edit" in entry:
                editor = (editors or {}).get(entry.get("agent", ""))
                if editor is None:
                    raise ValueError(f"{self.journal} holds an edit by {entry.get('agent')!r}, who has no editor now")
                editor.restore(EditorCall.from_dict(entry["edit"]))
            else:
                self.runtime.run(entry["command"], timeout=entry.get("timeout", 60), output_limit=1000)
        with self.lock:
            for number, entry in enumerate(kept, 1):
                entry.setdefault("seq", number)
                self.commands[entry["seq"]] = entry
            self._seq = max([self._seq, *self.commands])
        # The journal now says exactly what the working tree holds.
        write_text_atomic(self.journal, "".join(json.dumps(entry) + "\n" for entry in kept))
        return len(kept)

    def snapshot(self) -> dict[str, str]:
        """The dirty paths of the tree; reused while nothing has run since it was taken."""
        with self.lock:
            if self._snapshot is not None and self._snapshot[0] == self._starts and not self._executing:
                return self._snapshot[1]
            starts, idle = self._starts, not self._executing
        result = self.runtime.run(SNAPSHOT, timeout=120, output_limit=None)
        state = _parse_snapshot(result.output) if result.exit_code == 0 else {}
        with self.lock:
            if idle and not self._executing and self._starts == starts:  # nothing ran while it was taken
                self._snapshot = (starts, state)
        return state

    def read_file(self, path: str) -> bytes:
        return self.runtime.read_file(path)

    def write_file(self, path: str, data: bytes | str) -> None:
        with self.lock:
            self._executing += 1
            self._starts += 1
        try:
            self.runtime.write_file(path, data)
        finally:
            with self.lock:
                self._executing -= 1

    def diff(self) -> str:
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

    def open_editor(self, output_limit: int) -> JournalledEditor:
        return JournalledEditor(self, output_limit)


class JournalledEditor(Editor):
    """One agent's editor on the shared workspace: its probes and reads are not the agent's commands, its
    writes are journalled under the agent's name, and it shares one lock with every editor of the workspace."""

    def __init__(self, view: AgentView, output_limit: int):
        super().__init__(view.workspace, output_limit=output_limit)
        self.view = view

    def __call__(self, call: EditorCall) -> EditorResult:
        if call.command == "view":
            return super().__call__(call)
        return self.view.workspace.run_edit(self.view.agent, call, super().__call__)

    def restore(self, call: EditorCall) -> None:
        """Make a journalled edit again on the rebuilt tree (not journalled twice); its undo history comes back."""
        result = super().__call__(call)
        if not result.ok:
            log.warning("restoring %s's %s of %s did not apply again (%s); the agent goes on from the tree as it is",
                        self.view.agent, call.command, call.path, result.observation[:300])


def _parse_snapshot(output: str) -> dict[str, str]:
    parts = output.split(_MARK + "\n")
    if len(parts) != 3:
        return {}
    status, files, hashes = (part.splitlines() for part in parts)
    state = {line[3:]: line[:2] for line in status if len(line) > 3}
    for path, digest in zip((f for f in files if f), hashes, strict=False):
        state[path] = f"{state.get(path, '??')} {digest}"
    return state
