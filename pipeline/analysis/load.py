"""Reading one run directory (docs/run-layout.md) into its records; nothing is recomputed here.

``load_run`` reads what every report needs (predictions, eval results, rollouts without their trajectories, the
pool, the brief, the context) as the typed records of pipeline.records, older formats upgraded there; a record that
cannot be read is None and named in the task's ``unreadable`` (a task whose prediction cannot be read is left out
and named in ``refused``). ``TaskFiles`` reads, when asked, the rest of one task's files (trajectories, the
principal's calls, the team's records, the ledger, the scoring's logs) for its page: the records among them through
their types too, the others with ``read_json``, the one way a JSON file is read (the data, or why there is none).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeGuard

import yaml

from pipeline.errors import SwepipeError
from pipeline.records import (
    MISSING,
    NOT_AN_OBJECT,
    Brief,
    EvalResult,
    Pool,
    Prediction,
    PrincipalResult,
    Read,
    ReplayResult,
    Rollout,
    SoloResult,
    TeamResult,
    Unreadable,
    read_json,
    read_predictions,
    read_trajectory,
)
from pipeline.records.evaluation import EvalCategory, TestOutcome
from pipeline.records.ledger import read_ledger
from pipeline.records.retrieval import RetrievalFinding
from pipeline.rundir.layout import (
    TASK,
    RunLayout,
    ScoringFiles,
    TaskPaths,
    rollout_file,
    trajectory_journal,
    whole_trajectory,
)
from pipeline.tasks import check_instance_id
from pipeline.text.printable import clean

__all__ = ["MISSING", "NOT_AN_OBJECT", "Read", "RolloutFiles", "RunData", "TaskFiles", "TaskData", "config_section",
           "is_number", "load_run", "named_apart", "read_json", "read_text"]


_EVAL_RESULT = TASK.relative(TASK.eval_files.result)


@dataclass
class TaskData:
    """What a run left on disk for one finished task (a prediction exists)."""

    instance_id: str
    prediction: Prediction
    eval_result: EvalResult | None = None  # eval/result.json (of the run, or of `swepipe eval` into <run>/eval/<id>/)
    rollouts: list[Rollout] = field(default_factory=list)  # junior/rollout-NN.json without the trajectory, by index
    pool: Pool | None = None  # junior/pool.json
    brief: Brief | None = None  # senior/brief.json
    expansion_by_candidate: dict | None = None  # senior/expansion_by_candidate.json
    context_text: str | None = None  # senior/context.md
    unreadable: dict[str, str] = field(default_factory=dict)  # a file above (junior/pool.json, ...) -> why it is None
    edits: Counter = field(default_factory=Counter)  # (role, "calls" | "failed") -> editor calls in its trajectories
    # solo, team, replay -> the retrieval audit's findings their result.json holds (a key only for an audited one)
    agent_retrieval: dict[str, list[RetrievalFinding]] = field(default_factory=dict)

    @property
    def resolved(self) -> bool | None:
        """The verdict: the prediction's own, else the eval result's; None when never scored (or infra error).
        A result with an integrity finding is never resolved (pipeline.evaluation.integrity)."""
        if self.eval_result is not None and self.eval_result.flagged:
            return False
        verdict = self.prediction.resolved
        if verdict is not None:
            return verdict is True
        if self.eval_result is None or self.eval_result.category == EvalCategory.INFRA_ERROR:
            return None
        verdict = self.eval_result.resolved
        return None if verdict is None else verdict is True

    @property
    def odd_verdicts(self) -> list[str]:
        """The verdicts on record that are neither JSON true nor false (``"resolved": "false"``, ``"yes"``, ``1``),
        in words: ``resolved`` counts such a verdict as not resolved, and the report says so."""
        sources: tuple[tuple[str, Prediction | EvalResult | None], ...] = (("its prediction", self.prediction),
                                                                             (_EVAL_RESULT, self.eval_result))
        found = [(where, verdict) for where, record in sources
                 if record is not None and (verdict := record.resolved) is not None and not isinstance(verdict, bool)]
        return [f"{where} says resolved {json.dumps(value)}, neither true nor false" for where, value in found]

    @property
    def category(self) -> str:
        """Eval category; 'not scored' without a verdict, 'unresolved (no eval result)' with only a False."""
        verdict = self.resolved
        result = self.eval_result
        if result is not None and result.category and (verdict is None or _says(result, verdict)):
            return result.category  # (a result that contradicts the verdict is not its category)
        if verdict is None:
            return "not scored"
        return "resolved" if verdict else "unresolved (no eval result)"

    @property
    def fail_to_pass(self) -> tuple[int, int] | None:
        """(passed, required) FAIL_TO_PASS tests from the eval result's per-test outcome; None without one (a run
        scored before results kept per-test outcomes, an infrastructure error, a result that contradicts the
        prediction's verdict, a task with no FAIL_TO_PASS test)."""
        return self.tests_passed(("FAIL_TO_PASS",))

    @property
    def reward(self) -> tuple[int, int] | None:
        """The study's reward as (passed, required) over FAIL_TO_PASS and PASS_TO_PASS together; None as for
        ``fail_to_pass`` (and when either list is missing)."""
        return self.tests_passed(("FAIL_TO_PASS", "PASS_TO_PASS"))

    def tests_passed(self, kinds: tuple[str, ...]) -> tuple[int, int] | None:
        """(passed, required) over the eval result's per-test outcomes of ``kinds``: the one reader of them."""
        result = self.eval_result
        if result is None or result.category == EvalCategory.INFRA_ERROR:
            return None
        verdict = self.resolved
        if verdict is not None and result.resolved is not None and (result.resolved is True) != verdict:
            return None
        passed = required = 0
        for kind in kinds:
            outcome = getattr(result, kind)
            if not isinstance(outcome, TestOutcome) or outcome.passed is None:
                return None
            groups = [getattr(outcome, group) or [] for group in ("passed", "failed", "missing")]
            passed += len(groups[0])
            required += sum(len(group) for group in groups)
        return (passed, required) if required else None

    def cost(self, stage: str) -> float:
        return _number(self._costs.get(stage))

    @property
    def total_cost(self) -> float:
        cost = self._costs
        if is_number(cost.get("total")):
            return float(cost["total"])
        return float(sum(v for k, v in cost.items() if k != "total" and is_number(v)))

    @property
    def seconds(self) -> float:
        seconds = self.prediction.seconds
        return float(sum(v for v in seconds.values() if is_number(v))) if seconds is not None else 0.0

    @property
    def _costs(self) -> dict:
        return self.prediction.cost or {}


