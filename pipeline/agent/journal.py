"""The agent's trajectory on disk: what each step added, appended after every paid reply and every answer; read
back to resume; and the whole trajectory written once when a session ends (pipeline.records.trajectory says how
the two files fit). The reply journal (models.client) holds a paid reply until the trajectory does.

Writing only what changed keeps the bytes written per trajectory near its final size at any step count; a whole
rewrite after every step grew with the square of the steps.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypedDict

from pipeline.agent.agent_run import AgentRun, AgentStep
from pipeline.agent.transcript import Transcript
from pipeline.errors import StorageFault
from pipeline.records.chat import ChatMessage
from pipeline.records.trajectory import JOURNAL_FORMAT, read_trajectory
from pipeline.rundir.layout import reply_journal, trajectory_journal
from pipeline.rundir.storage import append_jsonl, remove, write_failure, write_json_atomic

_LISTS = ("messages", "steps")

Scalar = str | int | float | bool | None  # a top-level field of AgentRun other than its lists

# One line of the journal (pipeline.records.trajectory.apply_entry reads it back): the whole record, or the fields
# set, the messages replaced ([index, message] or [index, shell, [before, step, after]]), the messages extended
# ([index, offset, text]) and the steps changed ([index, fields]); the first line also names the journal's format.
JournalEntry = TypedDict("JournalEntry", {
    "journal": int, "whole": dict[str, Any], "set": dict[str, Scalar], "messages": list[list[Any]],
    "extend": list[list[Any]], "steps": list[list[Any]]}, total=False)


class TrajectoryJournal:
    def __init__(self, path: Path | None, *, whole_at_end: bool = True):
        """``whole_at_end``: a finished session writes the whole trajectory to ``path`` and drops its journal;
        without it the owner keeps the trajectory elsewhere (a junior's rollout record) and removes the journal
        (``discard``)."""
        self.path = path
        self.whole_at_end = whole_at_end
        self.steps_journal = trajectory_journal(path) if path is not None else None
        self.reply_journal = reply_journal(path) if path is not None else None
        self._written: _Written | None = None  # what the files hold, once this process wrote or read them
        self._unsure = False  # a save failed: the journal may hold less than ``_written`` says

    def load(self) -> AgentRun | None:
        """The trajectory an earlier session saved, marked resumed; None when there is none worth going on from."""
        if self.path is None:
            return None
        saved = read_trajectory(self.path)
        if saved.problem is not None or not isinstance(saved.data, dict) or not saved.data.get("messages"):
            return None
        record = AgentRun.from_dict(saved.data)
        self._written, self._unsure = _Written.of(record), False
        record.resumed = True
        return record

    def save(self, transcript: Transcript, seconds: float) -> None:
        """What changed since the last save, appended to the journal; StorageFault when the journal cannot be
        written (the disk full, an I/O error): the record keeps what was not saved, and the next save writes the
        whole record, so the journal never falls out of step with the agent."""
        with transcript.lock:
            record = transcript.record
            record.seconds = round(seconds, 3)
            if self.steps_journal is None:
                return
            if self._written is None:  # a new trajectory: whatever an older one left is replaced
                remove(self.steps_journal)
            if self._written is None or self._unsure:
                entry: JournalEntry = {"whole": record.to_dict()}
                written = _Written.of(record)
            else:
                entry, written = self._written.changes(record), self._written
            if entry:
                first = not self.steps_journal.exists()
                try:
                    append_jsonl(self.steps_journal, JournalEntry(journal=JOURNAL_FORMAT, **entry) if first else entry)
                except OSError as error:
                    # What the journal holds is not what ``written`` says now: the next save states it whole.
                    self._unsure = self._written is not None
                    raise StorageFault(f"the trajectory {self.steps_journal} could not be saved: "
                                       f"{write_failure(error)}. Its steps since the last save are not on disk; "
                                       "a rerun of the same run id resumes from that save") from error
            self._written, self._unsure = written, False

    def end_session(self, transcript: Transcript, seconds: float) -> None:
        """The session's last save; with ``whole_at_end`` the whole trajectory then goes to ``path`` and the
        journal, folded into it, is removed."""
        self.save(transcript, seconds)
        if self.path is None or self.steps_journal is None or not self.whole_at_end:
            return
        with transcript.lock:
            try:
                write_json_atomic(self.path, transcript.record.to_dict())
            except OSError as error:  # the journal holds it all: a rerun finds the session ended
                raise StorageFault(f"the trajectory {self.path} could not be written: {write_failure(error)}; "
                                   "its journal holds every step") from error
        remove(self.steps_journal)

    def discard(self) -> None:
        """The trajectory is kept elsewhere now (a rollout record): its files here go."""
        for path in (self.path, self.steps_journal):
            if path is not None:
                remove(path)

    def forget_reply(self) -> None:
        """The trajectory holds the last reply now: its journal is not needed (nor kept after the agent)."""
        if self.reply_journal is not None:
            self.reply_journal.unlink(missing_ok=True)


class _Written:
    """What the trajectory's files hold: the top-level fields, messages and steps as last written, to tell what a
    save has to add. Messages and steps are compared field by field (a string the record still holds compares by
    identity first), so a save costs no serialising of what did not change."""

    def __init__(self) -> None:
        self.fields: dict[str, Scalar] = {}
        self.messages: list[ChatMessage] = []
        self.steps: list[AgentStep] = []

    @classmethod
    def of(cls, record: AgentRun) -> _Written:
        written = cls()
        written.take(record)
        return written

    def take(self, record: AgentRun) -> None:
        self.fields = _fields(record)
        self.messages = [copy.deepcopy(message) for message in record.messages]
        self.steps = [copy.deepcopy(step) for step in record.steps]

    def changes(self, record: AgentRun) -> JournalEntry:
        """The journal entry that brings the files from what they hold to ``record`` (empty: nothing changed)."""
        if len(record.messages) < len(self.messages) or len(record.steps) < len(self.steps):
            entry: JournalEntry = {"whole": record.to_dict()}  # shrunk: no rule of the agent does that today
            self.take(record)
            return entry
        entry = {}
        fields = _fields(record)
        changed = {key: value for key, value in fields.items() if self.fields.get(key, _ABSENT) != value}
        if changed:
            entry["set"] = copy.deepcopy(changed)
            self.fields = fields
        self._message_changes(record, entry)
        self._step_changes(record, entry)
        return entry

    def _message_changes(self, record: AgentRun, entry: JournalEntry) -> None:
        replaced: list[list[Any]] = []
        extended: list[list[Any]] = []
        for index, message in enumerate(record.messages):
            if index < len(self.messages):
                before = self.messages[index]
                if message == before:
                    continue
                old, new = before.get("content"), message.get("content")
                if (isinstance(old, str) and isinstance(new, str) and new.startswith(old)
                        and {**message, "content": old} == before):
                    extended.append([index, len(old), new[len(old):]])
                else:
                    replaced.append(_message_entry(index, message, record))
                self.messages[index] = copy.deepcopy(message)
            else:
                replaced.append(_message_entry(index, message, record))
                self.messages.append(copy.deepcopy(message))
        if replaced:
            entry["messages"] = replaced
        if extended:
            entry["extend"] = extended

    def _step_changes(self, record: AgentRun, entry: JournalEntry) -> None:
        changed: list[list[Any]] = []
        for index, step in enumerate(record.steps):
            if index < len(self.steps):
                before = self.steps[index]
                if step == before:
                    continue
                differ = {f.name: getattr(step, f.name) for f in dataclasses.fields(step)
                          if getattr(before, f.name) != getattr(step, f.name)}
                changed.append([index, copy.deepcopy(differ)])
                for name, value in differ.items():
                    setattr(before, name, copy.deepcopy(value))
            else:
                changed.append([index, asdict(step)])
                self.steps.append(copy.deepcopy(step))
        if changed:
            entry["steps"] = changed


_ABSENT = object()
SHARED_OUTPUT = 256  # an output at least this long, shown whole in a message, is written once: in its step


def _message_entry(index: int, message: ChatMessage, record: AgentRun) -> list[Any]:
    """``[index, message]``; for an observation that shows its step's output, ``[index, message without its
    content, [before, step, after]]`` (pipeline.records.trajectory)."""
    content = message.get("content")
    step = record.steps[-1] if record.steps else None
    output = step.output if step is not None else None
    if isinstance(content, str) and isinstance(output, str) and len(output) >= SHARED_OUTPUT:
        at = content.find(output)
        if at >= 0:
            shell = {key: value for key, value in message.items() if key != "content"}
            return [index, copy.deepcopy(shell), [content[:at], len(record.steps) - 1, content[at + len(output):]]]
    return [index, copy.deepcopy(message)]


def _fields(record: AgentRun) -> dict[str, Scalar]:
    return {key: value for key, value in vars(record).items() if key not in _LISTS}
