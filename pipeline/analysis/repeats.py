"""Repeats of one config (``swepipe run --repeats N``): each repeat's resolve rate and dollars per task, their mean
and sample standard deviation across the repeats, and pass@k over the repeats.

pass@k of a task: of the n repeats that scored it, c resolved it; the unbiased estimator 1 - C(n-c, k) / C(n, k) is
the chance that k of those n repeats, drawn without replacement, hold at least one that resolved it. pass@k of the
group is its mean over the tasks with n >= k.

The repeats are found by their record (``repeat.json``, read by pipeline.analysis.load): runs of one group in one
folder form it, whatever order they are given in; ``runs/<group>``, which is no run itself, stands for all of them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from pipeline.analysis.load import RunData
from pipeline.analysis.stats import RunStats
from pipeline.analysis.table import NA, Table, money, percent
from pipeline.rundir.layout import repeat_dirs


@dataclass(frozen=True)
class RepeatRow:
    run_id: str
    number: int
    seed: int | None  # its juniors.seed
    scored: int
    resolved: int
    rate: float | None  # resolved / scored
    dollars_per_task: float | None


@dataclass(frozen=True)
class PassAtK:
    k: int
    value: float | None  # None: no task was scored by k repeats
    tasks: int  # the tasks it is the mean over


@dataclass(frozen=True)
class RepeatGroup:
    group: str
    rows: list[RepeatRow]  # by repeat number
    rate: tuple[float | None, float | None]  # mean, sample standard deviation across the repeats
    dollars_per_task: tuple[float | None, float | None]
    pass_at: list[PassAtK]  # k = 1 .. the number of repeats


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k): some of k of the n repeats resolved the task, when c of the n did (k <= n)."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_and_sd(values: list[float]) -> tuple[float | None, float | None]:
    """The mean and the sample (n - 1) standard deviation; None where there are too few values."""
    mean = statistics.fmean(values) if values else None
    return mean, statistics.stdev(values) if len(values) > 1 else None


def repeat_group(group: str, members: list[tuple[RunData, RunStats]]) -> RepeatGroup:
    """The numbers of one group's repeats (each run with its stats)."""
    members = sorted(members, key=lambda member: _repeat_number(member[0]))
    rows = [RepeatRow(run.run_id, _repeat_number(run), _seed(run), s.scored, s.resolved, s.rate,
                      s.dollars_per_task) for run, s in members]
    outcomes: dict[str, list[bool]] = {}  # instance id -> its verdict in each repeat that scored it
    for run, _ in members:
        for task in run.tasks:
            if task.resolved is not None:
                outcomes.setdefault(task.instance_id, []).append(task.resolved)
    pass_at = []
    for k in range(1, len(members) + 1):
        values = [pass_at_k(len(seen), sum(seen), k) for seen in outcomes.values() if len(seen) >= k]
        pass_at.append(PassAtK(k, statistics.fmean(values) if values else None, len(values)))
    return RepeatGroup(group, rows, mean_and_sd([r.rate for r in rows if r.rate is not None]),
                       mean_and_sd([r.dollars_per_task for r in rows if r.dollars_per_task is not None]), pass_at)


def repeat_groups(runs: list[RunData], stats: list[RunStats]) -> list[RepeatGroup]:
    """Every group of which at least two repeats are among ``runs``, in the order its first repeat comes."""
    grouped: dict[tuple[Path, str], list[tuple[RunData, RunStats]]] = {}
    for run, s in zip(runs, stats, strict=True):
        if _is_repeat(run.repeat):
            grouped.setdefault((run.root.resolve().parent, run.repeat["group"]), []).append((run, s))
    return [repeat_group(group, members) for (_, group), members in grouped.items() if len(members) > 1]


def runs_named_by(path: Path) -> list[Path]:
    """The run directories ``path`` names: itself, or when it is no directory but names a group of repeats
    (``runs/<group>`` beside ``runs/<group>-r1`` ..), the repeats' directories by number."""
    return [path] if path.is_dir() else list(repeat_dirs(path.parent, path.name).values()) or [path]


def repeat_tables(runs: list[RunData], stats: list[RunStats]) -> list[Table]:
    tables = []
    for group in repeat_groups(runs, stats):
        (rate, rate_sd), (dollars, dollars_sd) = group.rate, group.dollars_per_task
        rows = [[str(r.number), r.run_id, NA if r.seed is None else str(r.seed), f"{r.resolved}/{r.scored}",
                 percent(r.rate), money(r.dollars_per_task)] for r in group.rows]
        rows.append(["mean ± sd", "", "", "", _plus_minus(rate, rate_sd, percent, _points),
                     _plus_minus(dollars, dollars_sd, money, money)])
        tables.append(Table(f"Repeats of {group.group} ({len(group.rows)} repeats)",
                            ["repeat", "run", "juniors.seed", "resolved", "resolve rate", "$/task"], rows,
                            ["Resolve rate over each repeat's scored tasks; $/task over its finished tasks. Mean and "
                             "sample standard deviation (n - 1) across the repeats that have the value."]))
        tables.append(Table(f"pass@k over the repeats of {group.group}", ["k", "pass@k", "tasks"],
                            [[str(p.k), percent(p.value), str(p.tasks)] for p in group.pass_at],
                            ["pass@k: the chance that at least one of k repeats resolves a task, 1 - C(n-c, k) / "
                             "C(n, k) for a task that n repeats scored and c resolved (unbiased), averaged over the "
                             "tasks with n >= k (their number in 'tasks')."]))
    return tables


def _plus_minus(mean: float | None, sd: float | None, show, show_sd) -> str:
    if mean is None:
        return NA
    return show(mean) + (f" ± {show_sd(sd)}" if sd is not None else " (one repeat: no sd)")


def _points(share: float) -> str:
    return f"{share * 100:.1f} pp"


def _is_repeat(record: dict | None) -> TypeGuard[dict]:
    """Whether a run's repeat.json (read as untrusted input) names a group and a repeat number."""
    return (isinstance(record, dict) and isinstance(record.get("group"), str)
            and isinstance(record.get("repeat"), int) and not isinstance(record.get("repeat"), bool))


def _repeat_number(run: RunData) -> int:
    """The number of a run that repeat_groups took as a repeat (its repeat.json passed _is_repeat)."""
    assert run.repeat is not None, f"{run.run_id} is no repeat"
    return run.repeat["repeat"]


def _seed(run: RunData) -> int | None:
    juniors = run.config.get("juniors")
    seed = juniors.get("seed") if isinstance(juniors, dict) else None
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None
