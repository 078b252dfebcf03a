"""Docker failing under scoring, in real containers: the SDK call that sends a scoring's files in raises
``requests.exceptions.ConnectionError`` (tests/faulty_scoring.py), as when dockerd restarts as a container starts.
Such a fault is an infra_error, never a verdict and never an exception that ends the run; a rerun scores it again;
and Docker failing past the outage time stops the scoring as a stop does."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from docker.models.containers import Container
from faulty_scoring import faulty_start
from leftovers import run_containers

from pipeline.cli.eval_command import predictions_run_id
from pipeline.control import stopping
from pipeline.control.outages import BREAKERS, Settings
from pipeline.evaluation.batch import evaluate_predictions
from pipeline.evaluation.engine import TRIES
from pipeline.evaluation.runner import EvalSettings, evaluate
from pipeline.evaluation.task_scoring import score_prediction
from pipeline.interop.predictions import PatchToScore
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.tasks import load_tasks
from pipeline.tasks.datasets import BUNDLED, defaults_for

pytestmark = pytest.mark.docker
TASKS = load_tasks(BUNDLED)
TESTS = Path(__file__).parent


def settings(run_id, **overrides):
    defaults = defaults_for(BUNDLED)
    return EvalSettings(**{"image_template": defaults.image_template, "run_scripts": defaults.run_scripts,
                           "run_id": run_id, **overrides})


def left_behind(run_id):
    return run_containers(run_id)


def failing(monkeypatch, tmp_path, times, instance_id=None):
    counter = tmp_path / "faults"
    counter.write_text(str(times))
    monkeypatch.setattr(Container, "start", faulty_start(counter, instance_id))
    return counter


def test_a_connection_error_while_scoring_is_an_infra_error_not_an_exception(tmp_path, run_id, monkeypatch):
    BREAKERS.configure(Settings(pause_after=50))  # failing alone, it would otherwise be waited out as an outage
    task = TASKS[0]
    counter = failing(monkeypatch, tmp_path, 100)
    result = evaluate(task, task.patch, tmp_path / "eval", settings(run_id)).to_dict()
    assert counter.read_text() == str(100 - TRIES)  # tried again at once a few times
    assert result["category"] == "infra_error" and result["resolved"] is False
    assert "ConnectionError" in result["error"] and "Connection aborted" in result["error"]
    assert left_behind(run_id) == []


def test_a_connection_error_once_is_tried_again_and_scored(tmp_path, run_id, monkeypatch):
    task = TASKS[0]
    counter = failing(monkeypatch, tmp_path, 1)
    result = evaluate(task, task.patch, tmp_path / "eval", settings(run_id)).to_dict()
    assert counter.read_text() == "0"  # it did fail once
    assert result["category"] == "resolved", result
    assert left_behind(run_id) == []


def test_run_evaluate_keeps_an_infra_error_apart_and_scores_it_on_the_rerun(tmp_path, run_id, monkeypatch):
    """`swepipe run --evaluate` scores through pipeline.evaluation.task_scoring.score_prediction: a fault there
    leaves no result.json (the task stays unfinished), and the next try scores it."""
    BREAKERS.configure(Settings(pause_after=50))
    task = TASKS[0]
    paths = RunLayout(tmp_path / "run").task(task.instance_id)
    counter = failing(monkeypatch, tmp_path, 100)
    assert score_prediction(task, task.patch, paths, settings(run_id)) is None
    assert not (paths.eval / "result.json").exists()
    assert "ConnectionError" in json.loads((paths.eval / "infra_error.json").read_text())["error"]
    counter.write_text("0")
    assert score_prediction(task, task.patch, paths, settings(run_id)) is True
    assert json.loads((paths.eval / "result.json").read_text())["category"] == "resolved"
    assert left_behind(run_id) == []


def test_eval_scores_the_others_and_a_rerun_retries_the_infra_error_without_redo(tmp_path, run_id, monkeypatch):
    BREAKERS.configure(Settings(pause_after=50))  # one instance failing must not pause the others here
    broken, fine = TASKS[0], TASKS[1]
    counter = failing(monkeypatch, tmp_path, 100, broken.instance_id)
    predictions = [PatchToScore(t.instance_id, t.patch) for t in (broken, fine)]
    out = tmp_path / "out"
    first = evaluate_predictions(predictions, TASKS, out, settings(run_id), workers=1, show_progress=False)
    assert first.results[broken.instance_id].category == "infra_error"
    assert first.results[fine.instance_id].category == "resolved"
    assert json.loads((out / "infra_errors.json").read_text()).keys() == {broken.instance_id}
    scored_at = (out / fine.instance_id / "result.json").stat().st_mtime_ns

    counter.write_text("0")  # Docker is back
    again = evaluate_predictions(predictions, TASKS, out, settings(run_id), workers=1, show_progress=False)
    assert again.skipped == [fine.instance_id]  # a verdict is kept; the infra_error was scored again
    assert again.results[broken.instance_id].category == "resolved"
    assert (out / fine.instance_id / "result.json").stat().st_mtime_ns == scored_at
    assert json.loads((out / "eval_results.json").read_text()) == {broken.instance_id: True, fine.instance_id: True}
    assert json.loads((out / "infra_errors.json").read_text()) == {}
    assert left_behind(run_id) == []


def test_docker_down_past_the_outage_time_stops_the_scoring_with_no_infra_error(tmp_path, run_id, monkeypatch):
    BREAKERS.configure(Settings(pause_after=2, outage_seconds=3, max_wait=0.5, first_wait=0.2))
    failing(monkeypatch, tmp_path, 10_000)
    predictions = [PatchToScore(t.instance_id, t.patch) for t in TASKS[:4]]
    out = tmp_path / "out"
    with pytest.raises(stopping.Stopped):
        evaluate_predictions(predictions, TASKS, out, settings(run_id), workers=2, show_progress=False)
    assert "docker has been failing" in stopping.reason() and "ConnectionError" in stopping.reason()
    assert list(out.glob("*/result.json")) == []  # waited out, then stopped: nothing recorded for a rerun to skip
    assert left_behind(run_id) == []


@pytest.mark.slow
def test_swepipe_eval_stops_on_a_lasting_docker_fault_exit_1_and_the_same_command_resumes(tmp_path):
    task = TASKS[0]
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text(json.dumps({"instance_id": task.instance_id, "model_patch": task.patch}) + "\n")
    counter = tmp_path / "faults"
    counter.write_text("10000")
    args = ["eval", "--predictions", str(predictions), "--output", str(tmp_path / "out"), "--outage-seconds", "4"]
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "SWEPIPE_FAULT_FILE": str(counter), "COLUMNS": "250"}
    launcher = [sys.executable, "-c", "import faulty_scoring; faulty_scoring.main()"]
    down = subprocess.run([*launcher, *args], capture_output=True, text=True, env=env, timeout=300)
    output = down.stdout + down.stderr
    assert down.returncode == 1, output
    assert "docker has been failing for" in output and "longer than the outage time" in output
    assert f"run the same command again (`swepipe {' '.join(args)}`)" in output
    assert not (tmp_path / "out" / task.instance_id / "result.json").exists()
    assert left_behind(predictions_run_id(predictions)) == []

    counter.write_text("0")
    back = subprocess.run([*launcher, *args], capture_output=True, text=True, env=env, timeout=300)
    assert back.returncode == 0, back.stdout + back.stderr
    assert json.loads((tmp_path / "out" / "eval_results.json").read_text()) == {task.instance_id: True}


@pytest.mark.slow
def test_swepipe_run_evaluate_waits_out_a_docker_fault_then_resumes_scoring_without_paying_twice(tmp_path):
    import yaml
    from scripted_pipeline import SUBMIT, apply_patch_command, bash

    from pipeline.models.ledger import Ledger

    task = next(t for t in TASKS if t.repo.endswith("/tinyq"))
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"solo": [[bash(apply_patch_command(task.patch)), SUBMIT]]}))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "models": {"solo": {"model": f"scripted/{tmp_path / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}}},
        "faults": {"outage_seconds": 4}}))
    counter = tmp_path / "faults"
    counter.write_text("10000")
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "SWEPIPE_FAULT_FILE": str(counter), "COLUMNS": "250"}
    command = [sys.executable, "-c", "import faulty_scoring; faulty_scoring.main()", "run", "--strategy", "solo",
               "--instance-ids", task.instance_id, "--config", "config.yaml", "--run-id", "scorefault", "--evaluate"]
    down = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert down.returncode == 1, down.stdout[-3000:] + down.stderr[-3000:]
    assert "docker has been failing for" in down.stdout + down.stderr
    layout = RunLayout(tmp_path / "runs" / "scorefault")
    assert task.instance_id not in finished_predictions(layout.predictions)  # no verdict: the task stays unfinished
    assert not (layout.task(task.instance_id).eval / "result.json").exists()
    paid = len(Ledger.read(layout.task(task.instance_id).ledger))
    assert left_behind("scorefault") == []

    counter.write_text("0")
    back = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert back.returncode == 0, back.stdout[-3000:] + back.stderr[-3000:]
    assert finished_predictions(layout.predictions)[task.instance_id]["resolved"] is True
    assert len(Ledger.read(layout.task(task.instance_id).ledger)) == paid  # the solo agent was not paid again
