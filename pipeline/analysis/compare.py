"""``swepipe compare``: two runs (or more, each against the first) task by task, on the tasks both scored.

Two resolve rates side by side say little when the runs share their tasks: what counts is where they differ. Per
pair of runs, on the tasks with a verdict in both:

- the 2x2 table: resolved by both, only by A, only by B, by neither;
- the exact McNemar test: under "neither run is better", each task resolved by exactly one run is A's or B's with
  even odds, so the two-sided p-value is the binomial probability of a split at least as uneven as the one seen;
- a paired bootstrap interval of B minus A in resolve rate and in dollars per task (the same tasks drawn for both,
  ``BOOTSTRAP_RESAMPLES`` times, seed 0), so the interval keeps what the tasks share;
- the same differences per repository and per language (from the dataset, when it can be read);
- the instance ids each run alone resolves.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

from pipeline.analysis.load import RunData, TaskData, named_apart
from pipeline.analysis.stats import BOOTSTRAP_RESAMPLES, changed_infrastructure, file_editor, integrity_kinds
from pipeline.analysis.table import Table, by_repository_and_language, money, percent
from pipeline.records.evaluation import infrastructure_named


@dataclass
class GroupRow:
    group: str  # "repo" or "language"
    name: str
    tasks: int
    rate_a: float
    rate_b: float

    @property
    def difference(self) -> float:
        return self.rate_b - self.rate_a


@dataclass
class Pair:
    """Run B against run A on the tasks both scored."""

    a: str
    b: str
    tasks: int
    both: int
    only_a: int
    only_b: int
    neither: int
    p_value: float  # exact McNemar, two-sided
    rate_a: float | None
    rate_b: float | None
    rate_interval: tuple[float, float] | None  # of rate_b - rate_a
    dollars_a: float | None
    dollars_b: float | None
    dollars_interval: tuple[float, float] | None  # of dollars_b - dollars_a, per task
    only_a_ids: list[str] = field(default_factory=list)
    only_b_ids: list[str] = field(default_factory=list)
    groups: list[GroupRow] = field(default_factory=list)
    editors: tuple[str, str] = ("n/a", "n/a")  # whether each run's agents had the file editor
    flagged: tuple[str, str] = ("0", "0")  # each run's verdicts flagged by integrity checks, and why
    infrastructure: tuple[str, str] = ("0", "0")  # each run's resolved verdicts that change test infrastructure
    left_out: dict[str, int] = field(default_factory=dict)  # run -> its scored tasks the other did not score
    scoring_warnings: list[str] = field(default_factory=list)  # the two runs were not scored the same way

    def as_dict(self) -> dict:
        data = asdict(self)
        for row, shown in zip(self.groups, data["groups"], strict=True):
            shown["difference"] = row.difference
        return data


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value: twice the binomial(n, 1/2) tail of the smaller discordant count, at most 1."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def compare_runs(runs: list[RunData], meta: dict[str, tuple[str, str]] | None = None, seed: int = 0) -> list[Pair]:
    """Each run after the first against the first, each named apart from the others (load.named_apart). ``meta``:
    instance id -> (repository, language)."""
    first, *others = named_apart(runs)
    return [compare_pair(first, other, meta or {}, seed) for other in others]


def _shared(run_a: RunData, run_b: RunData) -> tuple[dict[str, TaskData], dict[str, TaskData], list[str]]:
    """Each run's scored tasks by id, and the ids both scored, in order."""
    scored_a = {t.instance_id: t for t in run_a.tasks if t.resolved is not None}
    scored_b = {t.instance_id: t for t in run_b.tasks if t.resolved is not None}
    return scored_a, scored_b, sorted(scored_a.keys() & scored_b.keys())


def scored_differently(run_a: RunData, run_b: RunData) -> list[str]:
    """The scoring warnings (``scoring_warnings``) of two runs, on the tasks both scored."""
    scored_a, scored_b, shared = _shared(run_a, run_b)
    return scoring_warnings(run_a.run_id, [scored_a[i] for i in shared], run_b.run_id, [scored_b[i] for i in shared])