@dataclass
class RunData:
    root: Path
    tasks: list[TaskData]
    config: dict = field(default_factory=dict)
    unfinished: list[str] = field(default_factory=list)  # task directories without a prediction yet
    refused: dict[str, str] = field(default_factory=dict)  # instance id -> why it cannot be one (left out)
    repeat: dict | None = None  # repeat.json of a run made by `run --repeats N`: group, repeat, repeats, seeds
    name: str | None = None  # what a report calls it when its folder's name is not enough (named_apart)

    @property
    def run_id(self) -> str:
        return self.name or self.root.name

    @property
    def strategies(self) -> list[str]:
        return sorted({str(t.prediction.strategy or "?") for t in self.tasks})


def load_run(path: str | Path) -> RunData:
    """Every finished task of the run at ``path``; a missing or unreadable artefact is just left as None."""
    root = Path(path)
    if not root.is_dir():
        raise SwepipeError(f"run directory {root} does not exist (pass runs/<run-id>)")
    layout = RunLayout(root)
    lines = read_predictions(layout.predictions)
    predictions, refused = _checked(lines.records)
    wrong, refused_wrong = _checked(lines.unreadable)
    refused.update(refused_wrong)
    refused.update({instance_id: f"task {instance_id}: its prediction (predictions.jsonl line {number}) is {why}"
                    for instance_id, (number, why) in wrong.items()})
    tasks = [_task(layout, root, instance_id, prediction) for instance_id, prediction in sorted(predictions.items())]
    task_dirs = sorted(p.name for p in layout.tasks.iterdir() if p.is_dir()) if layout.tasks.is_dir() else []
    unfinished, refused_dirs = _checked({name: None for name in task_dirs
                                         if name not in predictions and name not in refused})
    refused.update(refused_dirs)
    for problem in refused.values():
        print(clean(f"swepipe: {root}: {problem}; left out of the report (a run directory's files are read as "
                    "untrusted input)"), file=sys.stderr, flush=True)
    repeat = read_json(layout.repeat).data
    return RunData(root=root, tasks=tasks, config=_read_yaml(layout.config), unfinished=list(unfinished),
                   refused=refused, repeat=repeat if isinstance(repeat, dict) else None)


