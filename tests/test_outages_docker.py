"""A model endpoint that goes down mid-run: the run waits, then stops cleanly; nothing is recorded as a result,
and the rerun after the outage pays each conversation position once and resolves the task."""

import subprocess
import sys

import pytest
import yaml
from live_runs import live_steps
from scripted_pipeline import edits_from_patch, reply, write_config
from test_run_docker import TWO_FILES, pipeline_script, swepipe

from pipeline.models.ledger import Ledger
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.runtime import containers
from pipeline.tasks import load_tasks

pytestmark = [pytest.mark.docker, pytest.mark.slow]
# Quick to give up, so the test does not wait minutes: a pause after 2 failures, an outage of 3 s stops the run.
FAULTS = {"pause_after": 2, "outage_seconds": 3, "max_wait": 0.5}


def configure(tmp_path, script, retries=1):
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    write_config(tmp_path / "config.yaml", tmp_path / "script.yaml", faults=FAULTS)
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    for spec in config["models"].values():
        spec["max_retries"] = retries
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))


def left_behind(run_id: str) -> list:
    return containers.client().containers.list(all=True, filters={"label": f"{containers.RUN_LABEL}={run_id}"})


def test_an_outage_mid_run_stops_it_and_the_rerun_pays_each_position_once(tmp_path):
    task, flag = TWO_FILES, tmp_path / "provider-down"
    flag.write_text("down")
    script = pipeline_script(task, [reply(edits_from_patch(task.patch))])
    script["outage"] = {"error": "server_error", "after_calls": 3, "while_exists": str(flag)}
    configure(tmp_path, script)
    command = ("run", "--instance-ids", task.instance_id, "--config", "config.yaml", "--run-id", "outage",
               "--evaluate")
    first = swepipe(*command, cwd=tmp_path, check=False)
    said = first.stdout + first.stderr
    assert first.returncode == 1, said[-3000:]
    assert "longer than the outage time" in said and "--run-id outage" in said and "InternalServerError" in said
    layout = RunLayout(tmp_path / "runs" / "outage")
    paths = layout.task(task.instance_id)
    # no result of any kind
    assert finished_predictions(layout.predictions) == {} and not (layout.root / "infra_errors.jsonl").exists()
    rollouts = sorted(p.name for p in paths.junior.glob("rollout-0?.json"))
    assert len(rollouts) < 2 and any(live_steps(paths.junior).values())  # the cut-short one's paid steps are kept
    assert not (paths.senior / "brief.json").exists() and not (paths.principal / "result.json").exists()
    assert left_behind("outage") == []

    flag.unlink()  # the provider is back
    second = swepipe(*command, cwd=tmp_path)
    prediction = finished_predictions(layout.predictions)[task.instance_id]
    assert prediction["resolved"] is True and "resolved 1/1" in second.stdout
    rows = Ledger.read(paths.ledger)
    answered = [(r.stage, r.agent) for r in rows if r.error is None]
    # Each conversation position paid once: two replies per junior, the senior's two, the principal's one.
    assert answered.count(("junior", "rollout-00")) == 2 and answered.count(("junior", "rollout-01")) == 2
    assert len(answered) == 2 + 2 + 2 + 1
    failed = [r for r in rows if r.error]
    assert failed and all("InternalServerError" in r.error and r.cost == 0 for r in failed)


def test_an_outage_across_ten_queued_tasks_stops_after_a_bounded_number_of_calls(tmp_path):
    tasks = load_tasks("bundled")[:10]
    script = pipeline_script(TWO_FILES, [reply("no edits")])
    script["outage"] = {"error": "connection", "seconds": 3600}  # down from the first call on
    configure(tmp_path, script, retries=4)
    ids = ",".join(t.instance_id for t in tasks)
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", ids, "--config",
                           "config.yaml", "--run-id", "queued", "--workers", "2"], cwd=tmp_path, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "APIConnectionError" in done.stdout + done.stderr
    layout = RunLayout(tmp_path / "runs" / "queued")
    attempts = sum(row.retries + 1 for ledger in (layout.root / "tasks").glob("*/ledger.jsonl")
                   for row in Ledger.read(ledger))
    # Two tasks at a time, two rollouts each, four retries each, three tries of a task: 240 calls without the
    # breaker; with it, a few failures open it and then one probe at a time goes out until the outage time.
    assert 0 < attempts <= 40, attempts
    assert finished_predictions(layout.predictions) == {} and left_behind("queued") == []


def test_a_run_in_which_no_model_call_answered_does_not_end_as_a_plain_score(tmp_path):
    task = TWO_FILES
    refused = [{"error": "bad_request"}]
    configure(tmp_path, {"junior": [refused], "senior": refused, "principal": refused})
    done = swepipe("run", "--instance-ids", task.instance_id, "--config", "config.yaml", "--run-id", "silent",
                   "--evaluate", cwd=tmp_path, check=False)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "no model answered: every one of the 4 model call(s)" in " ".join(done.stdout.split())
    prediction = finished_predictions(RunLayout(tmp_path / "runs" / "silent").predictions)[task.instance_id]
    assert prediction["calls"] == {"made": 4, "failed": 4}  # the refusals are the models' outcomes: recorded