def compare_pair(run_a: RunData, run_b: RunData, meta: dict[str, tuple[str, str]], seed: int = 0) -> Pair:
    scored_a, scored_b, shared = _shared(run_a, run_b)
    a = np.array([bool(scored_a[i].resolved) for i in shared], dtype=bool)
    b = np.array([bool(scored_b[i].resolved) for i in shared], dtype=bool)
    only_a_ids = [i for i, x, y in zip(shared, a, b, strict=True) if x and not y]
    only_b_ids = [i for i, x, y in zip(shared, a, b, strict=True) if y and not x]
    costs_a = _costs([scored_a[i] for i in shared])
    costs_b = _costs([scored_b[i] for i in shared])
    rate_interval = dollars_interval = None
    if shared:
        draws = np.random.default_rng(seed).integers(0, len(shared), size=(BOOTSTRAP_RESAMPLES, len(shared)))
        rate_interval = _percentiles((b.astype(float) - a.astype(float))[draws].mean(axis=1))
        dollars_interval = _percentiles((costs_b - costs_a)[draws].mean(axis=1))
    return Pair(
        a=run_a.run_id, b=run_b.run_id, tasks=len(shared), both=int((a & b).sum()), only_a=len(only_a_ids),
        only_b=len(only_b_ids), neither=int((~a & ~b).sum()), p_value=mcnemar_exact(len(only_a_ids), len(only_b_ids)),
        rate_a=float(a.mean()) if shared else None, rate_b=float(b.mean()) if shared else None,
        rate_interval=rate_interval,
        dollars_a=float(costs_a.mean()) if shared else None, dollars_b=float(costs_b.mean()) if shared else None,
        dollars_interval=dollars_interval, only_a_ids=only_a_ids, only_b_ids=only_b_ids,
        groups=_groups(shared, a, b, meta), editors=(file_editor(run_a.config), file_editor(run_b.config)),
        flagged=(flagged_words(run_a), flagged_words(run_b)),
        infrastructure=(infrastructure_count(run_a), infrastructure_count(run_b)),
        left_out={run_a.run_id: len(scored_a.keys() - scored_b.keys()),
                  run_b.run_id: len(scored_b.keys() - scored_a.keys())},
        scoring_warnings=scored_differently(run_a, run_b))


def flagged_words(run: RunData) -> str:
    """How many of the run's verdicts integrity findings kept from counting as resolved, and of which kinds."""
    kinds = Counter(kind for task in run.tasks for kind in integrity_kinds(task))
    flagged = sum(1 for task in run.tasks if integrity_kinds(task))
    return f"{flagged} ({', '.join(f'{kind} {n}' for kind, n in sorted(kinds.items()))})" if flagged else "0"


def infrastructure_count(run: RunData) -> str:
    """How many of the run's resolved verdicts come from a patch that changes test infrastructure, and which files."""
    count, files = infrastructure_named([changed_infrastructure(task) for task in run.tasks])
    return f"{count} ({files})" if count else "0"


def scoring(task: TaskData) -> tuple[str, str | None]:
    """How a task was scored, from its eval/result.json: its settings (network, limits, the scoring profile,
    the time limit, the protocol's and swepipe's versions) in words, and the image's id; ("not on record", None)
    for a verdict that came without one."""
    result = task.eval_result
    if result is None:
        return "not on record", None
    scorer = result.scorer if isinstance(result.scorer, dict) else {}
    settings = {"network": result.network, "limits": result.limits,
                **{key: scorer.get(key) for key in ("profile", "timeout", "protocol", "swepipe")}}
    words = ", ".join(f"{key} {json.dumps(value, sort_keys=True)}" for key, value in settings.items())
    return words, scorer.get("image_id")


def scoring_warnings(name_a: str, tasks_a: list[TaskData], name_b: str, tasks_b: list[TaskData]) -> list[str]:
    """What differed between how two runs' shared tasks were scored (both lists in the same task order)."""
    warnings = []
    scored_a, scored_b = [scoring(t) for t in tasks_a], [scoring(t) for t in tasks_b]
    seen_a, seen_b = {words for words, _ in scored_a}, {words for words, _ in scored_b}
    if seen_a != seen_b:
        warnings.append(f"the runs were scored under different settings: {name_a}: {'; '.join(sorted(seen_a))}. "
                        f"{name_b}: {'; '.join(sorted(seen_b))}")
    images = sum(1 for (_, a), (_, b) in zip(scored_a, scored_b, strict=True) if None not in (a, b) and a != b)
    if images:
        warnings.append(f"{images} task(s) were scored in different builds of their image (another image id)")
    return warnings


