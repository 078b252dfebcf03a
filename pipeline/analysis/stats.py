"""Numbers of one run: resolve rate with a bootstrap interval, partial credit, reward (tests passed), dollars,
tokens and time by stage, exit reasons, which variant of the pipeline ran; and how a run compares with a baseline."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from pipeline.analysis.load import RunData, TaskData, config_section, is_number
from pipeline.analysis.retrieval import candidate_count, unaudited
from pipeline.analysis.sealing import SealCount, run_seal_count
from pipeline.records.evaluation import EvalCategory
from pipeline.records.pool import Schedule, ScheduleDecision

# The pipeline's stages, as pipeline.run.task.STAGES (not imported: that module pulls in litellm).
STAGES = ("junior", "senior", "principal")
TOKEN_KINDS = ("input", "cached", "output")
BOOTSTRAP_RESAMPLES = 2000
_EXCEPTION_NAME = re.compile(r"^[A-Z][A-Za-z0-9_.]*$")  # "solo: RuntimeError: ..." keeps "RuntimeError"
COST_EPSILON = 1e-8  # dollars; predictions round costs to 8 decimals
RATE_EPSILON = 1e-9  # resolve rates closer than this are equal
NO_MODEL = "none"  # a role's model that switches the role off (pipeline.settings.model_spec.NO_MODEL)


@dataclass
class RunStats:
    run_id: str
    strategies: list[str]
    tasks: int
    scored: int  # tasks with a verdict
    resolved: int
    rate: float | None  # resolved / scored; None when nothing was scored
    interval: tuple[float, float] | None  # bootstrap 95% interval of the rate
    stages: list[str]  # junior, senior, principal, then any other stage the predictions name (solo, team)
    cost_mean: dict[str, float | None]  # per task, by stage and "total"
    cost_median: dict[str, float | None]
    cost_sum: dict[str, float]
    principal_share: float | None  # principal dollars / all dollars of the run
    cost_share: dict[str, float]  # stage -> its dollars / all dollars of the run (empty when nothing was spent)
    tokens_sum: dict[str, dict[str, int]]  # stage -> input/cached/output
    tokens_mean: dict[str, dict[str, float | None]]
    seconds_mean: float | None  # per task: the sum of its stage seconds
    seconds_median: float | None
    seconds_total: float  # sum over tasks (machine time, not the elapsed time of a parallel run)
    junior_exits: Counter = field(default_factory=Counter)
    agent_exits: Counter = field(default_factory=Counter)  # a prediction's own exit_reason (the solo agent's)
    edits: Counter = field(default_factory=Counter)  # (role, "calls" | "failed") -> editor calls of the run's agents
    sources: Counter = field(default_factory=Counter)
    senior_sources: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    categories: Counter = field(default_factory=Counter)
    flagged: int = 0  # verdicts with an integrity finding (never counted as resolved)
    integrity: Counter = field(default_factory=Counter)  # finding kind -> verdicts with one of that kind
    # each resolved verdict's test infrastructure files, for those whose patch changes any (eval/result.json's notes)
    infrastructure: list = field(default_factory=list)
    seal: SealCount = field(default_factory=SealCount)  # how the agents' containers were sealed (predictions)
    reused_juniors: Counter = field(default_factory=Counter)  # run they came from -> tasks
    imported: Counter = field(default_factory=Counter)  # --juniors-from source -> tasks it gave a candidate to
    imported_cost: float | None = None  # dollars the sources recorded for those candidates (not this run's spend)
    # The retrieval audit (pipeline.audit): the candidates of audited trajectories (pool candidates, or a solo, team
    # or replayed prediction), those from a trajectory that reached for the answer, the kinds of reaching among
    # them (kind -> candidates), and the imported candidates that came without a trajectory to audit.
    audited_candidates: int = 0
    reached_candidates: int = 0
    reached_kinds: Counter = field(default_factory=Counter)
    imported_rollouts: int = 0
    unaudited_imports: int = 0
    schedule_stops: Counter = field(default_factory=Counter)  # juniors.schedule: how each task's waves ended -> tasks
    scheduled_rollouts: list = field(default_factory=list)  # (rollouts run, K) of each task the schedule ran
    unfinished: int = 0
    variant: str = "n/a"  # which pipeline ran: full, no senior, no juniors (k=0), no principal, vote, solo, ...
    compaction: str = "n/a"  # limits.compact_after of the run's config, in words (history_compaction)
    editor: str = "n/a"  # limits.editor of the run's config, in words (file_editor)
    f2p_credit: float | None = None  # mean over tasks with per-test results of the FAIL_TO_PASS share passed
    f2p_tasks: int = 0  # tasks with per-test results
    reward: float | None = None  # the study's reward: mean over tasks with per-test results of the share of their
    reward_tasks: int = 0  # FAIL_TO_PASS and PASS_TO_PASS tests passed; and how many tasks that mean is over

    @property
    def dollars_per_task(self) -> float | None:
        return self.cost_mean.get("total")


METRICS = {"rate": "resolve rate", "reward": "reward"}  # what a comparison with a baseline may be on


@dataclass(frozen=True)
class Comparison:
    """A run against a baseline, by resolve rate (or reward) and dollars per task (point estimates)."""

    kind: str  # dominates | dominated | dearer and better | cheaper and worse | same | unknown
    gain: float | None = None  # resolve rate (or reward) - the baseline's
    added: float | None = None  # dollars per task - the baseline's
    why: str | None = None  # for unknown: what is missing


def compare(run: RunStats, baseline: RunStats, metric: str = "rate") -> Comparison:
    """``dominates``: at most the baseline's cost and a higher resolve rate, or the same rate for less;
    ``dominated``: at least its cost and a lower rate, or the same rate for more; otherwise a trade-off
    (dearer and better, cheaper and worse), or the same on both. ``metric``: "rate" (resolve rate) or "reward"
    (the share of tests passed)."""
    mine, theirs = getattr(run, metric), getattr(baseline, metric)
    if None in (mine, theirs):
        return Comparison("unknown", why="no resolve rate" if metric == "rate" else "no per-test results")
    if run.dollars_per_task is None or baseline.dollars_per_task is None:
        return Comparison("unknown", why="no cost")
    gain = mine - theirs
    added = run.dollars_per_task - baseline.dollars_per_task
    better, worse = gain > RATE_EPSILON, gain < -RATE_EPSILON
    dearer, cheaper = added > COST_EPSILON, added < -COST_EPSILON
    if (better and not dearer) or (cheaper and not worse):
        kind = "dominates"
    elif (worse and not cheaper) or (dearer and not better):
        kind = "dominated"
    elif better:
        kind = "dearer and better"
    elif worse:
        kind = "cheaper and worse"
    else:
        kind = "same"
    return Comparison(kind, gain, added)


def cost_ratio(run: RunStats, baseline: RunStats) -> float | None:
    """Dollars per task of ``run`` over the baseline's (the method's "a third of solo" is 0.33); None when either
    is unknown or the baseline cost nothing."""
    if run.dollars_per_task is None or baseline.dollars_per_task is None or baseline.dollars_per_task <= COST_EPSILON:
        return None
    return run.dollars_per_task / baseline.dollars_per_task


def history_compaction(config: dict) -> str:
    """How the run's agents sent their histories (``limits.compact_after``/``compact_chars`` of config.yaml)."""
    if not config:
        return "n/a"
    limits = config_section(config, "limits")
    after = limits.get("compact_after")
    if after is None:
        return "off (whole history)"
    chars = limits.get("compact_chars") or 1000
    chars = f"{chars:,}" if isinstance(chars, (int, float)) else str(chars)  # a hand-edited value shown as it is
    return f"last {after} observation(s) whole, older cut to {chars} + {chars} characters"


