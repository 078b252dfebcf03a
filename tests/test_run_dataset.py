"""A run records the dataset its tasks come from, so that later commands on it (coverage, eval, report, a resumed
run) load the same tasks without --dataset again, and a resume that names another dataset is refused. The runs are
built by hand (tests/test_coverage.py's) or stopped before any container; no Docker."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from run_sessions import session
from test_coverage import GOLD, make_run

from pipeline.errors import SwepipeError
from pipeline.run.run_dataset import recorded_dataset
from pipeline.run.setup import resolve_config
from pipeline.tasks import load_tasks

TESTS = Path(__file__).parent
FIXTURE = TESTS / "fixtures" / "swebench_pro_rows.jsonl"


def swepipe(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {"COLUMNS": "200", "PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join([str(TESTS.parent),
                                                                                             str(TESTS)]), **env}
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=cwd,
                          stdin=subprocess.DEVNULL, env=environment, timeout=120)


def task_file(directory: Path) -> Path:
    """A one-task dataset file whose task (t1, gold patch GOLD) is in no other dataset."""
    row = json.loads(FIXTURE.read_text().splitlines()[0]) | {"instance_id": "t1", "patch": GOLD}
    path = directory / "tasks.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path


def scripted_config(directory: Path) -> Path:
    spec = {"model": f"scripted/{directory / 'script.yaml'}", "prices": {"input": 1.0, "output": 1.0}}
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump({"models": {role: spec for role in ("junior", "senior", "principal")},
                                    "juniors": {"k": 1}, "containers": {"impl": "local_opener:open_local"}}))
    return path


def test_a_run_records_its_dataset_as_an_absolute_path_and_refuses_another(tmp_path, monkeypatch):
    task_file(tmp_path)
    monkeypatch.chdir(tmp_path)  # the dataset is named relative to here, as on a command line
    config = resolve_config(scripted_config(tmp_path))
    settings = session(config, "r", tmp_path / "runs", dataset="tasks.jsonl")
    recorded = recorded_dataset(settings.layout.root)
    assert recorded.dataset == str(tmp_path / "tasks.jsonl") and recorded.split == ""
    assert [t.instance_id for t in load_tasks(recorded.dataset)] == ["t1"]  # loads from any directory

    session(config, "r", tmp_path / "runs", dataset=str(tmp_path / "tasks.jsonl"))
    with pytest.raises(SwepipeError) as refused:
        session(config, "r", tmp_path / "runs", dataset="bundled")
    assert "holds tasks of" in str(refused.value) and str(tmp_path / "tasks.jsonl") in str(refused.value)
    assert "not bundled" in str(refused.value) and "--run-id" in str(refused.value)
    with pytest.raises(SwepipeError, match="split train"):
        session(config, "r", tmp_path / "runs", dataset="ScaleAI/SWE-bench_Pro", split="train")
    assert recorded_dataset(settings.layout.root) == recorded  # untouched by the refused ones


def test_a_run_begun_before_runs_recorded_their_dataset_gets_no_record_it_cannot_be_sure_of(tmp_path):
    """Its dataset is unknown: recording the one given now (perhaps the default, --dataset forgotten) would make
    every later command load the wrong tasks without a word."""
    old = tmp_path / "runs" / "old"
    (old / "tasks" / "some-task").mkdir(parents=True)
    settings = session(resolve_config(scripted_config(tmp_path)), "old", tmp_path / "runs")
    assert not settings.layout.dataset.exists() and recorded_dataset(old) is None


def test_a_resume_that_names_another_dataset_is_refused_before_anything_runs(tmp_path):
    task_file(tmp_path)
    session(resolve_config(scripted_config(tmp_path)), "r", tmp_path / "runs", dataset=str(tmp_path / "tasks.jsonl"))
    tinyq = next(t.instance_id for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))
    done = swepipe("run", "-d", "bundled", "--instance-ids", tinyq, "--run-id", "r", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    message = " ".join(done.stderr.split())
    assert "run r holds tasks of" in message and "tasks.jsonl" in message and "not bundled" in message
    assert not (tmp_path / "runs" / "r" / "tasks" / tinyq).exists()


def test_a_finished_run_resumed_without_dataset_goes_on_with_its_own_tasks(tmp_path):
    """Without --dataset, `swepipe run --run-id r` resumes on the run's dataset: t1 is finished, so nothing runs
    (the opener refuses to open anything). Before, it looked for t1 in the bundled tasks and stopped."""
    task_file(tmp_path)
    make_run(tmp_path / "runs" / "r")
    config = scripted_config(tmp_path)
    (tmp_path / "runs" / "r" / "config.yaml").write_text(resolve_config(config).to_yaml())  # as it ran
    (tmp_path / "runs" / "r" / "dataset.json").write_text(json.dumps({"dataset": str(tmp_path / "tasks.jsonl"),
                                                                      "split": ""}))
    done = swepipe("run", "--run-id", "r", "--instance-ids", "t1", "--config", str(config),
                   cwd=tmp_path, SWEPIPE_TEST_REFUSE="1")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    output = " ".join(done.stdout.split())
    assert f"tasks from {tmp_path / 'tasks.jsonl'}, as run r recorded" in output and "1 task(s)" in output


def test_coverage_of_a_run_uses_its_recorded_dataset_unless_one_is_given(tmp_path):
    task_file(tmp_path)
    run = make_run(tmp_path / "runs" / "r")
    (run / "dataset.json").write_text(json.dumps({"dataset": str(tmp_path / "tasks.jsonl"), "split": ""}))

    recorded = swepipe("coverage", "runs/r", cwd=tmp_path)
    assert recorded.returncode == 0, recorded.stderr
    output = " ".join(recorded.stdout.split())
    assert "as run r recorded" in output and "1 task(s); removed-line coverage over the 1" in output
    assert "not in the dataset" not in output

    given = swepipe("coverage", "runs/r", "--dataset", "bundled", cwd=tmp_path)  # the user's choice stands
    assert given.returncode == 0, given.stderr
    output = " ".join(given.stdout.split())
    assert "as run r recorded" not in output and "No coverage for 1 task(s): not in the dataset" in output


def test_report_loads_each_runs_dataset(tmp_path):
    """Two runs side by side, one on a task file and one from before runs recorded their dataset: the report
    reads both, and its coverage counts the task file's task."""
    task_file(tmp_path)
    run = make_run(tmp_path / "runs" / "r")
    (run / "dataset.json").write_text(json.dumps({"dataset": str(tmp_path / "tasks.jsonl"), "split": ""}))
    old = make_run(tmp_path / "runs" / "old")
    done = swepipe("report", "runs/r", "runs/old", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "as run r recorded" in " ".join(done.stdout.split())
    assert not (old / "dataset.json").exists()
    report = (run / "report.md").read_text()
    assert report.count("_1 task(s); removed-line coverage over the 1 whose") == 2  # r's, and old's (same task)


def test_an_unreadable_record_names_the_file_and_the_way_out(tmp_path):
    run = make_run(tmp_path / "runs" / "r")
    (run / "dataset.json").write_text("{not json")
    done = swepipe("coverage", "runs/r", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    message = " ".join(done.stderr.split())
    assert "dataset.json cannot be read" in message and "--dataset" in message
