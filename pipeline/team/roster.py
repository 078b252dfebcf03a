"""Who is on a team, what each is doing, the messages between them, and the record of it on disk."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.agent.actions import FormatError
from pipeline.agent.loop import AgentLimits
from pipeline.storage import write_json_atomic
from pipeline.team.actions import STAGES, ActionError, worker_name
from pipeline.team.agent import Inbox, InboxItem


@dataclass
class TeamSettings:
    mode: str = "blocking"  # or async
    stages: str = "all"  # planning, implementation, verification or all
    size: int = 3  # workers at a time
    sizing: str = "lead"  # or fixed: every delegation uses the whole team
    messages: bool = True
    report_chars: int = 4000
    lead_limits: AgentLimits = field(default_factory=AgentLimits)
    worker_limits: AgentLimits = field(default_factory=AgentLimits)
    worker_budget: float | None = None  # dollars per worker

    @property
    def allowed_stages(self) -> tuple[str, ...]:
        return STAGES if self.stages == "all" else (self.stages,)

    @classmethod
    def from_config(cls, cfg) -> TeamSettings:
        team, limits = cfg.team, cfg.limits.agent_limits()
        worker_limits = AgentLimits(**{**limits.__dict__, "max_steps": team.worker_max_steps or limits.max_steps})
        return cls(mode=team.mode, stages=team.stages, size=team.size, sizing=team.sizing, messages=team.messages,
                   report_chars=team.report_chars, lead_limits=limits, worker_limits=worker_limits,
                   worker_budget=cfg.budgets.per_rollout)


class Team:
    """The workers of one task, the lead's inbox, and delegations.json / messages.json kept current."""

    def __init__(self, settings: TeamSettings, workspace, worker_client, budget, directory: Path):
        self.settings, self.workspace, self.worker_client, self.budget = settings, workspace, worker_client, budget
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.workers: dict[str, object] = {}  # name -> Worker, in the order they were delegated
        self.lead_inbox = Inbox()
        self.lead_status = "reading the issue"
        self.lock = threading.RLock()
        self.messages: list[dict] = []
        self.started = time.time()

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
        lines = [f"Team ({s.mode} lead, {'exactly' if s.sizing == 'fixed' else 'at most'} {s.size} worker(s) "
                 f"at a time, stages: {', '.join(s.allowed_stages)}):", f"- lead: {self.lead_status}"]
        with self.lock:
            lines += [f"- {worker.status_line()}" for worker in self.workers.values()]
        if not self.workers:
            lines.append("- no workers yet")
        return "\n".join(lines)

    def send(self, sender: str, to: str, text: str) -> str:
        """Deliver a message before each recipient's next turn; the sender's observation says to whom."""
        if not self.settings.messages:
            raise ActionError("messages are turned off for this team")
        to = to.strip().lower()
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
                         "sent": self.elapsed(), "delivered": None}
                self.messages.append(entry)
                inbox = self.lead_inbox if recipient == "lead" else self.workers[recipient].agent.inbox
                inbox.put(InboxItem(sender, "message", f'<message from="{sender}">\n{text}\n</message>',
                                    on_delivery=lambda entry=entry: self._delivered(entry)))
                if recipient != "lead" and self.workers[recipient].state != "running":
                    notes.append(f"{recipient} has finished: it reads this only if the lead resumes it")
            self.save()
        return f"message sent to {', '.join(recipients)}" + (f" ({'; '.join(notes)})" if notes else "")

    def _delivered(self, entry: dict) -> None:
        with self.lock:
            entry["delivered"] = self.elapsed()
            self.save()

    def save(self) -> None:
        with self.lock:
            records = [worker.record for worker in self.workers.values()]
            counts = {stage: sum(1 for r in records if r["stage"] == stage) for stage in STAGES}
            s = self.settings
            write_json_atomic(self.directory / "delegations.json", {
                "mode": s.mode, "stages": s.stages, "size": s.size, "sizing": s.sizing, "started": self.started,
                "counts": {**counts, "total": len(records)}, "delegations": records})
            write_json_atomic(self.directory / "messages.json", self.messages)
