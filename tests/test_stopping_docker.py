"""Stops that stop and Docker faults that are not results: `swepipe run` in a subprocess, real containers,
scripted models."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from leftovers import run_containers
from live_runs import live_steps
from scripted_pipeline import SUBMIT, apply_patch_command, bash, brief_from_patch, edits_from_patch, reply, write_config

from pipeline.models.ledger import Ledger
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.tasks import load_tasks

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TASK = next(t for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))
TESTS = Path(__file__).resolve().parent
PYTHONPATH = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))  # for the fault opener


def script(juniors):
    return {"junior": juniors,
            "senior": [bash("git grep -n 'def ' -- '*.py' | head -5"), reply(brief_from_patch(TASK.patch))],
            "principal": [reply(edits_from_patch(TASK.patch))]}


def start(tmp_path, run_id, juniors, env=None, **extra):
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script(juniors)))
    write_config(tmp_path / "config.yaml", tmp_path / "script.yaml", **extra)
    command = [sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", TASK.instance_id, "--config",
               "config.yaml", "--run-id", run_id]
    environment = {**os.environ, "COLUMNS": "200", **(env or {})}
    return command, environment


def left_behind(run_id):
    return run_containers(run_id)


def wait_for_paid_replies(directory: Path, count: int, deadline: float = 180):
    """Until every junior trajectory holds ``count`` paid replies."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        found = live_steps(directory)
        if len(found) == 2 and all(len(steps) >= count for steps in found.values()):
            return
        time.sleep(0.2)
    pytest.fail("the juniors never got that far")


# Long enough that a run which did not stop at once would still be running 10 s after the signal; each rerun
# waits it out once more.
SLOW_JUNIORS = [[bash("echo one"), bash("sleep 20 && echo two"), SUBMIT],
                [bash("echo uno"), bash("sleep 20 && echo dos"), SUBMIT]]


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_run_at_once_and_the_rerun_pays_nothing_twice(tmp_path, signum, code):
    run_id = f"stop-{signum}"
    command, env = start(tmp_path, run_id, SLOW_JUNIORS)
    layout = RunLayout(tmp_path / "runs" / run_id)
    junior_dir = layout.task(TASK.instance_id).junior
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_for_paid_replies(junior_dir, 2)  # both are inside their 20 s command
        signalled = time.time()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
        took = time.time() - signalled
    finally:
        proc.kill()
    assert proc.returncode == code, out[-2000:] + err[-2000:]
    assert took < 10, f"took {took:.1f} s to stop"
    assert "stopping" in err and f"--run-id {run_id}" in out
    assert left_behind(run_id) == []
    assert not list(junior_dir.glob("rollout-*[0-9].json"))  # cut short: no rollout recorded as a result
    rows = Ledger.read(layout.task(TASK.instance_id).ledger)
    assert rows and all(r.time - r.latency <= signalled for r in rows)  # nothing asked for after the signal
    assert finished_predictions(layout.predictions) == {}

    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    calls = [(r.stage, r.agent) for r in Ledger.read(layout.task(TASK.instance_id).ledger)]
    # Each conversation position paid once across both sessions: 3 replies per junior, 2 senior, 1 principal.
    assert calls.count(("junior", "rollout-00")) == 3 and calls.count(("junior", "rollout-01")) == 3
    assert len(calls) == 3 + 3 + 2 + 1
    assert finished_predictions(layout.predictions)[TASK.instance_id]["source"] == "principal"
    assert left_behind(run_id) == []


def test_a_second_ctrl_c_exits_at_once(tmp_path):
    run_id = "stop-twice"
    command, env = start(tmp_path, run_id, SLOW_JUNIORS)
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_for_paid_replies(RunLayout(tmp_path / "runs" / run_id).task(TASK.instance_id).junior, 2)
        signalled = time.time()
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        took = time.time() - signalled
    finally:
        proc.kill()
    assert proc.returncode == 130 and took < 10
    assert "stopped at once" in err or "stopped:" in out
    subprocess.run([sys.executable, "-m", "pipeline.cli", "cleanup", run_id], capture_output=True)
    assert left_behind(run_id) == []


