"""The team analysis: what a team run's lead and workers left under tasks/<id>/team/, read into plain numbers.

Read here: delegations.json (per worker its stage, task, sessions with start and end), messages.json (per message
from, to, time, malformed), lead_waits.json (the intervals the lead was blocked waiting on workers), the lead's
trajectory (its wall time), and the prediction's lost_work (with the submit guard off, what workers did after the
lead submitted). Times on disk are Unix seconds or, in older records, seconds from the team's start; here every
time is seconds from the team's start. A missing or unreadable record is None (shown n/a), never zero.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.report import tables as tab
from pipeline.report.load import RunData, TaskRecord

STAGES = ("planning", "implementation", "verification")
DIRECTIONS = ("worker→lead", "worker→worker", "lead→worker")
OTHER = "other"  # a message to or from someone else (to all, to nobody known)
ABSOLUTE = 1e8  # a time above this is Unix seconds; below, seconds from the team's start
NOT_NAMED = "(no model named: local)"


@dataclass
class Session:
    start: float | None  # seconds from the team's start
    end: float | None  # None: no end on record (cut short, or still running when the record was written)


@dataclass
class Delegation:
    worker: str
    stage: str
    task: str
    status: str
    sessions: list[Session] = field(default_factory=list)


@dataclass
class Message:
    sender: str
    recipient: str
    time: float | None
    malformed: bool

    @property
    def direction(self) -> str:
        lead_from, lead_to = self.sender == "lead", self.recipient == "lead"
        worker_from, worker_to = self.sender.startswith("worker"), self.recipient.startswith("worker")
        if worker_from and lead_to:
            return "worker→lead"
        if worker_from and worker_to:
            return "worker→worker"
        if lead_from and worker_to:
            return "lead→worker"
        return OTHER


@dataclass
class LostWork:
    worker: str
    commands: int  # commands it ran after the lead submitted
    files: list[str]  # files it changed after


@dataclass
class TeamTask:
    run_id: str
    instance_id: str
    lead_model: str
    worker_model: str
    counts: dict[str, int] | None  # delegations by stage (from delegations.json, else the prediction's counts)
    delegations: list[Delegation] | None  # None: no delegations.json
    messages: list[Message] | None  # None: no messages.json
    waits: list[tuple[float, float, list[str]]] | None  # None: no lead_waits.json
    lead_seconds: float | None  # the lead's wall time
    lost_work: list[LostWork] | None  # None: not recorded (the guard was on, or a run from before)
    guard: bool

    @property
    def total(self) -> int | None:
        return None if self.counts is None else sum(self.counts.get(stage, 0) for stage in STAGES)

    @property
    def blocked(self) -> float | None:
        """Seconds the lead spent blocked on workers (overlapping waits counted once); None without the record."""
        if self.waits is None:
            return None
        return sum(stop - start for start, stop in _merged(self.waits))

    @property
    def blocked_share(self) -> float | None:
        blocked = self.blocked
        if blocked is None or not self.lead_seconds:
            return None
        return min(1.0, blocked / self.lead_seconds)

    def directions(self) -> Counter | None:
        if self.messages is None:
            return None
        return Counter(m.direction for m in self.messages)

    @property
    def malformed(self) -> int | None:
        return None if self.messages is None else sum(m.malformed for m in self.messages)

    @property
    def end(self) -> float:
        """When the task's team ended, as far as the records say (for the timeline's axis)."""
        ends = [self.lead_seconds or 0.0]
        ends += [t for d in self.delegations or [] for s in d.sessions for t in (s.start, s.end) if t is not None]
        ends += [stop for _, stop, _ in self.waits or []]
        ends += [m.time for m in self.messages or [] if m.time is not None]
        return max(ends)


@dataclass
class TeamRun:
    run_id: str
    config: dict
    tasks: list[TeamTask]

    @property
    def team_config(self) -> dict:
        team = self.config.get("team")
        return team if isinstance(team, dict) else {}

    @property
    def guard(self) -> bool:
        return _guard(self.config)


def team_runs(runs: list[RunData]) -> list[TeamRun]:
    """The team tasks of each run that has any, in the order given."""
    found = []
    for run in runs:
        tasks = [team_task(run, t) for t in run.tasks if _is_team(run, t)]
        if tasks:
            found.append(TeamRun(run.run_id, run.config, tasks))
    return found


def team_task(run: RunData, task: TaskRecord) -> TeamTask:
    directory = run.root / "tasks" / task.instance_id / "team"
    saved = _read_json(directory / "delegations.json")
    saved = saved if isinstance(saved, dict) else None
    started = _number(saved.get("started")) if saved else None
    lead = _read_json(directory / "lead.trajectory.json")
    lead = lead if isinstance(lead, dict) else {}
    if started is None:
        started = _number(lead.get("started"))
    clock = _Clock(started)
    delegations = _delegations(saved, clock) if saved is not None else None
    counts = _counts(delegations, task.prediction)
    raw_messages = _read_json(directory / "messages.json")
    messages = _messages(raw_messages, clock) if isinstance(raw_messages, list) else None
    raw_waits = _read_json(directory / "lead_waits.json")
    waits = _waits(raw_waits, clock) if isinstance(raw_waits, list) else None
    lead_seconds = _number(lead.get("seconds"))
    if lead_seconds is None:
        lead_seconds = _number((task.prediction.get("seconds") or {}).get("team"))
    guard = _guard(run.config)
    models = task.prediction.get("models") if isinstance(task.prediction.get("models"), dict) else {}
    config_models = run.config.get("models") if isinstance(run.config.get("models"), dict) else {}
    return TeamTask(run_id=run.run_id, instance_id=task.instance_id,
                    lead_model=_model(models, config_models, "lead"),
                    worker_model=_model(models, config_models, "worker"),
                    counts=counts, delegations=delegations, messages=messages, waits=waits, lead_seconds=lead_seconds,
                    lost_work=_lost_work(task.prediction.get("lost_work", (saved or {}).get("lost_work"))),
                    guard=guard)


class _Clock:
    """Times on disk to seconds from the team's start: Unix seconds less the start, relative ones as they are."""

    def __init__(self, started: float | None):
        self.started = started

    def __call__(self, value) -> float | None:
        value = _number(value)
        if value is None:
            return None
        if value > ABSOLUTE:
            return None if self.started is None else max(0.0, value - self.started)
        return max(0.0, value)