def _costs(tasks: list[TaskData]) -> np.ndarray:
    """Each task's dollars, as the report counts them (the prediction's, else its ledger's)."""
    return np.array([t.total_cost for t in tasks], dtype=float)


def _percentiles(values: np.ndarray) -> tuple[float, float]:
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def _groups(shared: list[str], a: np.ndarray, b: np.ndarray, meta: dict[str, tuple[str, str]]) -> list[GroupRow]:
    return [GroupRow(kind, name, len(numbers), float(a[numbers].mean()), float(b[numbers].mean()))
            for kind, name, numbers in by_repository_and_language(list(range(len(shared))), shared, meta)]


# -- tables ---------------------------------------------------------------------------------------------------


def compare_tables(pairs: list[Pair]) -> list[Table]:
    tables = []
    for pair in pairs:
        title = f"{pair.b} against {pair.a} ({pair.tasks} tasks both scored)"
        rows = [["both resolved", str(pair.both)], [f"only {pair.a}", str(pair.only_a)],
                [f"only {pair.b}", str(pair.only_b)], ["neither", str(pair.neither)],
                ["exact McNemar p (two-sided)", f"{pair.p_value:.4g}"],
                ["resolve rate", f"{_rate(pair.rate_a)} -> {_rate(pair.rate_b)}"],
                ["difference (B - A), 95% paired bootstrap", _difference(pair.rate_a, pair.rate_b, pair.rate_interval,
                                                                         percent_points=True)],
                ["$/task", f"{_money(pair.dollars_a)} -> {_money(pair.dollars_b)}"],
                ["$/task difference (B - A), 95% paired bootstrap",
                 _difference(pair.dollars_a, pair.dollars_b, pair.dollars_interval)],
                ["file editor", f"{pair.editors[0]} -> {pair.editors[1]}"],
                ["verdicts flagged by integrity checks (not resolved)", f"{pair.flagged[0]} -> {pair.flagged[1]}"],
                ["resolved verdicts whose patch changes test infrastructure",
                 f"{pair.infrastructure[0]} -> {pair.infrastructure[1]}"],
                [f"resolved only by {pair.a}", ", ".join(pair.only_a_ids) or "none"],
                [f"resolved only by {pair.b}", ", ".join(pair.only_b_ids) or "none"]]
        notes = [f"Warning: {warning}" for warning in pair.scoring_warnings]
        notes.append("On the tasks both runs scored (a verdict in each; infrastructure errors have none).")
        notes += [f"{run}: {count} scored task(s) the other run did not score, left out"
                  for run, count in pair.left_out.items() if count]
        tables.append(Table(title, ["", "value"], rows, notes))
        groups = [[row.group, row.name, str(row.tasks), percent(row.rate_a), percent(row.rate_b),
                   f"{row.difference * 100:+.1f} pp"] for row in pair.groups]
        tables.append(Table(f"{pair.b} against {pair.a}, by repository and language",
                            ["by", "name", "tasks", pair.a, pair.b, "B - A"], groups,
                            ["Repository and language from the dataset; ? where it was not read."]))
    return tables


def _rate(value: float | None) -> str:
    return percent(value) if value is not None else "n/a"


def _money(value: float | None) -> str:
    return money(value) if value is not None else "n/a"


def _difference(a: float | None, b: float | None, interval: tuple[float, float] | None,
                percent_points: bool = False) -> str:
    if a is None or b is None or interval is None:
        return "n/a"
    if percent_points:
        return f"{(b - a) * 100:+.1f} pp [{interval[0] * 100:+.1f}, {interval[1] * 100:+.1f}]"
    return f"{b - a:+.4f} [{interval[0]:+.4f}, {interval[1]:+.4f}]"
