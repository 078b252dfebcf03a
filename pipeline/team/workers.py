"""A worker's life: started on its own thread with a fresh context, stopped, resumed, and its report."""

from __future__ import annotations

import threading
import time
import traceback

from pipeline.agent.agent import Agent, prompt
from pipeline.agent.inbox import InboxItem
from pipeline.agent.settings import AgentSettings
from pipeline.control.stopping import Stopped
from pipeline.errors import InfrastructureFault
from pipeline.records.chat import ChatMessage
from pipeline.records.trajectory import ExitReason
from pipeline.rundir.storage import write_text_atomic
from pipeline.team.actions import ActionError, DelegationRequest, inside, report_block
from pipeline.text.prompts import render


class Worker:
    def __init__(self, number: int, delegation: DelegationRequest, team, lead_step: int):
        self.number, self.name, self.delegation, self.team = number, f"worker-{number}", delegation, team
        self.state = "running"  # running, then reported (report waiting for the lead), collected or stopped
        self.done = threading.Event()
        self.thread: threading.Thread | None = None
        s = team.settings
        # Times: delegated_at, started_at and ended_at are Unix seconds; offset and the sessions' started and
        # ended are seconds since the team started (delegations.json's "started").
        self.record = {"worker": self.name, "by": "lead", "stage": delegation.stage, "task": delegation.task,
                       "writable": delegation.writable, "lead_step": lead_step, "delegated_at": time.time(),
                       "started_at": time.time(), "ended_at": None,
                       "offset": team.elapsed(), "sessions": [], "state": self.state, "exit_reason": None,
                       "error": None, "steps": 0, "seconds": 0.0, "cost": 0.0, "input_tokens": 0, "output_tokens": 0,
                       "changed_files": [], "writes_outside": [], "possibly_changed": {}, "possible_writes_outside": {},
                       "report": None, "collected": None, "stopped_by": None, "lost_work": None}
        # With the directory off a worker knows of no other worker: no listing, and messages to the lead only.
        actions = {"directory": lambda body: team.directory_text()} if s.directory else {}
        if s.messages:
            actions["message"] = lambda body: team.message_action(self.name, body)
        self.agent = Agent(AgentSettings(
            self.name, team.worker_client, team.workspace.for_agent(self.name),
            team.budget.child(self.name, team.worker_budget), team.worker_limits, agent_index=number,
            trajectory_path=team.files.worker_trajectory(self.name), actions=actions,
            check_submission=_needs_report, track_writes=True))

    @classmethod
    def restore(cls, record: dict, team) -> Worker:
        """A worker of an earlier session of this task, its conversation continued from its trajectory."""
        delegation = DelegationRequest(record["task"], record["stage"], record["writable"])
        worker = cls(int(record["worker"].split("-")[1]), delegation, team, record["lead_step"])
        worker.record.update(record)
        if worker.agent.resume(restore=False):  # the team's journal rebuilds the workspace
            # Its own limit counts what it spent before, from the ledger as the task's does (models.client).
            worker.agent.budget.seed(team.worker_client.spent_by(worker.name))
        worker.state = record["state"]
        if worker.state != "running":
            worker.done.set()
        return worker

    def start(self, lead_step: int, instructions: str | None = None) -> None:
        """Begin (or, with ``instructions``, resume) a session on a thread of its own."""
        if instructions is not None:
            self.agent.add_user_message(render("team_resume.md.j2", text=instructions))
            self.agent.new_session()
        with self.team.lock:
            self.record["sessions"].append({"lead_step": lead_step, "started": self.team.elapsed(),
                                            "started_at": time.time(), "instructions": instructions})
            self.team.save()  # on disk before it acts, so a resumed task knows the session began
        self.go_on()

    def go_on(self) -> None:
        """Run the current session on a thread of its own (also one cut short by the end of a process)."""
        if not self.agent.record.messages:
            self.agent.record.messages.extend(self._prompt())
        with self.team.lock:
            self.state, self.record["state"], self.record["stopped_by"] = "running", "running", None
            self.done.clear()
            self.agent.stop_event.clear()
        self.thread = threading.Thread(target=self._session, name=self.name, daemon=True)
        self.thread.start()

    def _prompt(self) -> list[ChatMessage]:
        """Its task alone, its folders and the team directory as it stands when it starts."""
        limits = self.team.worker_limits
        sees_team = self.team.settings.directory
        return prompt("team_worker_system.md.j2", "team_worker_instance.md.j2", name=self.name,
                      stage=self.delegation.stage, task=self.delegation.task,
                      writable=describe(self.delegation.writable), workdir=str(self.team.workspace.workdir),
                      command_timeout=int(limits.command_timeout), max_steps=limits.max_steps,
                      messages=self.team.settings.messages, sees_team=sees_team,
                      directory=self.team.directory_text() if sees_team else "", tools=limits.action_format == "tools",
                      editor=bool(self.agent.editor_commands))

    def _session(self) -> None:
        try:
            try:
                self.agent.run()
            except (Stopped, InfrastructureFault) as error:
                # Cut short by the run's stop, or infrastructure failed: no outcome; the resumed task goes on.
                if isinstance(error, InfrastructureFault):
                    self.team.infra_error = error
                return
            except Exception as error:  # noqa: BLE001 - a broken worker is reported to the lead, not fatal
                self.agent.record.exit_reason = ExitReason.ERROR
                self.agent.record.error = f"{type(error).__name__}: {error}"
                write_text_atomic(self.team.files.worker_error(self.name), traceback.format_exc())
            if not self.team.abandoned:
                self._finish()
        finally:
            self.done.set()  # whatever happened, nobody waits for it in vain

    def _finish(self) -> None:
        run, s = self.agent.record, self.team.settings
        report = report_block(run.submission or "") if run.exit_reason == ExitReason.SUBMITTED else None
        if report and len(report) > s.report_chars:
            report = report[:s.report_chars] + f"\n[... report cut at {s.report_chars} characters]"
        with self.team.lock:
            stopped = run.exit_reason == ExitReason.STOPPED
            self.state = "stopped" if stopped else "reported"
            if self.record["sessions"]:
                self.record["sessions"][-1].update(ended=self.team.elapsed(), ended_at=time.time(),
                                                   exit_reason=run.exit_reason)
            self.record.update(state=self.state, exit_reason=run.exit_reason, error=run.error, steps=len(run.steps),
                               seconds=run.seconds, cost=round(run.cost, 8), input_tokens=run.input_tokens,
                               output_tokens=run.output_tokens, report=report, ended_at=time.time())
            self.attribute_writes()
            self.post_report()
            self.team.save()

    def attribute_writes(self) -> None:
        """Its changed files from the workspace's record: those surely its own (``changed_files``), and those that
        changed while other agents' commands ran too (``possibly_changed``: path -> the others); each kind's
        paths outside its folders."""
        if not self.team.workspace.attributed(self.name):
            return
        writes = self.team.workspace.writes(self.name)
        writable = self.delegation.writable
        sure = [path for path, others in writes.items() if not others]
        maybe = {path: others for path, others in writes.items() if others}
        self.record.update(changed_files=sure, writes_outside=[p for p in sure if not inside(p, writable)],
                           possibly_changed=maybe,
                           possible_writes_outside={p: o for p, o in maybe.items() if not inside(p, writable)})

    def post_report(self) -> None:
        """Its report (or why it has none) into the lead's inbox."""
        run, record = self.agent.record, self.record
        last = [step.command.splitlines()[0][:120] for step in run.steps[-3:] if step.command]
        text = render("team_report.md.j2", name=self.name, stage=self.delegation.stage, report=record["report"],
                      exit_reason=record["exit_reason"], error=record["error"], steps=record["steps"],
                      last_commands=last, changed=record["changed_files"], outside=record["writes_outside"],
                      maybe=record.get("possibly_changed") or {},
                      maybe_outside=record.get("possible_writes_outside") or {},
                      writable=describe(self.delegation.writable))
        self.team.lead_inbox.put(InboxItem(self.name, "report", text, on_delivery=self._collected))

    def _collected(self) -> None:
        with self.team.lock:
            if self.state == "reported":
                self.state = "collected"
            self.record.update(state=self.state, collected=self.team.elapsed())
            self.team.save()

    def request_stop(self, by: str) -> None:
        """Ask the worker to end after its current model call or command."""
        with self.team.lock:
            if self.state == "running":
                self.record["stopped_by"] = by
                self.agent.stop_event.set()

    def status_line(self) -> str:
        run = self.agent.record
        task = self.delegation.task.strip().splitlines()[0][:100]
        writes = describe(self.delegation.writable)
        last = next((s.command for s in reversed(run.steps) if s.command), None)
        doing = f"; last: {last.splitlines()[0][:80]}" if last and self.state == "running" else ""
        return (f"{self.name} [{self.delegation.stage}, {self.state}, {len(run.steps)} steps{doing}]: {task} "
                f"(may write: {writes})")

    def check_text(self) -> str:
        run = self.agent.record
        lines = [self.status_line(), f"  ${run.cost:.4f} so far, {run.seconds:.0f} s"]
        for step in run.steps[-3:]:
            what = ((step.command or step.format_error or "").splitlines() or [""])[0][:120]
            lines.append(f"  step {step.index} ({step.action or 'format error'}): {what}"
                         + (f" -> exit {step.exit_code}" if step.exit_code is not None else ""))
        return "\n".join(lines)


def describe(writable: list[str]) -> str:
    if "." in writable:
        return "any file"
    return ", ".join(writable) or "no file"


def _needs_report(reply: str) -> str | None:
    if report_block(reply) is None:
        return ("your submission needs a ```report block for the lead (what you found or did, and what is "
                "left), in the same reply as the ```bash submit block")
    return None


def stop_all(workers: list[Worker], by: str, timeout: float) -> None:
    """Stop them all at once, then wait (at most ``timeout`` in all) until they have ended."""
    for worker in workers:
        worker.request_stop(by)
    deadline = time.monotonic() + timeout
    for worker in workers:
        worker.done.wait(max(0.0, deadline - time.monotonic()))


def require_free(team, wanted: int) -> None:
    free = team.settings.team_size - len(team.running())
    if wanted > free:
        raise ActionError(f"that needs {wanted} worker(s) but only {free} of {team.settings.team_size} are free; "
                          "wait for or stop running workers first")