def named_apart(runs: list[RunData]) -> list[RunData]:
    """The runs, each named by the shortest end of its path that no other run's path ends with (``a/run`` and
    ``b/run``, not ``run`` twice), so that a report or a comparison never takes one for the other; the same
    directory given twice keeps one name."""
    paths = [run.root.resolve() for run in runs]
    named = []
    for run, path in zip(runs, paths, strict=True):
        others = {other for other in paths if other != path}
        depth = next((k for k in range(1, len(path.parts) + 1)
                      if all(other.parts[-k:] != path.parts[-k:] for other in others)), len(path.parts))
        named.append(replace(run, name=None if depth == 1 else str(Path(*path.parts[-depth:]))))
    return named


def _checked(by_id: dict) -> tuple[dict, dict[str, str]]:
    """``by_id`` without the ids that are no safe instance id (a plain file name, as a dataset's must be: such an
    id would name files outside the report's folder), and those ids with why."""
    kept, refused = {}, {}
    for instance_id, value in by_id.items():
        try:
            kept[check_instance_id(instance_id)] = value
        except ValueError as error:
            refused[str(instance_id)] = f"instance id {error}"
    return kept, refused


def _task(layout: RunLayout, root: Path, instance_id: str, prediction: Prediction) -> TaskData:
    paths = layout.task(instance_id)
    unreadable: dict[str, str] = {}

    def record(kind, path: Path, shown: str | None = None):
        read = kind.read(path)
        if isinstance(read, Unreadable):
            if not read.missing:
                unreadable[shown or paths.relative(path)] = read.why
            return None
        return read

    eval_result = record(EvalResult, paths.eval_files.result)
    if eval_result is None:  # `swepipe eval`'s default place
        elsewhere = layout.scoring(instance_id).result
        eval_result = record(EvalResult, elsewhere, "../../" + elsewhere.relative_to(root).as_posix())
    senior = paths.senior_files
    if prediction.cost is None:  # a prediction of a run that did not record its spend: the ledger's
        spent = Prediction.from_data({**prediction.to_disk(), **_ledger_spend(paths.ledger)})
        prediction = spent if isinstance(spent, Prediction) else prediction
    expansion = read_json(senior.expansion_by_candidate)
    if expansion.problem not in (None, MISSING):
        unreadable[paths.relative(senior.expansion_by_candidate)] = expansion.problem
    edits: Counter = Counter()
    return TaskData(
        instance_id=instance_id, prediction=prediction, eval_result=eval_result,
        rollouts=_rollouts(paths, unreadable, edits), pool=record(Pool, paths.junior_files.pool),
        brief=record(Brief, senior.brief), expansion_by_candidate=expansion.data,
        context_text=senior.context.read_text(encoding="utf-8", errors="replace") if senior.context.is_file()
        else None, unreadable=unreadable, edits=edits + _agent_edits(paths), agent_retrieval=_agent_retrieval(paths))


def _agent_retrieval(paths: TaskPaths) -> dict[str, list[RetrievalFinding]]:
    """The retrieval audit's findings on the solo agent's, the team's and a replayed trajectory, as their
    result.json records hold them; a record that cannot be read, or was not audited, is left out (the task page
    names an unreadable one)."""
    found: dict[str, list[RetrievalFinding]] = {}
    records: tuple[tuple[str, type[SoloResult] | type[TeamResult] | type[ReplayResult], Path], ...] = (
        ("solo", SoloResult, paths.solo_files.result), ("team", TeamResult, paths.team_files.result),
        ("replay", ReplayResult, paths.replay_files.result))
    for name, kind, path in records:
        record = kind.read(path) if path.is_file() else None
        if record is not None and not isinstance(record, Unreadable) and isinstance(record.retrieval, list):
            found[name] = [finding for finding in record.retrieval if isinstance(finding, RetrievalFinding)]
    return found


