"""The agent's trajectory on disk: saved after every paid reply, read back to resume, and the reply journal
(models.client) that holds a paid reply until the trajectory does."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.agent.record import AgentRun
from pipeline.agent.transcript import Transcript
from pipeline.layout import reply_journal
from pipeline.storage import write_json_atomic


class TrajectoryJournal:
    def __init__(self, path: Path | None):
        self.path = path
        self.reply_journal = reply_journal(path) if path is not None else None

    def load(self) -> AgentRun | None:
        """The trajectory an earlier session saved, marked resumed; None when there is none worth going on from."""
        if self.path is None:
            return None
        try:
            saved = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not saved.get("messages"):
            return None
        record = AgentRun.from_dict(saved)
        record.resumed = True
        return record

    def save(self, transcript: Transcript, seconds: float) -> None:
        with transcript.lock:
            transcript.record.seconds = round(seconds, 3)
            if self.path is not None:
                write_json_atomic(self.path, transcript.record.to_dict())

    def forget_reply(self) -> None:
        """The trajectory holds the last reply now: its journal is not needed (nor kept after the agent)."""
        if self.reply_journal is not None:
            self.reply_journal.unlink(missing_ok=True)