def _delegations(saved: dict, clock: _Clock) -> list[Delegation]:
    records = saved.get("delegations")
    if not isinstance(records, list):
        return []
    if clock.started is None:  # no team start on record: the first Unix time there is stands in for it
        firsts = [_number(r.get(key)) for r in records if isinstance(r, dict) for key in ("start", "delegated_at")]
        firsts = [t for t in firsts if t is not None and t > ABSOLUTE]
        clock.started = min(firsts) if firsts else None
    found = []
    for record in records:
        if not isinstance(record, dict):
            continue
        sessions = [Session(_first(session, clock, "started", "started_at", "start"),
                            _first(session, clock, "ended", "ended_at", "end"))
                    for session in record.get("sessions") or [] if isinstance(session, dict)]
        # The whole delegation's span (start and end, Unix seconds) stands in for what its sessions lack.
        start = _first(record, clock, "start", "started_at", "delegated_at", "offset")
        end = _first(record, clock, "end", "ended_at")
        if not sessions:
            sessions = [Session(start, end)] if start is not None else []
        else:
            if sessions[0].start is None:
                sessions[0].start = start
            if sessions[-1].end is None and end is not None and end >= (sessions[-1].start or 0.0):
                sessions[-1].end = end
        stage = str(record.get("stage") or "?").strip().lower()
        found.append(Delegation(worker=str(record.get("worker") or record.get("name") or f"worker-{len(found) + 1}"),
                                stage=stage, task=str(record.get("task") or ""),
                                status=str(record.get("status") or record.get("state") or "?"), sessions=sessions))
    return found


def _first(record: dict, clock: _Clock, *keys: str) -> float | None:
    """The first of ``keys`` that holds a time, as seconds from the team's start."""
    for key in keys:
        value = clock(record.get(key))
        if value is not None:
            return value
    return None


def _counts(delegations: list[Delegation] | None, prediction: dict) -> dict[str, int] | None:
    if delegations is not None:
        return {stage: sum(1 for d in delegations if d.stage == stage) for stage in STAGES}
    counts = prediction.get("delegations")  # the prediction's own tally, when the record is gone
    if isinstance(counts, dict) and any(isinstance(counts.get(stage), int) for stage in STAGES):
        return {stage: int(counts.get(stage) or 0) for stage in STAGES}
    return None


