"""The lead: its team actions, the guard on its submission, and one task's whole team run."""

from __future__ import annotations

import time
from pathlib import Path

from pipeline import stopping
from pipeline.agent.agent import Agent, prompt
from pipeline.config import RunConfig
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.prompts import render
from pipeline.runtime.base import Runtime
from pipeline.team.actions import ActionError, parse_delegations, parse_message, parse_names, parse_resume
from pipeline.team.roster import Team
from pipeline.team.workers import Worker, require_free, stop_all
from pipeline.team.workspace import SharedWorkspace

STOP_GRACE = 60.0  # seconds past a command's timeout a worker gets to notice it was stopped


class Lead:
    def __init__(self, team: Team):
        self.team, self.settings = team, team.settings
        self.agent: Agent | None = None

    @property
    def step(self) -> int:
        return len(self.agent.record.steps) - 1 if self.agent else -1

    def actions(self) -> dict:
        actions = {"delegate": self.delegate, "wait": self.wait, "check": self.check, "stop": self.stop,
                   "resume": self.resume, "directory": lambda body: self.team.directory_text()}
        if self.settings.messages:
            actions["message"] = self.message
        return actions

    def delegate(self, body: str) -> str:
        s, team = self.settings, self.team
        # A delegation this very step made before the process ended: its workers exist; go on with them.
        earlier = [w for w in team.workers.values() if w.record["lead_step"] == self.step]
        if earlier:
            return self._after_delegation(earlier)
        default = s.stages if s.stages != "all" else None
        delegations = parse_delegations(body, default, str(team.workspace.workdir))
        refused = sorted({d.stage for d in delegations} - set(s.allowed_stages))
        if refused:
            raise ActionError(f"this team's workers serve only {', '.join(s.allowed_stages)}, "
                              f"not {', '.join(refused)}")
        if s.sizing == "fixed":
            if len(delegations) == 1:
                delegations = delegations * s.team_size
            elif len(delegations) != s.team_size:
                raise ActionError(f"your team has exactly {s.team_size} workers and each delegation uses all of them: "
                                  f"give one task (every worker gets it) or a list of {s.team_size}")
        require_free(team, len(delegations))
        with team.lock:
            started = []
            for delegation in delegations:
                worker = Worker(len(team.workers), delegation, team, self.step)
                team.workers[worker.name] = worker
                started.append(worker)
            team.lead_status = f"delegated to {', '.join(w.name for w in started)}"
            team.save()
        for worker in started:
            worker.start(self.step)
        return self._after_delegation(started)

    def _after_delegation(self, started: list[Worker]) -> str:
        if self.settings.mode == "blocking":
            return self._collect(started)
        names = ", ".join(f"{w.name} ({w.delegation.stage})" for w in started)
        return (f"started {names}. They work while you go on; each report comes to you before your next turn "
                "once it is ready (```wait blocks until they report).")

    def wait(self, body: str) -> str:
        names = parse_names(body)
        workers = [self.team.get(n) for n in names] if names else self.team.running()
        return self._collect(workers)

    def _collect(self, workers: list[Worker]) -> str:
        """Wait for ``workers`` to end, then hand over everything that arrived for the lead."""
        self.team.lead_status = f"waiting for {', '.join(w.name for w in workers)}" if workers else "working"
        deadline = time.monotonic() + self.team.lead_limits.wall_time
        for worker in workers:
            worker.done.wait(max(0.0, deadline - time.monotonic()))
        if self.team.infra_error is not None:
            raise self.team.infra_error
        stopping.check()
        self.team.lead_status = "working"
        arrived = self._arrived()
        if arrived:
            return arrived
        still = [w.name for w in workers if w.state == "running"]
        return f"still running: {', '.join(still)}" if still else "no worker is running and nothing has arrived"

    def _arrived(self) -> str:
        items = self.team.lead_inbox.take()
        reports = sorted((i for i in items if i.kind == "report"), key=lambda i: self.team.get(i.sender).number)
        return "\n\n".join(i.text for i in [*reports, *(i for i in items if i.kind != "report")])

    def check(self, body: str) -> str:
        names = parse_names(body)
        workers = [self.team.get(n) for n in names] if names else list(self.team.workers.values())
        if not workers:
            return "no workers yet"
        return "\n".join(worker.check_text() for worker in workers)

    def stop(self, body: str) -> str:
        names = parse_names(body)
        workers = [self.team.get(n) for n in names] if names else self.team.running()
        running = [w for w in workers if w.state == "running"]
        if not running:
            return "\n\n".join(filter(None, ["none of those workers is running", self._arrived()]))
        stop_all(running, "lead", self._stop_timeout())
        return f"stopped {', '.join(w.name for w in running)}\n\n" + self._arrived()

    def resume(self, body: str) -> str:
        name, text = parse_resume(body)
        worker = self.team.get(name)
        if worker.record["sessions"] and worker.record["sessions"][-1]["lead_step"] == self.step:
            # Resumed by this very step before the process ended: go on with that session.
            return self._collect([worker]) if self.settings.mode == "blocking" else f"resumed {name}"
        if worker.state == "running":
            raise ActionError(f"{name} is still running; send it a message instead")
        require_free(self.team, 1)
        earlier = self._arrived_from(name)
        worker.start(self.step, text)
        self.team.save()
        if self.settings.mode == "blocking":
            return "\n\n".join(filter(None, [earlier, self._collect([worker])]))
        return "\n\n".join(filter(None, [earlier, f"resumed {name}; its report comes when it submits again"]))

    def _arrived_from(self, name: str) -> str:
        return "\n\n".join(item.text for item in self.team.lead_inbox.take(lambda item: item.sender == name))

    def message(self, body: str) -> str:
        to, text = parse_message(body)
        return self.team.send("lead", to, text)

    def guard(self) -> str | None:
        """Refuse a submission while work is still out: running workers or reports not yet read."""
        running = self.team.running()
        if running:
            return render("team_submit_refused.md.j2", running=[w.status_line() for w in running], arrived="")
        if self.team.lead_inbox.peek():
            return render("team_submit_refused.md.j2", running=[], arrived=self._arrived())
        return None

    def _stop_timeout(self) -> float:
        return self.team.worker_limits.command_timeout + STOP_GRACE


