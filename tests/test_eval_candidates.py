"""`swepipe eval --candidates RUN`: every distinct junior candidate of a run scored with the hidden tests."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from leftovers import run_containers
from scripted_pipeline import patch_per_file

from pipeline.evaluation.candidates import MalformedPool, plan_candidates, read_pool
from pipeline.juniors.pool import build_pool
from pipeline.records import Rollout
from pipeline.rundir.layout import RunLayout
from pipeline.runtime import containers
from pipeline.tasks import load_tasks

TASKS = {t.repo.split("/")[-1]: t for t in load_tasks("bundled")}
TINYQ, CURSORLY, FLAGPOLE = TASKS["tinyq"], TASKS["cursorly"], TASKS["flagpole"]


def swepipe(*args, cwd):
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "COLUMNS": "250"}, stdin=subprocess.DEVNULL, timeout=900)


def make_run(root, run_id="cands"):
    """A run directory as `swepipe run` leaves it after the junior stage: config.yaml, and per task
    junior/pool.json built by the pool's own code from rollout records. tinyq: the gold patch (two rollouts) and
    half of it (its first file only, one rollout); cursorly: started, no pool yet; flagpole: a pool.json cut short
    by a crash; plus a task folder the dataset does not know."""
    run = root / "runs" / run_id
    layout = RunLayout(run)
    run.mkdir(parents=True)
    layout.config.write_text("strategy: pipeline\ncontainers:\n  image_template: null\n  platform: null\n")
    half = next(iter(patch_per_file(TINYQ.patch).values()))
    rollouts = [Rollout(index=0, patch=TINYQ.patch, exit_reason="submitted"),
                Rollout(index=1, patch=half, exit_reason="submitted"),
                Rollout(index=2, patch=TINYQ.patch, exit_reason="step_limit")]
    pool = build_pool(TINYQ.instance_id, rollouts).to_dict()
    assert [c["votes"] for c in pool["candidates"]] == [2, 1]
    junior = layout.task(TINYQ.instance_id).junior
    junior.mkdir(parents=True)
    (junior / "pool.json").write_text(json.dumps(pool, indent=2))
    (layout.task(CURSORLY.instance_id).junior).mkdir(parents=True)  # juniors still running: no pool.json
    broken = layout.task(FLAGPOLE.instance_id).junior
    broken.mkdir(parents=True)
    (broken / "pool.json").write_text(json.dumps(pool)[:50])
    (run / "tasks" / "instance_not-in-the-dataset").mkdir()
    gold_key, half_key = (c["key"] for c in pool["candidates"])
    return run, gold_key, half_key


def test_read_pool_refuses_what_it_cannot_score(tmp_path):
    path = tmp_path / "pool.json"
    good = {"key": "ab12", "patch": "diff --git a/x b/x\n", "test_patch": "", "votes": 1, "rollouts": [0]}
    cases = {"{": "is not JSON", "[]": "no \"candidates\" list", '{"candidates": {}}': "no \"candidates\" list",
             json.dumps({"candidates": [good, good]}): "appears twice",
             json.dumps({"candidates": [{**good, "key": "../../etc"}]}): "no usable \"key\"",
             json.dumps({"candidates": [{**good, "key": ".."}]}): "no usable \"key\"",
             json.dumps({"candidates": [{**good, "patch": None}]}): "no \"patch\"",
             json.dumps({"candidates": ["x"]}): "is not an object"}
    for text, message in cases.items():
        path.write_text(text)
        with pytest.raises(MalformedPool, match=message):
            read_pool(path)
    path.write_text(json.dumps({"candidates": [good]}))
    assert [candidate.to_dict() for candidate in read_pool(path)] == [good]


def test_plan_names_tasks_without_a_pool_and_keeps_verdicts_but_not_infra_errors(tmp_path):
    run, gold_key, half_key = make_run(tmp_path)
    plan = plan_candidates(run, list(TASKS.values()))
    assert [job.key for job in plan.todo] == [gold_key, half_key]
    assert plan.summary.no_pool == [CURSORLY.instance_id]
    assert plan.summary.unknown == ["instance_not-in-the-dataset"]
    assert "is not JSON" in plan.summary.failed[FLAGPOLE.instance_id]
    paths = RunLayout(run).task(TINYQ.instance_id)
    paths.candidate_result(gold_key).parent.mkdir(parents=True)
    paths.candidate_result(gold_key).write_text(json.dumps({"resolved": True, "category": "resolved"}))
    paths.candidate_result(half_key).parent.mkdir(parents=True)
    paths.candidate_result(half_key).write_text(json.dumps({"resolved": False, "category": "infra_error"}))
    plan = plan_candidates(run, list(TASKS.values()))
    assert [job.key for job in plan.todo] == [half_key]  # an infra_error is no verdict: scored again
    assert plan.summary.tasks[TINYQ.instance_id].skipped == [gold_key]
    assert [job.key for job in plan_candidates(run, list(TASKS.values()), redo=True).todo] == [gold_key, half_key]


def test_cli_needs_exactly_one_of_predictions_and_candidates_and_a_cluster_for_ray(tmp_path, monkeypatch):
    run, _, _ = make_run(tmp_path)
    # --ray-address auto finds a cluster as Ray does: RAY_ADDRESS, else <Ray's temporary directory>/ray/
    # ray_current_cluster. Both are the test's own, so what this machine ran before cannot change the verdict.
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "raytmp"))
    neither = swepipe("eval", cwd=tmp_path)
    both = swepipe("eval", "--candidates", "cands", "--predictions", "p.jsonl", cwd=tmp_path)
    ray = swepipe("eval", "--candidates", "cands", "--executor", "ray", cwd=tmp_path)
    unknown = swepipe("eval", "--candidates", "no-such-run", cwd=tmp_path)
    for done in (neither, both, ray, unknown):
        assert done.returncode == 2, done.stdout + done.stderr
    assert "--predictions FILE" in neither.stderr and "give either RUN" in neither.stderr
    assert "not both" in both.stderr
    assert "no Ray cluster found" in " ".join(ray.stderr.split())  # said before anything is scored
    assert "unknown run 'no-such-run'" in unknown.stderr
    assert not (run / "tasks" / TINYQ.instance_id / "candidates").exists()


def test_a_dead_cluster_left_named_by_ray_start_is_said_to_be_gone(tmp_path, monkeypatch):
    """`ray start` writes the head's address to ray_current_cluster and only `ray stop` removes it: a head that
    was killed leaves it naming an address no cluster answers at any more."""
    make_run(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "raytmp"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"  # nothing listens there once closed
    left = tmp_path / "raytmp" / "ray" / "ray_current_cluster"
    left.parent.mkdir(parents=True)
    left.write_text(dead)
    done = swepipe("eval", "--candidates", "cands", "--executor", "ray", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert f"no Ray cluster answers at {dead}" in said and f"the address in {left}" in said
    assert "stopped without `ray stop`" in said and "ray start --head" in said


@pytest.mark.docker
@pytest.mark.slow
def test_candidates_are_scored_resumably_and_a_bad_pool_does_not_stop_the_run(tmp_path):
    run, gold_key, half_key = make_run(tmp_path)
    paths = RunLayout(run).task(TINYQ.instance_id)
    first = swepipe("eval", "cands", "--candidates", "--workers", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    gold = json.loads(paths.candidate_result(gold_key).read_text())
    half = json.loads(paths.candidate_result(half_key).read_text())
    assert (gold["resolved"], gold["category"], gold["key"], gold["votes"], gold["rollouts"]) == \
        (True, "resolved", gold_key, 2, [0, 2])
    assert (half["resolved"], half["category"], half["key"], half["votes"], half["rollouts"]) == \
        (False, "tests_failed", half_key, 1, [1])
    assert half["instance_id"] == TINYQ.instance_id and half["patch_applied"] is True
    assert "tests/test_worker.py::test_retry_later_does_not_use_up_attempts" in half["FAIL_TO_PASS"]["failed"]
    assert "tests/test_queue.py::test_defer_requires_a_reserved_job" in half["FAIL_TO_PASS"]["passed"]
    assert (paths.candidates / half_key / "patch.diff").read_text() == next(iter(patch_per_file(TINYQ.patch).values()))
    assert f"{TINYQ.instance_id}: 1 of 2 candidates resolve: {gold_key}" in first.stdout
    assert "2 scored now, 0 already had a verdict" in first.stdout
    assert f"no junior/pool.json yet (skipped): {CURSORLY.instance_id}" in first.stdout
    assert f"{FLAGPOLE.instance_id}: FAILED, pool not scored:" in first.stdout and "is not JSON" in first.stdout
    assert "not in the dataset (skipped" in first.stdout and "instance_not-in-the-dataset" in first.stdout
    summary = json.loads((paths.candidates / "summary.json").read_text())
    assert (summary["total"], summary["resolved"]) == (2, 1)
    failed = json.loads((RunLayout(run).task(FLAGPOLE.instance_id).candidates / "summary.json").read_text())
    assert "is not JSON" in failed["error"] and failed["candidates"] == []
    assert not RunLayout(run).task(CURSORLY.instance_id).candidates.exists()

    stamps = {key: paths.candidate_result(key).stat().st_mtime_ns for key in (gold_key, half_key)}
    again = swepipe("eval", str(run), "--candidates", cwd=tmp_path)  # the run by its path this time
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "0 scored now, 2 already had a verdict" in again.stdout
    assert {key: paths.candidate_result(key).stat().st_mtime_ns for key in stamps} == stamps

    # the form of before RUN was an argument: --candidates now a flag, "cands" still the run
    redo = swepipe("eval", "--candidates", "cands", "--redo", "--skip-image-check", cwd=tmp_path)
    assert redo.returncode == 0, redo.stdout[-3000:] + redo.stderr[-3000:]
    assert "2 scored now, 0 already had a verdict" in redo.stdout
    assert all(paths.candidate_result(key).stat().st_mtime_ns > stamps[key] for key in stamps)
    assert json.loads(paths.candidate_result(gold_key).read_text())["resolved"] is True
    left = run_containers("cands-candidates")
    assert left == []


@pytest.mark.docker
@pytest.mark.slow
def test_a_scoring_that_could_not_run_is_recorded_then_retried(tmp_path):
    run, gold_key, half_key = make_run(tmp_path)
    paths = RunLayout(run).task(TINYQ.instance_id)
    broken = swepipe("eval", "--candidates", "cands", "--image-template", "swepipe-no-such-image:{dockerhub_tag}",
                     "--skip-image-check", cwd=tmp_path)
    assert broken.returncode == 0, broken.stdout[-3000:] + broken.stderr[-3000:]
    result = json.loads(paths.candidate_result(gold_key).read_text())
    assert (result["category"], result["resolved"], result["key"]) == ("infra_error", False, gold_key)
    assert "not available locally" in result["error"]
    assert "2 could not be scored (infra_error; rerun to retry)" in broken.stdout
    assert "0 of 2 candidates resolve (2 infra_error)" in broken.stdout
    again = swepipe("eval", "--candidates", "cands", cwd=tmp_path)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "2 scored now, 0 already had a verdict" in again.stdout
    assert json.loads(paths.candidate_result(gold_key).read_text())["category"] == "resolved"


@pytest.mark.docker
@pytest.mark.slow
def test_ctrl_c_keeps_what_was_scored_and_leaves_no_container(tmp_path):
    run, gold_key, half_key = make_run(tmp_path, "stopped-cands")
    paths = RunLayout(run).task(TINYQ.instance_id)
    command = [sys.executable, "-m", "pipeline.cli", "eval", "--candidates", "stopped-cands", "--workers", "1"]
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "250"})
    try:
        deadline = time.monotonic() + 300
        while not list(paths.candidates.glob("*/result.json")) and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, output
    assert "stopped: the candidates scored so far are saved" in output
    label = f"{containers.RUN_LABEL}=stopped-cands-candidates"
    left = containers.client().containers.list(all=True, filters={"label": label})
    assert left == [], [(c.name, c.status, c.attrs.get("Created"), c.labels) for c in left]
    finished = {p.parent.name: p.stat().st_mtime_ns for p in paths.candidates.glob("*/result.json")}
    assert finished and set(finished) <= {gold_key, half_key}
    rerun = swepipe("eval", "--candidates", "stopped-cands", cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert f"{2 - len(finished)} scored now, {len(finished)} already had a verdict" in rerun.stdout
    assert {key: paths.candidate_result(key).stat().st_mtime_ns for key in finished} == finished
    assert f"1 of 2 candidates resolve: {gold_key}" in rerun.stdout