def _messages(entries: list, clock: _Clock) -> list[Message]:
    found = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        time = entry.get("time", entry.get("sent"))
        found.append(Message(sender=str(entry.get("from") or "?").strip().lower(),
                             recipient=str(entry.get("to") or "?").strip().lower(), time=clock(time),
                             malformed=bool(entry.get("malformed"))))
    return found


def _waits(entries: list, clock: _Clock) -> list[tuple[float, float, list[str]]]:
    found = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        start, end = clock(entry.get("start")), clock(entry.get("end"))
        if start is None or end is None or end < start:  # a wait with no end was cut short: not counted
            continue
        workers = entry.get("workers")
        found.append((start, end, [str(w) for w in workers] if isinstance(workers, list) else []))
    return found


def _lost_work(value) -> list[LostWork] | None:
    """The prediction's lost_work: a list of {worker|name, commands, files|changed_files}, or a mapping
    name -> {commands, files}, or {"workers": [...]}; None when absent."""
    if value is None:
        return None
    if isinstance(value, dict) and isinstance(value.get("workers"), list):
        value = value["workers"]
    if isinstance(value, dict):
        value = [{"worker": name, **(entry if isinstance(entry, dict) else {})} for name, entry in value.items()]
    if not isinstance(value, list):
        return None
    found = []
    for entry in value:
        if not isinstance(entry, dict):
            continue
        commands = entry.get("commands")
        files = entry.get("files", entry.get("changed_files"))
        found.append(LostWork(worker=str(entry.get("worker") or entry.get("name") or "?"),
                              commands=len(commands) if isinstance(commands, list) else int(_number(commands) or 0),
                              files=[str(f) for f in files] if isinstance(files, list) else []))
    return found


def _is_team(run: RunData, task: TaskRecord) -> bool:
    strategy = task.prediction.get("strategy") or run.config.get("strategy")
    return strategy == "team"


def _guard(config: dict) -> bool:
    team = config.get("team") if isinstance(config.get("team"), dict) else {}
    return team.get("submit_guard", True) is not False  # runs from before the switch always had the guard


def _model(models: dict, config_models: dict, role: str) -> str:
    name = models.get(role)
    if not name:
        spec = config_models.get(role)
        name = spec.get("model") if isinstance(spec, dict) else None
    return str(name) if name else NOT_NAMED


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# -- numbers over tasks -------------------------------------------------------------------------------------------


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
    counted = [t for t in tasks if t.counts is not None]
    totals = [float(t.total) for t in counted]
    with_messages = [t for t in tasks if t.messages is not None]
    directions = sum((t.directions() for t in with_messages), Counter())
    with_waits = [t for t in tasks if t.waits is not None]
    blocked = [t.blocked for t in with_waits]
    timed = [t for t in with_waits if t.lead_seconds]
    recorded = [t for t in tasks if t.lost_work is not None]
    lost = [t for t in recorded if t.lost_work]
    return TeamSummary(
        name=name, tasks=len(tasks), runs=list(dict.fromkeys(t.run_id for t in tasks)), counted=len(counted),
        delegations_mean=_mean(totals), delegations_median=_median(totals),
        by_stage_mean={stage: _mean([float(t.counts.get(stage, 0)) for t in counted]) for stage in STAGES},
        any_delegation=(sum(1 for v in totals if v > 0) / len(totals)) if totals else None,
        message_tasks=len(with_messages), directions=directions,
        messages=sum(len(t.messages) for t in with_messages), malformed=sum(t.malformed for t in with_messages),
        wait_tasks=len(with_waits), blocked_mean=_mean(blocked), blocked_median=_median(blocked),
        blocked_share=(sum(t.blocked for t in timed) / sum(t.lead_seconds for t in timed)) if timed else None,
        lost_tasks=len(lost) if recorded else None, lost_recorded=len(recorded),
        lost_workers=sum(len(t.lost_work) for t in lost),
        lost_commands=sum(w.commands for t in lost for w in t.lost_work),
        lost_files=len({(t.instance_id, f) for t in lost for w in t.lost_work for f in w.files}))


