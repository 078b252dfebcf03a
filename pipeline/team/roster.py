"""Who is on a team, what each is doing, the messages between them, and the record of it on disk."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.agent.actions import FormatError
from pipeline.agent.inbox import Inbox, InboxItem
from pipeline.records import TeamDelegations, Unreadable
from pipeline.rundir.layout import TeamFiles
from pipeline.rundir.storage import write_json_atomic
from pipeline.settings.config import RunConfig
from pipeline.team.actions import STAGES, ActionError, parse_message, worker_name

if TYPE_CHECKING:
    from pipeline.team.workers import Worker


class Team:
    """The workers of one task, the lead's inbox, and delegations.json / messages.json kept current."""

    def __init__(self, config: RunConfig, workspace, worker_client, budget, directory: Path):
        self.settings = config.team
        self.lead_limits, self.worker_limits = config.limits, config.worker_limits()
        self.worker_budget = config.budgets.per_rollout
        self.workspace, self.worker_client, self.budget = workspace, worker_client, budget
        self.directory = directory
        self.files = TeamFiles(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.workers: dict[str, Worker] = {}  # name -> Worker, in the order they were delegated
        self.lead_inbox = Inbox()
        self.lead_status = "reading the issue"
        self.lock = threading.RLock()
        self.messages: list[dict] = []  # every message sent, and every malformed attempt (malformed: true)
        self.lead_waits: list[dict] = []  # {start, end, workers}: the lead blocked waiting on workers (Unix seconds)
        self.lost_work: list[dict] = []  # with the submit guard off: what workers did after the lead submitted
        self.started = time.time()
        self.infra_error: BaseException | None = None  # infrastructure failed under a worker: the task reruns
        self.abandoned = False  # the task was cut short: what workers do from now on is not recorded

    def saved(self) -> tuple[dict, list[dict]]:
        """What delegations.json and messages.json held when an earlier session of this task ended
        (lead_waits.json goes straight back into ``lead_waits``)."""
        self.lead_waits = self.read(self.files.lead_waits, [])
        delegations = TeamDelegations.read(self.files.delegations)
        recorded = {} if isinstance(delegations, Unreadable) else delegations.to_dict()
        return recorded, self.read(self.files.messages, [])

    def read(self, path: Path, empty):
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return empty

    def restore_messages(self, messages: list[dict]) -> None:
        """Messages of an earlier session; those not yet read go back into their recipients' inboxes."""
        with self.lock:
            self.messages = messages
            for entry in messages:
                if entry.get("delivered") is None:
                    self._post(entry)

    def elapsed(self) -> float:
        return round(time.time() - self.started, 3)

    def get(self, name: str):
        with self.lock:
            if name not in self.workers:
                known = ", ".join(self.workers) or "none yet"
                raise ActionError(f"there is no {name} (workers: {known})")
            return self.workers[name]

    def running(self) -> list:
        with self.lock:
            return [w for w in self.workers.values() if w.state == "running"]

    def directory_text(self) -> str:
        s = self.settings
        lines = [f"Team ({s.mode} lead, {'exactly' if s.sizing == 'fixed' else 'at most'} {s.team_size} worker(s) "
                 f"at a time, stages: {', '.join(s.allowed_stages)}):", f"- lead: {self.lead_status}"]
        with self.lock:
            lines += [f"- {worker.status_line()}" for worker in self.workers.values()]
        if not self.workers:
            lines.append("- no workers yet")
        return "\n".join(lines)

    def message_action(self, sender: str, body: str) -> str:
        """A ```message block of ``sender``: sent, or on record as malformed (and the sender told why)."""
        try:
            to, text = parse_message(body)
            return self.send(sender, to, text)
        except (FormatError, ActionError) as error:
            with self.lock:
                self.messages.append({"id": len(self.messages), "from": sender, "to": _addressee(body), "text": body,
                                      "sent": self.elapsed(), "time": time.time(), "delivered": None,
                                      "malformed": True, "problem": str(error)})
                self.save()
            raise

    def send(self, sender: str, to: str, text: str) -> str:
        """Deliver a message before each recipient's next turn; the sender's observation says to whom."""
        if not self.settings.messages:
            raise ActionError("messages are turned off for this team")
        to = to.strip().lower()
        if sender != "lead" and not self.settings.directory and to != "lead":
            raise ActionError("you can send messages to the lead only (to: lead)")
        with self.lock:
            if to == "all":
                recipients = ["lead", *self.workers]
            elif to == "lead":
                recipients = ["lead"]
            else:
                try:
                    recipients = [worker_name(to)]
                except FormatError as error:
                    raise ActionError(f"{error}; send to lead, all or a worker") from None
                self.get(recipients[0])
            recipients = [r for r in recipients if r != sender]
            if not recipients:
                raise ActionError("nobody to send that to")
            notes = []
            for recipient in recipients:
                entry = {"id": len(self.messages), "from": sender, "to": recipient, "text": text,
                         "sent": self.elapsed(), "time": time.time(), "delivered": None, "malformed": False}
                self.messages.append(entry)
                self._post(entry)
                if recipient != "lead" and self.workers[recipient].state != "running":
                    notes.append(f"{recipient} has finished: it reads this only if the lead resumes it")
            self.save()
        return f"message sent to {', '.join(recipients)}" + (f" ({'; '.join(notes)})" if notes else "")

    def _post(self, entry: dict) -> None:
        recipient, sender = entry["to"], entry["from"]
        if recipient != "lead" and recipient not in self.workers:
            return
        inbox = self.lead_inbox if recipient == "lead" else self.workers[recipient].agent.inbox
        inbox.put(InboxItem(sender, "message", f'<message from="{sender}">\n{entry["text"]}\n</message>',
                            on_delivery=lambda: self._delivered(entry)))

    def _delivered(self, entry: dict) -> None:
        with self.lock:
            entry["delivered"] = self.elapsed()
            self.save()

    def save(self) -> None:
        with self.lock:
            records = [worker.record for worker in self.workers.values()]
            counts = {stage: sum(1 for r in records if r["stage"] == stage) for stage in STAGES}
            s = self.settings
            TeamDelegations.of({
                "mode": s.mode, "stages": s.stages, "size": s.team_size, "sizing": s.sizing, "started": self.started,
                "submit_guard": s.submit_guard, "directory": s.directory, "lead_prompt": s.lead_prompt,
                "counts": {**counts, "total": len(records)},
                "lost_work": self.lost_work, "delegations": records}).write(self.files.delegations)
            write_json_atomic(self.files.messages, self.messages)
            write_json_atomic(self.files.lead_waits, self.lead_waits)


def _addressee(body: str) -> str | None:
    """The ``to:`` a malformed message block names, when one can be read."""
    match = re.search(r"^\s*to\s*:\s*(\S[^\n]*)$", body or "", re.MULTILINE)
    return match.group(1).strip().strip("'\"") if match else None