def _ledger_spend(path: Path) -> dict:
    """Cost and tokens by stage from the task's ledger, for predictions that do not carry them."""
    cost: dict[str, float] = {}
    tokens: dict[str, dict[str, int]] = {}
    for row in read_ledger(path):
        cost[row.stage] = cost.get(row.stage, 0.0) + row.cost
        used = tokens.setdefault(row.stage, {"input": 0, "cached": 0, "output": 0})
        used["input"] += row.input_tokens
        used["cached"] += row.cached_tokens
        used["output"] += row.output_tokens
    cost = {stage: round(value, 8) for stage, value in cost.items()}
    return {"cost": {**cost, "total": round(sum(cost.values()), 8)}, "tokens": tokens, "cost_from": "ledger"}


def _rollouts(paths: TaskPaths, unreadable: dict[str, str], edits: Counter) -> list[Rollout]:
    """The task's rollout records, their trajectories left out, by index; those that cannot be read named in
    ``unreadable``; their editor calls counted into ``edits`` first."""
    found = []
    for number, path in paths.junior_files.rollouts().items():
        record = Rollout.read(path)
        if isinstance(record, Unreadable):
            unreadable[paths.relative(path)] = record.why
            continue
        index = record.index if is_number(record.index) else number
        edits.update(_edit_tally("junior", record.trajectory))
        found.append((index, record.without_trajectory()))
    return [record for _, record in sorted(found, key=lambda pair: pair[0])]


def _agent_edits(paths: TaskPaths) -> Counter:
    """The editor calls of the other agents' trajectories, by role."""
    trajectories = (("solo", [paths.solo_files.trajectory]), ("team", paths.team_files.trajectories()),
                    ("senior", [paths.senior_files.trajectory]))
    tally: Counter = Counter()
    for role, files in trajectories:
        for path in files:
            tally.update(_edit_tally(role, read_trajectory(path, "surrogateescape").data))
    return tally


def _edit_tally(role: str, trajectory) -> Counter:
    """(role, "calls") and (role, "failed"): the editor calls a trajectory's steps record (any shape it may have
    on disk is taken as none)."""
    steps = trajectory.get("steps") if isinstance(trajectory, dict) else None
    edits = [edit for step in steps if isinstance(step, dict) and isinstance(step.get("edits"), list)
             for edit in step["edits"] if isinstance(edit, dict)] if isinstance(steps, list) else []
    return Counter({(role, "calls"): len(edits), (role, "failed"): sum(1 for e in edits if e.get("ok") is not True)})


def _says(result: EvalResult, verdict: bool) -> bool:
    """Whether an eval result says ``verdict``, by its own verdict and by its category."""
    return (result.resolved is True) == verdict and (result.category == EvalCategory.RESOLVED) <= verdict


MAX_NUMBER = 1e15  # no cost in dollars, count of tokens or number of seconds comes near it


def is_number(value: object) -> TypeGuard[int | float]:
    """A number as a run records them (a cost, tokens, seconds, an index): NaN, Infinity and sizes beyond
    MAX_NUMBER count as none, as text does: their sums would be infinite, and stop the figures and the bootstrap."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    return -MAX_NUMBER <= value <= MAX_NUMBER  # False for NaN; an int is compared exactly, whatever its size


def _number(value) -> float:
    """A number read back from a run file; anything else (a file someone else wrote may hold any text) is 0."""
    return float(value) if is_number(value) else 0.0


def read_text(path: Path) -> str | None:
    """A run's text file as it was written (bytes that are not UTF-8 kept as surrogate escapes); None if absent."""
    try:
        return path.read_bytes().decode("utf-8", errors="surrogateescape")
    except OSError:
        return None


@dataclass(frozen=True)
class RolloutFiles:
    """One junior rollout's files: its record (rollout-NN.json, with the trajectory; or why it cannot be read) and,
    while it ran or after a kill, its live trajectory (rollout-NN.trajectory.json); None where a file is absent."""

    index: int
    record: Rollout | Unreadable | None
    record_path: Path | None
    live: Read | None
    live_path: Path | None