def by_lead_model(runs: list[TeamRun]) -> list[TeamSummary]:
    """How often each lead model delegates, over every team task of the runs given."""
    groups: dict[str, list[TeamTask]] = {}
    for run in runs:
        for task in run.tasks:
            groups.setdefault(task.lead_model, []).append(task)
    return [summarise(model, tasks) for model, tasks in groups.items()]


# -- the timeline's data, before it is drawn ----------------------------------------------------------------------


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
                       + [Bar(start, stop, "lead blocked") for start, stop in _merged(task.waits or [])])
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


def _merged(waits: list[tuple[float, float, list[str]]]) -> list[tuple[float, float]]:
    """The waits' intervals, overlapping ones joined."""
    joined: list[list[float]] = []
    for start, stop, _ in sorted(waits):
        if joined and start <= joined[-1][1]:
            joined[-1][1] = max(joined[-1][1], stop)
        else:
            joined.append([start, stop])
    return [(start, stop) for start, stop in joined]


def _mean(values: list[float]) -> float | None:
    return float(statistics.fmean(values)) if values else None


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


# -- tables ---------------------------------------------------------------------------------------------------------


def setup_cell(run: TeamRun) -> str:
    """The run's team settings: mode, size, submit guard, directory, lead prompt."""
    team = run.team_config
    if not team:
        return "n/a (no config.yaml)"
    sizing = team.get("sizing") or "lead"
    size = team.get("size") or (3 if sizing == "fixed" else 16)
    size_text = f"{size} workers (fixed)" if sizing == "fixed" else f"up to {size} workers (lead sizes)"
    on = {True: "on", False: "off"}
    return (f"{team.get('mode') or 'blocking'}, {size_text}, submit guard {on[run.guard]}, "
            f"directory {on[team.get('directory', True) is not False]}, {team.get('lead_prompt') or 'minimal'} prompt")


def delegations_cell(s: TeamSummary) -> str:
    if s.delegations_mean is None:
        return f"{tab.NA} (no delegation record)"
    unknown = f", {s.tasks - s.counted} task(s) without a record" if s.counted != s.tasks else ""
    return f"{s.delegations_mean:.2f} ({s.delegations_median:g}){unknown}"


def stages_cell(s: TeamSummary) -> str:
    if s.delegations_mean is None:
        return tab.NA
    return " / ".join(f"{s.by_stage_mean[stage]:.2f}" for stage in STAGES)


def any_cell(s: TeamSummary) -> str:
    if s.any_delegation is None:
        return tab.NA
    return f"{round(s.any_delegation * s.counted)}/{s.counted} = {s.any_delegation:.0%}"


def directions_cell(s: TeamSummary) -> str:
    if not s.message_tasks:
        return f"{tab.NA} (no messages.json)"
    shown = " / ".join(str(s.directions.get(d, 0)) for d in DIRECTIONS)
    other = f" (+{s.directions[OTHER]} other)" if s.directions.get(OTHER) else ""
    return f"{shown}{other}; {s.messages / s.message_tasks:.2f} per task"


def malformed_cell(s: TeamSummary) -> str:
    if not s.message_tasks:
        return tab.NA
    if not s.messages:
        return "no message"
    return f"{s.malformed}/{s.messages} = {s.malformed_share:.0%}"


def blocked_cell(s: TeamSummary) -> str:
    if not s.wait_tasks:
        return f"{tab.NA} (no lead_waits.json)"
    of = f" over {s.wait_tasks} of {s.tasks} tasks" if s.wait_tasks != s.tasks else ""
    return f"{tab.seconds(s.blocked_mean)} ({tab.seconds(s.blocked_median)}){of}"


def blocked_share_cell(s: TeamSummary) -> str:
    if s.blocked_share is None:
        return tab.NA if s.wait_tasks else f"{tab.NA} (no lead_waits.json)"
    return f"{s.blocked_share:.1%}"


def lost_cell(s: TeamSummary, guard: bool | None = None) -> str:
    if not s.lost_tasks and guard:
        return "none (submit guard on)"
    if s.lost_tasks is None:
        return f"{tab.NA} (not recorded)"
    if not s.lost_tasks:
        return f"none in {s.lost_recorded} task(s)"
    return (f"{s.lost_tasks}/{s.lost_recorded} tasks: {s.lost_workers} worker(s), {s.lost_commands} command(s), "
            f"{s.lost_files} file(s) changed after the submit")