def test_calls_a_stop_abandons_in_flight_are_charged_their_worst_case(tmp_path):
    """The provider may bill a call whose reply nobody waits for: a stop charges it, as a lost node's calls are."""
    run_id = "stop-in-flight"
    slow_reply = {**bash("echo late"), "delay": 60}
    command, env = start(tmp_path, run_id, [[bash("echo one"), slow_reply, SUBMIT]] * 2)
    layout = RunLayout(tmp_path / "runs" / run_id)
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_for_paid_replies(layout.task(TASK.instance_id).junior, 1)
        time.sleep(1.0)  # both are waiting for their second reply now
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 143, out[-2000:] + err[-2000:]
    assert "abandoned and are charged their worst case" in " ".join(out.split())
    rows = Ledger.read(layout.task(TASK.instance_id).ledger)
    abandoned = [r for r in rows if r.error and "abandoned at a stop" in r.error]
    assert sorted(r.agent for r in abandoned) == ["rollout-00", "rollout-01"]
    assert all(r.cost > 0.0001 for r in abandoned)  # the worst case: the prompt and max_tokens of output
    assert not list(layout.task(TASK.instance_id).junior.glob("rollout-*[0-9].json")) and left_behind(run_id) == []


FIXING_JUNIORS = [[bash(apply_patch_command(TASK.patch)), SUBMIT], [bash("ls"), SUBMIT]]


def test_a_passing_docker_fault_is_retried_within_the_run(tmp_path):
    faults = tmp_path / "faults"
    faults.write_text("1")
    command, env = start(tmp_path, "fault-once", FIXING_JUNIORS, containers={"impl": "faulty_opener:open_faulty"},
                         env={"SWEPIPE_FAULT_FILE": str(faults), "PYTHONPATH": PYTHONPATH})
    done = subprocess.run([*command, "--evaluate"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    layout = RunLayout(tmp_path / "runs" / "fault-once")
    prediction = finished_predictions(layout.predictions)[TASK.instance_id]
    assert prediction["resolved"] is True and "injected fault" in prediction["infra_retries"][0]
    rollouts = [json.loads(p.read_text()) for p in sorted(layout.task(TASK.instance_id).junior.glob("rollout-0?.json"))]
    assert [r["exit_reason"] for r in rollouts] == ["submitted", "submitted"]  # the fault is no rollout's outcome
    calls = [r.agent for r in Ledger.read(layout.task(TASK.instance_id).ledger) if r.stage == "junior"]
    assert calls.count("rollout-00") == 2 and calls.count("rollout-01") == 2  # nothing paid twice


def test_a_lasting_docker_fault_leaves_the_task_for_the_rerun(tmp_path):
    faults = tmp_path / "faults"
    faults.write_text("1000")
    command, env = start(tmp_path, "fault-lasting", FIXING_JUNIORS, containers={"impl": "faulty_opener:open_faulty"},
                         env={"SWEPIPE_FAULT_FILE": str(faults), "PYTHONPATH": PYTHONPATH})
    first = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    layout = RunLayout(tmp_path / "runs" / "fault-lasting")
    assert first.returncode == 1 and "could not run" in first.stdout
    assert finished_predictions(layout.predictions) == {}
    assert "injected fault" in (layout.root / "infra_errors.jsonl").read_text()
    assert not list(layout.task(TASK.instance_id).junior.glob("rollout-0?.json"))  # no result recorded
    faults.write_text("0")  # Docker is back
    second = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert finished_predictions(layout.predictions)[TASK.instance_id]["source"] == "principal"
    calls = [r.agent for r in Ledger.read(layout.task(TASK.instance_id).ledger) if r.stage == "junior"]
    assert calls.count("rollout-00") == 2 and calls.count("rollout-01") == 2
    assert left_behind("fault-lasting") == []
