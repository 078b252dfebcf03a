"""The team analysis's records: what a team run's lead and workers left under tasks/<id>/team/, read.

Read here: delegations.json (per worker its stage, task, sessions with start and end), messages.json (per message
from, to, time, malformed), lead_waits.json (the intervals the lead was blocked waiting on workers), the lead's
trajectory (its wall time), and the prediction's lost_work (with the submit guard off, what workers did after the
lead submitted). Times on disk are Unix seconds or, in older records, seconds from the team's start; here every
time is seconds from the team's start. A missing or unreadable record is None (shown n/a), never zero.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from pipeline.analysis.load import RunData, TaskData, read_json
from pipeline.records import Prediction, TeamDelegations, read_trajectory
from pipeline.rundir.layout import RunLayout

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
class DelegationHistory:
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
    delegations: list[DelegationHistory] | None  # None: no delegations.json
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
        return sum(stop - start for start, stop in merged_waits(self.waits))

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


def team_task(run: RunData, task: TaskData) -> TeamTask:
    team = RunLayout(run.root).task(task.instance_id).team_files
    record = TeamDelegations.read(team.delegations)
    saved = record.to_dict() if isinstance(record, TeamDelegations) else None
    started = _number(saved.get("started")) if saved else None
    lead = read_trajectory(team.lead_trajectory).data
    lead = lead if isinstance(lead, dict) else {}
    if started is None:
        started = _number(lead.get("started"))
    clock = _Clock(started)
    delegations = _delegations(saved, clock) if saved is not None else None
    counts = _counts(delegations, task.prediction)
    raw_messages = read_json(team.messages).data
    messages = _messages(raw_messages, clock) if isinstance(raw_messages, list) else None
    raw_waits = read_json(team.lead_waits).data
    waits = _waits(raw_waits, clock) if isinstance(raw_waits, list) else None
    lead_seconds = _number(lead.get("seconds"))
    if lead_seconds is None:
        lead_seconds = _number((task.prediction.seconds or {}).get("team"))
    guard = _guard(run.config)
    models = task.prediction.models or {}
    configured = run.config.get("models")
    config_models = configured if isinstance(configured, dict) else {}
    return TeamTask(run_id=run.run_id, instance_id=task.instance_id,
                    lead_model=_model(models, config_models, "lead"),
                    worker_model=_model(models, config_models, "worker"),
                    counts=counts, delegations=delegations, messages=messages, waits=waits, lead_seconds=lead_seconds,
                    lost_work=_lost_work(task.prediction.lost_work if "lost_work" in task.prediction.model_fields_set
                                         else (saved or {}).get("lost_work")),
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


def _delegations(saved: dict, clock: _Clock) -> list[DelegationHistory]:
    records = saved.get("delegations")
    if not isinstance(records, list):
        return []
    if clock.started is None:  # no team start on record: the first Unix time there is stands in for it
        numbers = [_number(r.get(key)) for r in records if isinstance(r, dict) for key in ("start", "delegated_at")]
        firsts = [t for t in numbers if t is not None and t > ABSOLUTE]
        clock.started = min(firsts) if firsts else None
    found: list[DelegationHistory] = []
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
        worker = str(record.get("worker") or record.get("name") or f"worker-{len(found) + 1}")
        found.append(DelegationHistory(worker=worker, stage=stage, task=str(record.get("task") or ""),
                                       status=str(record.get("status") or record.get("state") or "?"),
                                       sessions=sessions))
    return found


def _first(record: dict, clock: _Clock, *keys: str) -> float | None:
    """The first of ``keys`` that holds a time, as seconds from the team's start."""
    for key in keys:
        value = clock(record.get(key))
        if value is not None:
            return value
    return None


def _counts(delegations: list[DelegationHistory] | None, prediction: Prediction) -> dict[str, int] | None:
    if delegations is not None:
        return {stage: sum(1 for d in delegations if d.stage == stage) for stage in STAGES}
    counts = prediction.delegations  # the prediction's own tally, when the record is gone
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


def _is_team(run: RunData, task: TaskData) -> bool:
    strategy = task.prediction.strategy or run.config.get("strategy")
    return strategy == "team"


def _guard(config: dict) -> bool:
    configured = config.get("team")
    team = configured if isinstance(configured, dict) else {}
    return team.get("submit_guard", True) is not False  # runs from before the switch always had the guard


def _model(models: dict, config_models: dict, role: str) -> str:
    name = models.get(role)
    if not name:
        spec = config_models.get(role)
        name = spec.get("model") if isinstance(spec, dict) else None
    return str(name) if name else NOT_NAMED


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def merged_waits(waits: list[tuple[float, float, list[str]]]) -> list[tuple[float, float]]:
    """The waits' intervals, overlapping ones joined."""
    joined: list[list[float]] = []
    for start, stop, _ in sorted(waits):
        if joined and start <= joined[-1][1]:
            joined[-1][1] = max(joined[-1][1], stop)
        else:
            joined.append([start, stop])
    return [(start, stop) for start, stop in joined]