def run_team(task_text: str, runtime: Runtime, lead_client: ModelClient, worker_client: ModelClient,
             budget: Budget, config: RunConfig, directory: Path) -> dict:
    """The lead and its workers on one workspace; the result holds the workspace's final diff.

    A task cut short by the end of a process goes on from its records: the workspace is rebuilt from
    the command journal, workers come back in the state they were in (running ones go on), and the
    lead's conversation continues, so no reply is paid for twice.
    """
    workspace = SharedWorkspace(runtime, journal=directory / "commands.jsonl")
    team = Team(config, workspace, worker_client, budget, directory)
    lead = Lead(team)
    limits = team.lead_limits
    lead.agent = Agent("lead", lead_client, workspace.for_agent("lead"), budget, limits,
                       trajectory_path=directory / "lead.trajectory.json", actions=lead.actions(),
                       guard_submission=lead.guard, inbox=team.lead_inbox)
    if lead.agent.resume(replay=False):
        _restore(team, lead)
    else:
        lead.agent.record.messages = prompt(
            "team_lead_system.md.j2", "team_lead_instance.md.j2", workdir=str(workspace.workdir),
            command_timeout=int(limits.command_timeout), max_steps=limits.max_steps, task_text=task_text,
            mode=team.settings.mode, stages=list(team.settings.allowed_stages), size=team.settings.team_size,
            sizing=team.settings.sizing, messages=team.settings.messages,
            worker_max_steps=team.worker_limits.max_steps, directory=team.directory_text(),
            tools=limits.action_format == "tools")
    team.lead_status = "working"
    team.save()
    try:
        run = lead.agent.record if lead.agent.finished else lead.agent.run()
    except BaseException:
        # Cut short (a stop, Docker trouble): the workers end, but stay "running" on record, so the
        # task resumes them where they were.
        team.abandoned = True
        stop_all(team.running(), "end of task", 0 if stopping.requested() else lead._stop_timeout())
        raise
    stopped = [w.name for w in team.running()]
    stop_all(team.running(), "end of task", lead._stop_timeout())
    team.save()
    unread = sorted({item.sender for item in team.lead_inbox.peek() if item.kind == "report"})
    records = [w.record for w in team.workers.values()]
    return {"exit_reason": run.exit_reason, "error": run.error, "steps": len(run.steps), "workers": len(records),
            "delegations": {stage: sum(1 for r in records if r["stage"] == stage)
                            for stage in ("planning", "implementation", "verification")},
            "stopped_at_end": stopped, "unread_reports": unread,
            "writes_outside": {r["worker"]: r["writes_outside"] for r in records if r["writes_outside"]},
            "resumed": run.resumed, "patch": workspace.diff()}


def _restore(team: Team, lead: Lead) -> None:
    """The team as an earlier session of this task left it: workers, unread reports and messages, workspace."""
    delegations, messages = team.saved()
    team.started = delegations.get("started", team.started)
    for record in delegations.get("delegations", []):
        worker = Worker.restore(record, team)
        team.workers[worker.name] = worker
    done = {name: sum(1 for s in w.agent.record.steps if s.action == "bash" and s.exit_code is not None)
            for name, w in team.workers.items()}
    done["lead"] = sum(1 for s in lead.agent.record.steps if s.action == "bash" and s.exit_code is not None)
    team.workspace.replay(done)
    team.restore_messages(messages)
    for worker in team.workers.values():
        if worker.state == "reported":  # its report had not reached the lead
            worker.post_report()
        elif worker.state == "running":
            worker.go_on()
