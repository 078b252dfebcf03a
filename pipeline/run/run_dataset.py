"""Which dataset a run's tasks come from: written when the run starts (``dataset.json``), read by every later
command on the run, so that a run on SWE-Bench Pro is scored, reported and resumed on SWE-Bench Pro's tasks without
``--dataset`` again, and a resume that names another dataset is refused instead of mixing two task sets in one
run directory."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import SwepipeError
from pipeline.rundir.layout import RunLayout
from pipeline.rundir.storage import write_json_atomic
from pipeline.tasks.datasets import BUNDLED


@dataclass(frozen=True)
class RunDataset:
    dataset: str
    split: str

    def describe(self) -> str:
        return self.dataset if self._is_local() else f"{self.dataset} (split {self.split})"

    def _is_local(self) -> bool:
        return self.dataset == BUNDLED or Path(self.dataset).is_absolute()


def canonical(dataset: str, split: str) -> RunDataset:
    """``dataset`` as it is recorded: a local task file as its absolute path (a later command may run from another
    directory); a named or Hub dataset as given. A local file has no split."""
    path = Path(dataset).expanduser()
    if dataset != BUNDLED and path.exists():
        return RunDataset(str(path.resolve()), "")
    return RunDataset(dataset, "" if dataset == BUNDLED else split)


def recorded_dataset(run_root: Path) -> RunDataset | None:
    """The dataset the run at ``run_root`` recorded, or None (a run from before runs recorded it, or no run)."""
    path = RunLayout(run_root).dataset
    try:
        data = json.loads(path.read_text())
        return RunDataset(str(data["dataset"]), str(data.get("split") or ""))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SwepipeError(f"{path} cannot be read ({error}); pass --dataset, or delete the file and pass "
                           "--dataset") from None


def record_dataset(layout: RunLayout, dataset: str, split: str) -> None:
    """Write the run's dataset; a run that already has one must be on the same dataset. A run begun before runs
    recorded their dataset (task folders, no record) gets none: the dataset given now may not be the one it ran on
    (the default, when --dataset was forgotten), and a wrong record would mislead every later command."""
    given = canonical(dataset, split)
    recorded = recorded_dataset(layout.root)
    if recorded is None:
        if not any(layout.tasks.glob("*")):
            write_json_atomic(layout.dataset, {"dataset": given.dataset, "split": given.split})
    elif recorded != given:
        raise SwepipeError(f"run {layout.run_id} holds tasks of {recorded.describe()}, not {given.describe()}: "
                           f"drop --dataset/--split to go on with the run's own tasks, or choose another --run-id")
