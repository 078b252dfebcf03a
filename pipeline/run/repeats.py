"""`swepipe run --repeats N`: one config run N times, with other seeds, into sibling run directories.

Repeat r of the group G is the ordinary run directory ``<runs-dir>/G-r<r>`` (pipeline.rundir.layout.repeat_run_id),
made, resumed and scored by the run path as any run is. Two things of its config differ from the command line's: the
seeds, shifted by ``SEED_STRIDE`` x (r - 1), and ``budgets.per_run``, which bounds the repeats together: a repeat
may spend the group's budget less what the other repeats' ledgers hold. ``repeat.json`` in each says which repeat it
is, of how many, of which group, and with which seed and budget, for the reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import SwepipeError
from pipeline.run.task import spent_in_run
from pipeline.rundir.layout import RunLayout, repeat_dirs, repeat_run_id
from pipeline.rundir.storage import write_json_atomic
from pipeline.settings.config import RunConfig

SEED_STRIDE = 1000  # rollout i of repeat r uses juniors.seed + 1000 (r - 1) + i: no two repeats share a seed for K<1000


@dataclass(frozen=True)
class Repeat:
    group: str
    number: int  # 1..of
    of: int

    @property
    def run_id(self) -> str:
        return repeat_run_id(self.group, self.number)

    @property
    def seed_offset(self) -> int:
        return SEED_STRIDE * (self.number - 1)


def plan_repeats(group: str, repeats: int) -> list[Repeat]:
    if repeats < 1:
        raise SwepipeError(f"--repeats {repeats}: give how many times to run the config, 1 or more (1, the default: "
                           "one run in runs/<run-id>; N: runs/<run-id>-r1 .. -rN)")
    return [Repeat(group, number, repeats) for number in range(1, repeats + 1)]


def repeat_config(config: RunConfig, repeat: Repeat, runs_dir: Path) -> RunConfig:
    """The config ``repeat`` runs with: its seeds shifted, and ``budgets.per_run`` (when set) what the other repeats
    of its group, under ``runs_dir``, left of it. The repeat's own spend is not taken off here: its run's budget
    counts it from its ledgers, as a resumed run's does."""
    # juniors.seed is the config's one seed (the other agents are sent none).
    juniors = config.juniors.model_copy(update={"seed": config.juniors.seed + repeat.seed_offset})
    budgets = config.budgets
    if budgets.per_run is not None:
        others = sum(spent_in_run(RunLayout(root)) for number, root in repeat_dirs(runs_dir, repeat.group).items()
                     if number != repeat.number)
        budgets = budgets.model_copy(update={"per_run": max(0.0, budgets.per_run - others)})
    return config.model_copy(update={"juniors": juniors, "budgets": budgets})


def record_repeat(layout: RunLayout, repeat: Repeat, config: RunConfig, group_budget: float | None) -> None:
    """``repeat.json``: the repeat, of how many, of which group; its juniors.seed and offset; the group's per_run."""
    write_json_atomic(layout.repeat, {"group": repeat.group, "repeat": repeat.number, "repeats": repeat.of,
                                      "seed_offset": repeat.seed_offset, "juniors_seed": config.juniors.seed,
                                      "group_budget_per_run": group_budget})