def file_editor(config: dict) -> str:
    """Whether the run's agents had the file editor (``limits.editor`` of config.yaml); a config from before the
    editor existed has no such key, and its agents acted through bash only."""
    if not config:
        return "n/a"
    return "on" if config_section(config, "limits").get("editor") is True else "off (bash only)"


def pipeline_variant(config: dict, strategies: list[str]) -> str:
    """What ran, from the run's config.yaml: for the pipeline "full" or its ablations ("no juniors (k=0)",
    "no senior", "no principal", joined when several), else the strategy's name ("vote", "solo", "team")."""
    if not config:  # no config.yaml: only the predictions say what ran
        return "pipeline (no config.yaml)" if strategies == ["pipeline"] else ", ".join(strategies) or "n/a"
    strategy = config.get("strategy") or "pipeline"  # the config's default
    if strategy != "pipeline":
        return str(strategy)
    parts = []
    if config_section(config, "juniors").get("k") == 0:
        parts.append("no juniors (k=0)")
    parts += [f"no {role}" for role in ("senior", "principal") if model_off(config, role)]
    parts += [f"{stage} plug-in {impl}" for stage in ("senior", "principal")
              if (impl := config_section(config, stage).get("impl"))]
    return ", ".join(parts) or "full"


def model_off(config: dict, role: str) -> bool:
    """Whether the run's config switched ``role``'s model off (models.<role>.model: none, as --<role>-model none
    writes it)."""
    spec = config_section(config, "models").get(role)
    return isinstance(spec, dict) and str(spec.get("model") or "").strip().lower() == NO_MODEL


