"""The lead: its team actions, the guard on its submission, and one task's whole team run."""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.agent.agent import Agent, prompt
from pipeline.agent.settings import AgentSettings
from pipeline.audit import Subject, audit_agent
from pipeline.control import stopping
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.records import TeamResult
from pipeline.records.trajectory import ExitReason
from pipeline.rundir.layout import TeamFiles
from pipeline.rundir.storage import write_json_atomic
from pipeline.runtime.base import Runtime
from pipeline.settings.config import RunConfig
from pipeline.team.actions import ActionError, parse_delegations, parse_names, parse_resume
from pipeline.team.roster import Team
from pipeline.team.workers import Worker, require_free, stop_all
from pipeline.team.workspace import SharedWorkspace
from pipeline.text.prompts import render

STOP_GRACE = 60.0  # seconds past a command's timeout a worker gets to notice it was stopped


class Lead:
    def __init__(self, team: Team):
        self.team, self.settings = team, team.settings
        self.agent: Agent | None = None
        # With the submit guard off: the moment the lead submitted (time, its patch, the tree's snapshot, and how
        # many steps each running worker had made), saved as submission.json.
        self.submission: dict | None = None

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
            names = ', '.join(w.name for w in started)
            # A blocking lead is waiting from this moment: a worker that lists the team as it starts sees so.
            team.lead_status = f"waiting for {names}" if s.mode == "blocking" else f"delegated to {names}"
            team.save()
        delegated_at = time.time()  # a blocking lead's wait begins before its first worker can run a command
        for worker in started:
            worker.start(self.step)
        return self._after_delegation(started, delegated_at)

    def _after_delegation(self, started: list[Worker], delegated_at: float | None = None) -> str:
        if self.settings.mode == "blocking":
            return self._collect(started, since=delegated_at)
        names = ", ".join(f"{w.name} ({w.delegation.stage})" for w in started)
        return (f"started {names}. They work while you go on; each report comes to you before your next turn "
                "once it is ready (```wait blocks until they report).")

    def wait(self, body: str) -> str:
        names = parse_names(body)
        workers = [self.team.get(n) for n in names] if names else self.team.running()
        return self._collect(workers)

    def _collect(self, workers: list[Worker], since: float | None = None) -> str:
        """Wait for ``workers`` to end, then hand over everything that arrived for the lead; the wait on record
        starts at ``since`` (the delegation, for a blocking lead) or now."""
        self.team.lead_status = f"waiting for {', '.join(w.name for w in workers)}" if workers else "working"
        deadline = time.monotonic() + self.team.lead_limits.wall_time
        started = time.time() if since is None else since
        for worker in workers:
            worker.done.wait(max(0.0, deadline - time.monotonic()))
        if workers:  # the lead sat idle from ``started`` until now (lead_waits.json)
            with self.team.lock:
                self.team.lead_waits.append({"start": started, "end": time.time(),
                                             "workers": [w.name for w in workers]})
                self.team.save()
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
        return self.team.message_action("lead", body)

    def guard(self) -> str | None:
        """Refuse a submission while work is still out: running workers or reports not yet read.

        With the submit guard off nothing is refused: the moment is recorded instead, since the task's
        patch is the tree as the lead submitted it, and what running workers do from then on is lost.
        """
        if not self.settings.submit_guard:
            self._note_submission()
            return None
        running = self.team.running()
        if running:
            return render("team_submit_refused.md.j2", running=[w.status_line() for w in running], arrived="")
        if self.team.lead_inbox.peek():
            return render("team_submit_refused.md.j2", running=[], arrived=self._arrived())
        return None

    def _note_submission(self) -> None:
        team = self.team
        running = team.running()
        steps = {w.name: len(w.agent.record.steps) for w in running}
        at = time.time()
        self.submission = {"time": at, "lead_step": self.step, "running": steps,
                           "snapshot": team.workspace.snapshot(), "patch": team.workspace.diff()}
        write_json_atomic(team.files.submission, self.submission)

    def lost_work(self, submission: dict) -> tuple[list[dict], list[str]]:
        """What the workers running at ``submission`` did after it (their replies, commands and the files those
        changed), once they have stopped; and every path that changed after it."""
        workspace = self.team.workspace
        at, before, after = submission["time"], submission["snapshot"], workspace.snapshot()
        changed_after = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
        lost = []
        for name, steps_before in submission["running"].items():
            worker = self.team.workers[name]
            steps = worker.agent.record.steps[steps_before:]
            with workspace.lock:
                commands = sorted((e for e in workspace.commands.values()
                                   if e["agent"] == name and e.get("ended", at) > at), key=lambda e: e["ended"])
            touched = {path for e in commands for path in e.get("changed", [])}
            lost.append({"worker": name, "steps": len(steps), "cost": round(sum(s.cost for s in steps), 8),
                         "commands": [{"command": e["command"], "started": e.get("started"), "ended": e["ended"],
                                       "exit_code": e.get("exit_code"),
                                       "started_before_submit": e.get("started", at) < at} for e in commands],
                         "files": sorted(touched & set(changed_after))})
        return lost, changed_after

    def _stop_timeout(self) -> float:
        return self.team.worker_limits.command_timeout + STOP_GRACE


