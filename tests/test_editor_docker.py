"""Rollouts that change the repository only through the editor, in a real container of a bundled task, scored
by its hidden tests: the ```edit block (text format) and str_replace_editor calls (tool format)."""

import json
import re

import pytest
from live_runs import live_steps
from scripted_pipeline import SUBMIT, edit_block_from_patch, editor_calls_from_patch, patch_per_file, reply
from test_run_docker import setup, swepipe

from pipeline.models.ledger import Ledger
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.tasks import load_tasks

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TASK = next(t for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))
VIEW = reply(f"First the file.\n```view\n{next(iter(patch_per_file(TASK.patch)))} 1-20\n```")


@pytest.mark.parametrize("action_format", ["text", "tools"])
def test_a_rollout_that_only_edits_resolves_the_task(tmp_path, action_format):
    if action_format == "text":
        replies = [VIEW, reply(edit_block_from_patch(TASK.patch)), SUBMIT]
    else:
        replies = [*editor_calls_from_patch(TASK.patch), {"content": "", "tool_calls": [{"name": "submit",
                                                                                       "arguments": {}}]}]
    setup(tmp_path, {"junior": [replies]}, juniors={"k": 1}, limits={"action_format": action_format})
    run_id = f"edits-{action_format}"
    done = swepipe("run", "--strategy", "vote", "--instance-ids", TASK.instance_id, "--config", "config.yaml",
                   "--run-id", run_id, "--evaluate", cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / run_id)
    prediction = finished_predictions(layout.predictions)[TASK.instance_id]
    assert prediction["resolved"] is True, (prediction, done.stdout[-2000:])
    paths = layout.task(TASK.instance_id)
    steps = json.loads((paths.junior / "rollout-00.json").read_text())["trajectory"]["steps"]
    assert not [s for s in steps if s["action"] == "bash"]  # no command ran: every change was an edit
    edits = [e for s in steps for e in s["edits"]]
    assert edits and all(e["ok"] for e in edits), edits
    assert {s["action"] for s in steps} <= {"view", "edit", "str_replace_editor", "submit"}
    rows = Ledger.read(paths.ledger)
    assert len(rows) == len(replies)  # one paid call per reply


def test_a_killed_edit_only_rollout_resumes_in_a_new_container_without_paying_twice(tmp_path):
    """SIGKILL after the rollout's edit: the rerun opens a new container, makes the recorded edit again from the
    trajectory (no reply paid twice), finishes the rollout and its candidate resolves the task."""
    import signal
    import subprocess
    import sys
    import time

    from scripted_pipeline import bash

    from pipeline.runtime import containers

    replies = [reply(edit_block_from_patch(TASK.patch)), bash("sleep 6 && echo checked"), SUBMIT]
    setup(tmp_path, {"junior": [replies]}, juniors={"k": 1})
    run_id = "edits-killed"
    command = [sys.executable, "-m", "pipeline.cli", "run", "--strategy", "vote", "--instance-ids", TASK.instance_id,
               "--config", "config.yaml", "--run-id", run_id]
    layout = RunLayout(tmp_path / "runs" / run_id)
    junior = layout.task(TASK.instance_id).junior
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:  # kill once the edit is on record, during the command after it
            steps = live_steps(junior).get("rollout-00.trajectory.jsonl", [])
            if steps and steps[0]["edits"]:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the rollout never made its edit")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert not finished_predictions(layout.predictions)
    left = containers.client().containers.list(all=True, filters={"label": f"{containers.RUN_LABEL}={run_id}"})
    assert left  # nothing ran at the kill: the rollout's container is still up (no `swepipe cleanup` here)
    paid_before = Ledger.read(layout.task(TASK.instance_id).ledger)
    assert 1 <= len(paid_before) < len(replies)

    done = swepipe("run", "--strategy", "vote", "--instance-ids", TASK.instance_id, "--config", "config.yaml",
                   "--run-id", run_id, "--evaluate", cwd=tmp_path)
    prediction = finished_predictions(layout.predictions)[TASK.instance_id]
    assert prediction["resolved"] is True, (prediction, done.stdout[-2000:])
    # The resume removed what the killed session left (its owner is dead), and said so.
    # (how many: those up at the kill, or one more that was starting then)
    assert re.search(rf"removed \d+ container\(s\) a killed session of run {run_id} left behind", done.stdout)
    record = json.loads((layout.task(TASK.instance_id).junior / "rollout-00.json").read_text())
    assert record["trajectory"]["resumed"] is True
    assert [s["action"] for s in record["trajectory"]["steps"]] == ["edit", "bash", "submit"]
    rows = Ledger.read(layout.task(TASK.instance_id).ledger)
    assert len(rows) == len(replies) and all(r.error is None for r in rows)  # each reply paid once
    assert containers.client().containers.list(all=True, filters={"label": f"{containers.RUN_LABEL}={run_id}"}) == []