def _schedules(tasks: list[TaskData]) -> list[Schedule]:
    """The junior schedules of the tasks that ran one, in order."""
    return [t.pool.schedule for t in tasks if t.pool is not None and t.pool.schedule is not None]


def schedule_stop(schedule: Schedule) -> str:
    """How a task's junior schedule ended (junior/pool.json ``schedule``): the rules that held when it converged
    ("top_share", "no_new_files", both joined by +), "K reached", or "unfinished"."""
    decisions = schedule.decisions or []
    last = decisions[-1] if decisions else None
    if last is None or last.decision != ScheduleDecision.STOP:
        return "unfinished"
    if not last.converged:
        return "K reached"
    held = [rule for rule, value in (last.rules or {}).items() if value]
    return "+".join(held) or "converged"


def bootstrap_interval(outcomes: list[bool], level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES,
                       seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean of ``outcomes``; None for no outcome."""
    if not outcomes:
        return None
    values = np.asarray(outcomes, dtype=float)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def efficiency(run: RunStats, baseline: RunStats, metric: str = "rate") -> float | None:
    """Resolve rate (``metric="reward"``: reward, the study's efficiency) gained per added dollar per task against
    ``baseline``; None when the cost does not rise (or either value or cost is unknown)."""
    mine, theirs = getattr(run, metric), getattr(baseline, metric)
    if None in (mine, theirs) or run.dollars_per_task is None or baseline.dollars_per_task is None:
        return None
    added = run.dollars_per_task - baseline.dollars_per_task
    if added <= COST_EPSILON:  # float noise in equal means is no added cost
        return None
    return (mine - theirs) / added


def run_stats(run: RunData, seed: int = 0) -> RunStats:
    tasks = run.tasks
    verdicts = [t.resolved for t in tasks if t.resolved is not None]
    named = {s for t in tasks for s in (t.prediction.cost or {}) if s != "total"}
    stages = [s for s in STAGES if s in named] + sorted(named - set(STAGES))  # a solo run has no junior column
    per_stage = {stage: [t.cost(stage) for t in tasks] for stage in stages}
    per_stage["total"] = [t.total_cost for t in tasks]
    cost_sum = {stage: float(sum(values)) for stage, values in per_stage.items()}
    seconds = [t.seconds for t in tasks]
    credits = [passed / required for passed, required in (t.fail_to_pass for t in tasks if t.fail_to_pass)]
    rewards = [passed / required for passed, required in (t.reward for t in tasks if t.reward)]
    counts = [candidate_count(t) for t in tasks]
    return RunStats(
        run_id=run.run_id, strategies=run.strategies, tasks=len(tasks), scored=len(verdicts),
        resolved=sum(verdicts), rate=sum(verdicts) / len(verdicts) if verdicts else None,
        interval=bootstrap_interval(verdicts, seed=seed), stages=stages,
        cost_mean={stage: _mean(values) for stage, values in per_stage.items()},
        cost_median={stage: _median(values) for stage, values in per_stage.items()},
        cost_sum=cost_sum,
        principal_share=(cost_sum.get("principal", 0.0) / cost_sum["total"]
                         if cost_sum["total"] > 0 and "principal" in stages else None),
        cost_share={stage: cost_sum[stage] / cost_sum["total"] for stage in stages} if cost_sum["total"] > 0 else {},
        tokens_sum={stage: {kind: sum(_tokens(t, stage, kind) for t in tasks) for kind in TOKEN_KINDS}
                    for stage in stages},
        tokens_mean={stage: {kind: _mean([_tokens(t, stage, kind) for t in tasks]) for kind in TOKEN_KINDS}
                     for stage in stages},
        seconds_mean=_mean(seconds), seconds_median=_median(seconds), seconds_total=float(sum(seconds)),
        junior_exits=Counter(r.exit_reason or "unknown" for t in tasks for r in t.rollouts),
        agent_exits=Counter(t.prediction.exit_reason for t in tasks if t.prediction.exit_reason),
        edits=sum((t.edits for t in tasks), Counter()),
        sources=Counter(t.prediction.source or "unknown" for t in tasks),
        senior_sources=Counter(t.brief.source or "unknown" for t in tasks if t.brief is not None),
        errors=Counter(error_kind(t.prediction.error) for t in tasks if t.prediction.error),
        categories=_categories(tasks),
        flagged=sum(1 for t in tasks if t.eval_result is not None and t.eval_result.flagged),
        integrity=Counter(kind for t in tasks for kind in integrity_kinds(t)),
        infrastructure=[files for t in tasks if (files := changed_infrastructure(t))],
        seal=run_seal_count(run),
        reused_juniors=Counter(t.prediction.juniors_reused_from for t in tasks if t.prediction.juniors_reused_from),
        imported=Counter(source for t in tasks for source in _texts(t.prediction.imported_from)),
        imported_cost=_imported_cost(tasks),
        audited_candidates=sum(c.candidates for c in counts), reached_candidates=sum(c.reached for c in counts),
        reached_kinds=sum((c.kinds for c in counts), Counter()),
        imported_rollouts=sum(1 for t in tasks for r in t.rollouts if isinstance(r.imported_from, str)),
        unaudited_imports=sum(len(unaudited(t)) for t in tasks),
        schedule_stops=Counter(schedule_stop(schedule) for schedule in _schedules(tasks)),
        scheduled_rollouts=[(schedule.rollouts_run, schedule.k) for schedule in _schedules(tasks)],
        unfinished=len(run.unfinished),
        variant=pipeline_variant(run.config, run.strategies), compaction=history_compaction(run.config),
        editor=file_editor(run.config),
        f2p_credit=_mean(credits), f2p_tasks=len(credits), reward=_mean(rewards), reward_tasks=len(rewards),
    )


def error_kind(error: str) -> str:
    """The stable head of an error message: 'junior stage: RuntimeError: boom' -> 'junior stage: RuntimeError'."""
    parts = [p.strip() for p in str(error).splitlines()[0].split(": ")] if str(error).strip() else ["error"]
    head = ": ".join(parts[:2]) if len(parts) > 2 and _EXCEPTION_NAME.match(parts[1]) else parts[0]
    return head.rstrip(": ")[:80]  # a head that introduces what follows ends in its own colon: not shown twice


def integrity_kinds(task: TaskData) -> set[str]:
    """The kinds of the integrity findings on a task's verdict (pipeline.evaluation.integrity)."""
    result = task.eval_result
    if result is None or not result.flagged:
        return set()
    return {str(finding.kind) for finding in result.integrity if isinstance(finding.kind, str)} or {"unnamed"}


def changed_infrastructure(task: TaskData) -> list[str]:
    """The test infrastructure files a resolved task's patch changes (eval/result.json's test_infrastructure notes);
    none for a task not resolved."""
    if task.resolved is not True or task.eval_result is None:
        return []
    return task.eval_result.infrastructure_files


def _categories(tasks: list[TaskData]) -> Counter:
    counts = Counter(t.category for t in tasks)
    ordered: Counter[str] = Counter({c: counts[c] for c in EvalCategory if counts[c]})
    ordered.update({c: n for c, n in counts.items() if c not in set(EvalCategory)})
    return ordered


def _tokens(task: TaskData, stage: str, kind: str) -> int:
    used = (task.prediction.tokens or {}).get(stage)
    value = getattr(used, kind) if used is not None else None
    return int(value) if is_number(value) else 0


def _mean(values: list[float]) -> float | None:
    return float(statistics.fmean(values)) if values else None


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def _texts(value: object) -> list[str]:
    """A record's list of names, read as untrusted: only its text items."""
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _imported_cost(tasks: list) -> float | None:
    """What the --juniors-from sources recorded their candidates cost, summed over the tasks (None: none recorded);
    only finite numbers count, as for every cost read back."""
    costs = [t.prediction.imported_cost for t in tasks if is_number(t.prediction.imported_cost)]
    return sum(costs) if costs else None