def run_team(task_text: str, runtime: Runtime, lead_client: ModelClient, worker_client: ModelClient,
             budget: Budget, config: RunConfig, directory: Path, subject: Subject | None = None) -> TeamResult:
    """The lead and its workers on one workspace; the result holds the workspace's final diff, and the retrieval
    audit's findings on every member's trajectory (``subject``: the task, as pipeline.audit knows it).

    A task cut short by the end of a process goes on from its records: the workspace is rebuilt from
    the command journal, workers come back in the state they were in (running ones go on), and the
    lead's conversation continues, so no reply is paid for twice.
    """
    workspace = SharedWorkspace(runtime, journal=TeamFiles(directory).commands)
    team = Team(config, workspace, worker_client, budget, directory)
    lead = Lead(team)
    limits = team.lead_limits
    lead.agent = Agent(AgentSettings("lead", lead_client, workspace.for_agent("lead"), budget, limits,
                                     trajectory_path=TeamFiles(directory).lead_trajectory, actions=lead.actions(),
                                     guard_submission=lead.guard, inbox=team.lead_inbox))
    if lead.agent.resume(restore=False):
        _restore(team, lead, lead.agent)
    else:
        s = team.settings
        system = "team_lead_system_piv.md.j2" if s.lead_prompt == "piv" else "team_lead_system.md.j2"
        lead.agent.record.messages = prompt(
            system, "team_lead_instance.md.j2", workdir=str(workspace.workdir),
            command_timeout=int(limits.command_timeout), max_steps=limits.max_steps, task_text=task_text,
            mode=s.mode, stages=list(s.allowed_stages), size=s.team_size, sizing=s.sizing, messages=s.messages,
            guard=s.submit_guard, sees_team=s.directory, worker_max_steps=team.worker_limits.max_steps,
            directory=team.directory_text(), tools=limits.action_format == "tools",
            editor=bool(lead.agent.editor_commands))
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
    submission = lead.submission if run.exit_reason == ExitReason.SUBMITTED else None
    stopped = [w.name for w in team.running()]
    # Submitted with the guard off while workers ran: they are stopped as the stop action does, and their
    # work from the submission on is lost; the patch is the tree as the lead submitted it.
    early = bool(submission and submission["running"])
    stop_all(team.running(), "lead submitted" if early else "end of task", lead._stop_timeout())
    changed_after: list[str] = []
    if early and submission is not None:
        team.lost_work, changed_after = lead.lost_work(submission)
        for lost in team.lost_work:
            team.workers[lost["worker"]].record["lost_work"] = lost
    with team.lock:
        for worker in team.workers.values():  # every command has ended: who changed what is as sure as it gets
            worker.attribute_writes()
        team.save()
    unread = sorted({item.sender for item in team.lead_inbox.peek() if item.kind == "report"})
    records = [w.record for w in team.workers.values()]
    subject = subject or Subject(repo_root=str(workspace.workdir))
    retrieval = audit_agent(run.to_dict(), subject, "lead") + [
        finding for name, worker in team.workers.items()
        for finding in audit_agent(worker.agent.record.to_dict(), subject, name)]
    return TeamResult.of({
        "exit_reason": run.exit_reason, "error": run.error, "steps": len(run.steps), "workers": len(records),
        "delegations": {stage: sum(1 for r in records if r["stage"] == stage)
                        for stage in ("planning", "implementation", "verification")},
        "stopped_at_end": stopped, "unread_reports": unread,
        "writes_outside": {r["worker"]: r["writes_outside"] for r in records if r["writes_outside"]},
        "possible_writes_outside": {r["worker"]: r["possible_writes_outside"] for r in records
                                    if r.get("possible_writes_outside")},
        "submit_guard": team.settings.submit_guard, "lost_work": team.lost_work,
        "files_changed_after_submit": changed_after,
        "resumed": run.resumed, "patch": submission["patch"] if submission else workspace.diff(),
        "retrieval": retrieval})


def _restore(team: Team, lead: Lead, lead_agent: Agent) -> None:
    """The team as an earlier session of this task left it: workers, unread reports and messages, workspace."""
    delegations, messages = team.saved()
    team.started = delegations.get("started", team.started)
    for record in delegations.get("delegations", []):
        worker = Worker.restore(record, team)
        team.workers[worker.name] = worker
    agents = {name: worker.agent for name, worker in team.workers.items()} | {"lead": lead_agent}
    team.workspace.restore({name: agent.journalled_steps() for name, agent in agents.items()},
                          editors={name: agent.editor for name, agent in agents.items() if agent.editor})
    team.restore_messages(messages)
    lead.submission = team.read(team.files.submission, None)
    submitted = lead_agent.finished and lead_agent.record.exit_reason == ExitReason.SUBMITTED and lead.submission
    for worker in team.workers.values():
        if worker.state == "reported":  # its report had not reached the lead
            worker.post_report()
        elif worker.state == "running" and submitted:  # the lead had submitted (guard off): nothing goes on
            worker.state = worker.record["state"] = "stopped"
            worker.record["stopped_by"] = "lead submitted"
            worker.done.set()
        elif worker.state == "running":
            worker.go_on()