class TaskFiles:
    """The files of one finished task that ``load_run`` does not keep, read when asked (a run of hundreds of
    tasks holds gigabytes of trajectories): for the task pages. Records are read through their types, other JSON
    with ``read_json`` (bytes that are not UTF-8 kept, to be shown as such), text with ``read_text``."""

    def __init__(self, run: RunData, task: TaskData):
        self.run_root = run.root
        self.layout = RunLayout(run.root)
        self.paths = self.layout.task(task.instance_id)
        self.root = self.paths.root
        self.instance_id = task.instance_id

    def has(self, folder: Path) -> bool:
        """Whether the task has the stage folder ``folder`` (paths.junior, .senior, .principal, .solo, .team)."""
        return folder.is_dir()

    def json(self, path: Path) -> Read:
        return read_json(path, errors="surrogateescape")

    def text(self, path: Path) -> str | None:
        return read_text(path)

    def trajectory(self, path: Path) -> Read:
        """An agent's trajectory (``path``: its whole file or its journal), the journal folded in (bytes that are
        not UTF-8 kept). A rollout record reads as itself."""
        return read_trajectory(whole_trajectory(path), errors="surrogateescape")

    def shown(self, path: Path) -> str:
        """``path`` as the task's folder names it (junior/pool.json)."""
        return self.paths.relative(path)

    def replay_result(self) -> ReplayResult | Unreadable:
        """replay/result.json (`swepipe replay`; bytes that are not UTF-8 kept)."""
        return ReplayResult.read(self.paths.replay_files.result, errors="surrogateescape")

    def principal_result(self) -> PrincipalResult | Unreadable:
        """principal/result.json (bytes that are not UTF-8 kept)."""
        return PrincipalResult.read(self.paths.principal_files.result, errors="surrogateescape")

    def rollouts(self) -> list[RolloutFiles]:
        """Every rollout of junior/ that left a record or a live trajectory, by index."""
        folder = self.paths.junior
        found: dict[int, dict[str, Path]] = {}
        for path in folder.iterdir() if folder.is_dir() else ():
            named = rollout_file(path.name)
            if named and not (named[1] and path.suffix == ".json" and trajectory_journal(path).exists()):
                found.setdefault(named[0], {})["live" if named[1] else "record"] = path
        rollouts = []
        for index in sorted(found):
            record, live = found[index].get("record"), found[index].get("live")
            rollouts.append(RolloutFiles(index, Rollout.read(record, "surrogateescape") if record else None, record,
                                         self.trajectory(live) if live else None, live))
        return rollouts

    def team_agents(self) -> list[tuple[str, Path]]:
        """(name, trajectory file) of the team's lead, then its workers by number."""
        team = self.paths.team_files
        return [("lead", team.lead_trajectory), *team.worker_trajectories()]

    def eval_files(self) -> ScoringFiles | None:
        """Where the task's scoring left its files: the run's eval/ folder, else `swepipe eval`'s place."""
        return next((files for files in (self.paths.eval_files, self.layout.scoring(self.instance_id))
                     if files.result.is_file()), None)

    def first_task_message(self) -> tuple[str, object] | None:
        """(file, content) of the first user message any agent was given, for a page without the dataset (the
        content as recorded: a string, or a list of parts)."""
        paths = self.paths
        rollouts = [path for files in self.rollouts() for path in (files.record_path, files.live_path) if path]
        for path in [*rollouts, paths.solo_files.trajectory, paths.team_files.lead_trajectory,
                     paths.senior_files.trajectory]:
            data = self.trajectory(path).data
            traj = data.get("trajectory") if isinstance(data, dict) and "trajectory" in data else data
            messages = traj.get("messages") if isinstance(traj, dict) else None
            users = [m for m in messages or [] if isinstance(m, dict) and m.get("role") == "user"]
            if users:
                return self.relative(path), users[0].get("content")
        return None

    def relative(self, path: Path) -> str:
        """``path`` as the pages name it: from the folder that holds the run (``<run>/tasks/<id>/...``)."""
        try:
            return str(path.relative_to(self.run_root.parent))
        except ValueError:
            return str(path)


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):  # ValueError: bytes that are not UTF-8
        return {}
    return data if isinstance(data, dict) else {}


def config_section(config: dict, name: str) -> dict:
    """A section of a run's config.yaml (models, limits, juniors, ...): {} when it is missing or no mapping (the file
    is read as untrusted input: ``models: [1, 2]`` is no section)."""
    section = config.get(name)
    return section if isinstance(section, dict) else {}
