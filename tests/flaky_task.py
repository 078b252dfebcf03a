"""A dataset for validate's tests: bundled tasks as they are, and a copy of one whose suite gains a test that
fails on every other run.

The flaky copy keeps its original's image (the image template names it by ``dockerhub_tag``) and gets a run
script that first writes ``tests/test_seeded.py`` into the repository: its one test passes when the seed the run
gives the tests (SWEPIPE_SCORING_SEED, validate's replica number) is even and fails when it is odd, so half of
any run of consecutive replicas fail it, with either patch. It is a PASS_TO_PASS test of that task.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.tasks import Task
from pipeline.tasks.datasets import BUNDLED_TASKS_DIR

SEEDED_FILE = "tests/test_seeded.py"
SEEDED_TEST = f"{SEEDED_FILE}::test_passes_on_even_seeds"
SEEDED_SOURCE = '''import os


def test_passes_on_even_seeds():
    seed = int(os.environ.get("SWEPIPE_SCORING_SEED", "0"))
    assert seed % 2 == 0, f"seed {seed}: this test fails on every other run"
'''


def flaky_copy(task: Task) -> Task:
    """``task`` under another id, with the seeded test among its PASS_TO_PASS tests and test files."""
    return task.model_copy(update={
        "instance_id": task.instance_id.replace("swepipe-bundled__", "swepipe-fixture__flaky-"),
        "pass_to_pass": [*task.pass_to_pass, SEEDED_TEST],
        "selected_test_files_to_run": [*task.selected_test_files_to_run, SEEDED_FILE]})


def write_dataset(folder: Path, stable: list[Task], flaky_from: Task) -> tuple[Path, Path, Task]:
    """(the dataset file, the run scripts folder, the flaky task): ``stable`` as they are and a flaky copy of
    ``flaky_from`` (a pytest task), with run scripts laid out as the official run_scripts/."""
    flaky = flaky_copy(flaky_from)
    scripts = folder / "run_scripts"
    for task in stable:
        (scripts / task.instance_id).mkdir(parents=True)
        for name in ("run_script.sh", "parser.py"):
            (scripts / task.instance_id / name).write_bytes((BUNDLED_TASKS_DIR / task.instance_id / name).read_bytes())
    own = scripts / flaky.instance_id
    own.mkdir(parents=True)
    original = BUNDLED_TASKS_DIR / flaky_from.instance_id
    (own / "parser.py").write_bytes((original / "parser.py").read_bytes())
    body = (original / "run_script.sh").read_text().split("\n", 1)[1]  # without its #! line
    (own / "run_script.sh").write_text(f"#!/bin/bash\ncat > /app/{SEEDED_FILE} <<'SEEDED'\n{SEEDED_SOURCE}SEEDED\n"
                                       + body)
    dataset = folder / "dataset.jsonl"
    dataset.write_text("".join(json.dumps(task.to_row()) + "\n" for task in [*stable, flaky]))
    return dataset, scripts, flaky