def team_overview(runs: list[TeamRun]):
    """Delegation, messages, the blocked lead and lost work, one column per team run."""
    summaries = [summarise(run.run_id, run.tasks) for run in runs]
    models = [" / ".join(dict.fromkeys(f"{t.lead_model} / {t.worker_model}" for t in run.tasks)) for run in runs]
    rows = [["lead / worker model", *models],
            ["team", *(setup_cell(run) for run in runs)],
            ["team tasks", *(str(s.tasks) for s in summaries)],
            ["delegations/task mean (median)", *(delegations_cell(s) for s in summaries)],
            ["  planning / implementation / verification per task", *(stages_cell(s) for s in summaries)],
            ["tasks with any delegation", *(any_cell(s) for s in summaries)],
            ["messages worker→lead / worker→worker / lead→worker", *(directions_cell(s) for s in summaries)],
            ["malformed messages", *(malformed_cell(s) for s in summaries)],
            ["lead blocked on workers/task mean (median)", *(blocked_cell(s) for s in summaries)],
            ["  share of the lead's wall time", *(blocked_share_cell(s) for s in summaries)],
            ["lost work (lead submitted while workers ran)", *(lost_cell(s, run.guard)
                                                              for s, run in zip(summaries, runs))]]
    notes = ["From each task's team/ records: delegations.json (a delegation per worker started), messages.json "
             "(a message to 'all' counts once per recipient; malformed: a message action the harness could not "
             "read), lead_waits.json (the intervals the lead was blocked waiting on workers: a blocking lead, or "
             "a wait), the lead's trajectory (its wall time) and the prediction's lost_work.",
             "Blocked share: the blocked seconds over the lead's wall time, summed over the tasks with both. "
             "Lost work: with the submit guard off, workers still running when the lead submitted; their commands "
             "and the files they changed after the submit are not in the prediction. n/a: the run kept no such "
             "record (runs from before it was written)."]
    return tab.Table("Team: delegation, messages, the lead's waits", ["", *(run.run_id for run in runs)], rows, notes)


def lead_model_table(runs: list[TeamRun]):
    """How often each lead model delegates, across the runs given."""
    rows = []
    for s in by_lead_model(runs):
        rows.append([s.name, ", ".join(s.runs), str(s.tasks), delegations_cell(s), stages_cell(s), any_cell(s),
                     blocked_share_cell(s)])
    return tab.Table("Team: delegation by lead model", ["lead model", "runs", "team tasks",
                                                        "delegations/task mean (median)",
                                                        "planning / impl. / verif. per task",
                                                        "tasks with any delegation", "lead blocked share"], rows,
                     ["Every team task of the runs given, grouped by the lead's model (the prediction's models, else "
                      "the run's config)."])


def team_by_task(run: TeamRun):
    """One row per team task of ``run``."""
    rows = []
    for t in run.tasks:
        counts = ([str(t.counts.get(stage, 0)) for stage in STAGES] + [str(t.total)] if t.counts is not None
                  else [tab.NA] * 4)
        directions = t.directions()
        messages = " / ".join(str(directions.get(d, 0)) for d in DIRECTIONS) if directions is not None else tab.NA
        malformed = (f"{t.malformed}/{len(t.messages)}" if t.messages else "0" if t.messages is not None
                     else tab.NA)
        blocked = tab.NA if t.blocked is None else tab.seconds(t.blocked) + (
            f" ({t.blocked_share:.0%})" if t.blocked_share is not None else "")
        if t.lost_work is None:
            lost = "guard on" if t.guard else tab.NA
        elif not t.lost_work:
            lost = "none"
        else:
            lost = "; ".join(f"{w.worker}: {w.commands} cmd, {len(w.files)} file(s)" for w in t.lost_work)
        rows.append([tab.short_id(t.instance_id, 48), t.lead_model, *counts, messages, malformed, blocked, lost])
    return tab.Table(f"Team tasks of {run.run_id}",
                     ["instance", "lead model", "planning", "implementation", "verification", "delegations",
                      "messages w→l / w→w / l→w", "malformed", "lead blocked (share)", "lost work"], rows)
