"""The team analysis's numbers: team tasks summarised (per run, per lead model), and a task's timeline as rows of
bars before it is drawn. A record that is missing stays None (shown n/a), never zero."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from pipeline.analysis.team.records import STAGES, TeamRun, TeamTask, merged_waits


@dataclass
class TeamSummary:
    """One group of team tasks (a run, or a lead model across runs)."""

    name: str
    tasks: int
    runs: list[str]
    counted: int  # tasks whose delegations are known
    delegations_mean: float | None
    delegations_median: float | None
    by_stage_mean: dict[str, float | None]
    any_delegation: float | None  # share of counted tasks with at least one delegation
    message_tasks: int  # tasks with messages.json
    directions: Counter  # summed over those tasks
    messages: int
    malformed: int
    wait_tasks: int  # tasks with lead_waits.json
    blocked_mean: float | None  # seconds per task
    blocked_median: float | None
    blocked_share: float | None  # blocked seconds / the lead's wall time, over tasks with both
    lost_tasks: int | None  # tasks where the lead submitted with workers running (None: no task recorded it)
    lost_recorded: int  # tasks with a lost_work record
    lost_workers: int
    lost_commands: int
    lost_files: int

    @property
    def malformed_share(self) -> float | None:
        return self.malformed / self.messages if self.messages else None


def summarise(name: str, tasks: list[TeamTask]) -> TeamSummary:
    # Each list keeps the tasks that recorded the thing, with it (a TeamTask's derived numbers are None exactly
    # when their record is).
    counted = [t.counts for t in tasks if t.counts is not None]
    totals = [float(total) for t in tasks if (total := t.total) is not None]
    with_messages = [t.messages for t in tasks if t.messages is not None]
    directions = sum((found for t in tasks if (found := t.directions()) is not None), Counter())
    with_waits = [t for t in tasks if t.waits is not None]
    blocked = [seconds for t in with_waits if (seconds := t.blocked) is not None]
    timed = [(waited, lead) for t in with_waits if (waited := t.blocked) is not None and (lead := t.lead_seconds)]
    recorded = [t for t in tasks if t.lost_work is not None]
    lost = [(t.instance_id, works) for t in recorded if (works := t.lost_work)]
    return TeamSummary(
        name=name, tasks=len(tasks), runs=list(dict.fromkeys(t.run_id for t in tasks)), counted=len(counted),
        delegations_mean=_mean(totals), delegations_median=_median(totals),
        by_stage_mean={stage: _mean([float(counts.get(stage, 0)) for counts in counted]) for stage in STAGES},
        any_delegation=(sum(1 for v in totals if v > 0) / len(totals)) if totals else None,
        message_tasks=len(with_messages), directions=directions,
        messages=sum(len(messages) for messages in with_messages),
        malformed=sum(malformed for t in tasks if (malformed := t.malformed) is not None),
        wait_tasks=len(with_waits), blocked_mean=_mean(blocked), blocked_median=_median(blocked),
        blocked_share=(sum(w for w, _ in timed) / sum(lead for _, lead in timed)) if timed else None,
        lost_tasks=len(lost) if recorded else None, lost_recorded=len(recorded),
        lost_workers=sum(len(works) for _, works in lost),
        lost_commands=sum(w.commands for _, works in lost for w in works),
        lost_files=len({(instance_id, f) for instance_id, works in lost for w in works for f in w.files}))


def by_lead_model(runs: list[TeamRun]) -> list[TeamSummary]:
    """How often each lead model delegates, over every team task of the runs given."""
    groups: dict[str, list[TeamTask]] = {}
    for run in runs:
        for task in run.tasks:
            groups.setdefault(task.lead_model, []).append(task)
    return [summarise(model, tasks) for model, tasks in groups.items()]


@dataclass
class Bar:
    start: float
    end: float
    kind: str  # a stage, "lead", "lead blocked", or "after the lead submitted"
    open_end: bool = False  # no end on record: drawn to the team's end


@dataclass
class TimelineRow:
    agent: str  # "lead" or a worker's name
    bars: list[Bar]
    marks: list[tuple[float, bool]] = field(default_factory=list)  # messages it sent: (time, malformed)


def timeline(task: TeamTask) -> list[TimelineRow]:
    """One row per agent, the lead first: the lead working (and blocked, from lead_waits.json), each worker's
    sessions coloured by stage, the part of them after the lead submitted marked when work was lost."""
    end = task.end
    lead_end = task.lead_seconds if task.lead_seconds else end
    lead = TimelineRow("lead", [Bar(0.0, lead_end, "lead")]
                       + [Bar(start, stop, "lead blocked") for start, stop in merged_waits(task.waits or [])])
    rows = [lead]
    lost = {w.worker for w in task.lost_work or []}
    for delegation in task.delegations or []:
        bars = []
        for session in delegation.sessions:
            if session.start is None:
                continue
            stop = session.end if session.end is not None else end
            bars.append(Bar(session.start, max(stop, session.start), delegation.stage, session.end is None))
            if delegation.worker in lost and task.lead_seconds and stop > task.lead_seconds:
                bars.append(Bar(max(session.start, task.lead_seconds), stop, "after the lead submitted"))
        rows.append(TimelineRow(delegation.worker, bars))
    by_agent = {row.agent: row for row in rows}
    for message in task.messages or []:
        if message.time is not None and message.sender in by_agent:
            by_agent[message.sender].marks.append((message.time, message.malformed))
    return rows


def _mean(values: list[float]) -> float | None:
    return float(statistics.fmean(values)) if values else None


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None
