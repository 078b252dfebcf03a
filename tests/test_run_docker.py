"""`swepipe run` end to end on bundled tasks, scripted models, scored with the hidden tests."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from live_runs import live_steps
from scripted_pipeline import (
    SUBMIT,
    apply_patch_command,
    bash,
    brief_from_patch,
    edits_from_patch,
    patch_per_file,
    reply,
    write_config,
)

from pipeline.models.ledger import Ledger
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.runtime import containers
from pipeline.runtime.images.debian_base import BASE_IMAGE
from pipeline.tasks import load_tasks
from pipeline.text.printable import short_id

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TASKS = {t.repo.split("/")[-1]: t for t in load_tasks("bundled")}
TWO_FILES = TASKS["tinyq"]


def swepipe(*args, cwd, check=True):
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "COLUMNS": "250"}, stdin=subprocess.DEVNULL)
    if check:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def pipeline_script(task, principal_replies):
    halves = list(patch_per_file(task.patch).values())
    return {
        "junior": [[bash(apply_patch_command(halves[0])), SUBMIT],   # each junior fixes one of the two files
                   [bash(apply_patch_command(halves[1])), SUBMIT]],
        "senior": [bash("git grep -n 'def ' -- '*.py' | head -40"), reply(brief_from_patch(task.patch))],
        "principal": principal_replies,
    }


def setup(tmp_path, script, **extra):
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    write_config(tmp_path / "config.yaml", tmp_path / "script.yaml", **extra)


def test_juniors_fix_halves_senior_covers_both_principal_resolves(tmp_path):
    task = TWO_FILES
    setup(tmp_path, pipeline_script(task, [reply(edits_from_patch(task.patch))]))
    done = swepipe("run", "--instance-ids", task.instance_id, "--config", "config.yaml", "--run-id", "e2e",
                   "--evaluate", cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / "e2e")
    prediction = finished_predictions(layout.predictions)[task.instance_id]
    assert prediction["source"] == "principal" and prediction["resolved"] is True, prediction
    assert "resolved 1/1" in done.stdout
    assert "junior done: 2 rollouts, 2 distinct candidate(s)" in done.stdout  # a line per stage, for logs

    paths = layout.task(task.instance_id)
    pool = json.loads((paths.junior / "pool.json").read_text())
    assert [c["votes"] for c in pool["candidates"]] == [1, 1]  # two different half fixes
    brief = json.loads((paths.senior / "brief.json").read_text())
    assert brief["source"] == "senior" and {s["file"] for s in brief["spans"]} == set(patch_per_file(task.patch))
    context = (paths.senior / "context.md").read_text()
    assert all(f"### {path}:" in context for path in patch_per_file(task.patch))
    assert "ledger" not in context and "api_key" not in (layout.config.read_text())

    rows = Ledger.read(paths.ledger)
    by_stage = {stage: [r for r in rows if r.stage == stage] for stage in ("junior", "senior", "principal")}
    assert [len(by_stage[s]) for s in by_stage] == [4, 2, 1]
    assert prediction["cost"]["principal"] == pytest.approx((1000 * 1 + 100 * 2) / 1e6)
    assert prediction["cost"]["total"] == pytest.approx(7 * 1200 / 1e6)
    assert (paths.eval / "result.json").exists() and (paths.principal / "patch.diff").read_text() == \
        prediction["model_patch"]


def test_unusable_principal_retries_once_then_falls_back(tmp_path):
    task = TWO_FILES
    setup(tmp_path, pipeline_script(task, [reply("The fix is to defer jobs. (no edit blocks)"),
                                           reply("src/nothing.py\n```\n<<<<<<< SEARCH\nnot in any file\n"
                                                 "=======\nx\n>>>>>>> REPLACE\n```")]))
    swepipe("run", "--instance-ids", task.instance_id, "--config", "config.yaml", "--run-id", "fb", "--evaluate",
            cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / "fb")
    prediction = finished_predictions(layout.predictions)[task.instance_id]
    assert prediction["source"] == "fallback:junior_top"
    assert prediction["model_patch"] and prediction["resolved"] is False  # half a fix does not pass
    result = json.loads((layout.task(task.instance_id).principal / "result.json").read_text())
    assert result["calls"] == 2 and len(result["failed_attempts"]) == 2
    assert "edit block" in result["failed_attempts"][0].lower()
    principal_rows = [r for r in Ledger.read(layout.task(task.instance_id).ledger) if r.stage == "principal"]
    assert len(principal_rows) == 2 and prediction["cost"]["principal"] == pytest.approx(2 * 1200 / 1e6)


def test_swapping_the_principal_reuses_paid_juniors(tmp_path):
    task = TWO_FILES
    setup(tmp_path, pipeline_script(task, [reply("no edits at all")]))
    swepipe("run", "--instance-ids", task.instance_id, "--config", "config.yaml", "--run-id", "first", cwd=tmp_path)
    better = pipeline_script(task, [reply(edits_from_patch(task.patch))])
    (tmp_path / "better.yaml").write_text(yaml.safe_dump(better))
    swepipe("run", "--instance-ids", task.instance_id, "--config", "config.yaml", "--run-id", "second",
            "--principal-model", f"scripted/{tmp_path / 'better.yaml'}", "--reuse-juniors-from", "first",
            "--evaluate", cwd=tmp_path)
    second = RunLayout(tmp_path / "runs" / "second")
    prediction = finished_predictions(second.predictions)[task.instance_id]
    rows = Ledger.read(second.task(task.instance_id).ledger)
    assert [r for r in rows if r.stage == "junior"] == []  # no junior call in the second run
    assert prediction["juniors_reused_from"] == "first" and prediction["resolved"] is True
    assert prediction["cost"]["junior"] == pytest.approx(4 * 1200 / 1e6)  # what those rollouts cost, once


def test_killed_run_resumes_without_losing_or_repaying(tmp_path):
    first, second = TASKS["cursorly"], TASKS["tinyq"]  # the order the run takes them in
    # One script serves both tasks; it is written for the second (on the first, its edits cannot apply).
    script = pipeline_script(second, [reply(edits_from_patch(second.patch))] * 2)
    half = list(patch_per_file(second.patch).values())[0]
    script["junior"] = [[bash(apply_patch_command(half)), bash("sleep 4 && echo checked"), SUBMIT],
                        [bash("sleep 4 && echo looked"), bash("sleep 4 && echo looked again"), SUBMIT]]
    setup(tmp_path, script)
    ids = f"{first.instance_id},{second.instance_id}"
    command = [sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", ids, "--config", "config.yaml",
               "--run-id", "killed"]
    layout = RunLayout(tmp_path / "runs" / "killed")
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        # Kill it once the first task is finished and the second one's juniors have paid for replies.
        while time.monotonic() < deadline:
            if (finished_predictions(layout.predictions)
                    and any(live_steps(layout.task(second.instance_id).junior).values())):
                break
            time.sleep(0.3)
        else:
            pytest.fail("the run never reached the point where it was to be killed")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert list(finished_predictions(layout.predictions)) == [first.instance_id]
    subprocess.run([sys.executable, "-m", "pipeline.cli", "cleanup", "killed"], capture_output=True)
    first_rows = len(Ledger.read(layout.task(first.instance_id).ledger))
    paid_before = len(Ledger.read(layout.task(second.instance_id).ledger))
    assert paid_before > 0

    done = swepipe("run", "--instance-ids", ids, "--config", "config.yaml", "--run-id", "killed", cwd=tmp_path)
    assert "1 task(s) had finished" in done.stdout
    assert len(Ledger.read(layout.task(first.instance_id).ledger)) == first_rows  # not run again
    rows = Ledger.read(layout.task(second.instance_id).ledger)
    calls = [(r.stage, r.agent) for r in rows]
    # Each conversation position is paid once: juniors 3 replies each, senior 2, principal 1.
    assert calls.count(("junior", "rollout-00")) == 3 and calls.count(("junior", "rollout-01")) == 3
    assert len(rows) == 3 + 3 + 2 + 1 and all(r.error is None for r in rows)
    assert set(finished_predictions(layout.predictions)) == {first.instance_id, second.instance_id}
    assert containers.client().containers.list(all=True, filters={"label": f"{containers.RUN_LABEL}=killed"}) == []


def test_solo_baseline_writes_the_same_run_directory(tmp_path):
    task = TWO_FILES
    script = {"solo": [[bash(apply_patch_command(task.patch)), bash("git diff --stat"), SUBMIT]]}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"models": {"solo": {
        "model": f"scripted/{tmp_path / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}}}}))
    swepipe("run", "--strategy", "solo", "--instance-ids", task.instance_id, "--config", "config.yaml",
            "--run-id", "solo", "--evaluate", cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / "solo")
    prediction = finished_predictions(layout.predictions)[task.instance_id]
    assert prediction["strategy"] == "solo" and prediction["resolved"] is True
    assert prediction["cost"]["solo"] == pytest.approx(3 * 1200 / 1e6) == prediction["cost"]["total"]
    assert (layout.task(task.instance_id).root / "solo" / "trajectory.json").exists()


def test_missing_image_spends_nothing_and_leaves_the_task_unfinished(tmp_path):
    task = TWO_FILES
    setup(tmp_path, pipeline_script(task, ["unused"]))
    done = swepipe("run", "--instance-ids", task.instance_id, "--config", "config.yaml", "--run-id", "noimage",
                   "--image-template", "swepipe-no-such-image:{dockerhub_tag}", "--skip-image-check", cwd=tmp_path,
                   check=False)  # past the preflight (test_image_cache_docker), the task finds its image missing
    assert done.returncode == 1 and "could not run" in done.stdout
    layout = RunLayout(tmp_path / "runs" / "noimage")
    assert finished_predictions(layout.predictions) == {}  # a rerun will try it again
    assert Ledger.read(layout.task(task.instance_id).ledger) == []  # no model was paid
    assert "not available locally" in (layout.root / "infra_errors.jsonl").read_text()


def test_an_image_that_cannot_be_sanitised_spends_nothing_and_leaves_the_task_unfinished(tmp_path):
    """The image exists, but its repository cannot be sanitised (the base image has no repository at /app): the
    task fails before any model is paid, where each junior's first call used to be paid while its container was
    still being prepared in the background."""
    task = TWO_FILES
    setup(tmp_path, pipeline_script(task, ["unused"]))
    done = swepipe("run", "--instance-ids", task.instance_id, "--config", "config.yaml", "--run-id", "nosanitise",
                   "--image-template", BASE_IMAGE, cwd=tmp_path, check=False)
    assert done.returncode == 1 and "could not run" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    layout = RunLayout(tmp_path / "runs" / "nosanitise")
    assert finished_predictions(layout.predictions) == {}  # a rerun will try it again
    assert Ledger.read(layout.task(task.instance_id).ledger) == []  # no model was paid
    assert "cannot sanitise the repository at /app" in (layout.root / "infra_errors.jsonl").read_text()


EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "plugins"


def test_a_principal_plugin_named_in_the_config_resolves_a_task(tmp_path):
    task = TWO_FILES
    script = pipeline_script(task, [])  # the plug-in principal calls no model
    setup(tmp_path, script, principal={"impl": "merge_principal:MergePrincipal"})
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    del config["models"]["principal"]  # the plug-in needs none; no local model is started for it either
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", task.instance_id,
                           "--config", "config.yaml", "--run-id", "plugin", "--evaluate"],
                          capture_output=True, text=True, cwd=tmp_path, stdin=subprocess.DEVNULL,
                          env={**os.environ, "COLUMNS": "250", "PYTHONPATH": str(EXAMPLES)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    layout = RunLayout(tmp_path / "runs" / "plugin")
    prediction = finished_predictions(layout.predictions)[task.instance_id]
    # Each junior fixed one of the two files; merged, they are the whole fix.
    assert prediction["source"] == "merge" and prediction["resolved"] is True, prediction
    result = json.loads((layout.task(task.instance_id).principal / "result.json").read_text())
    assert result["merged"] == [1, 2]
    assert yaml.safe_load(layout.config.read_text())["principal"]["impl"] == "merge_principal:MergePrincipal"


def test_a_plugin_that_cannot_be_imported_is_named_before_anything_runs(tmp_path):
    setup(tmp_path, pipeline_script(TWO_FILES, []), principal={"impl": "no_such_module:Principal"})
    done = swepipe("run", "--instance-ids", TWO_FILES.instance_id, "--config", "config.yaml", cwd=tmp_path,
                   check=False)
    assert done.returncode == 2 and "principal.impl 'no_such_module:Principal'" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_vote_submits_the_most_voted_candidate(tmp_path):
    task = TWO_FILES
    script = {"junior": [[bash(apply_patch_command(task.patch)), SUBMIT],
                         [bash("ls"), SUBMIT],
                         [bash(apply_patch_command(task.patch)), SUBMIT]]}
    setup(tmp_path, script, juniors={"k": 3})
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--strategy", "vote", "--instance-ids",
                           task.instance_id, "--config", "config.yaml", "--run-id", "vote", "--evaluate"],
                          capture_output=True, text=True, cwd=tmp_path, stdin=subprocess.DEVNULL,
                          env={k: v for k, v in os.environ.items() if k != "COLUMNS"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # Not a terminal (a log): a plain line for the finished task, and a table that fits 80 columns.
    shown = short_id(task.instance_id)  # the task's id as every line and table shows it
    assert f"task {shown}: source vote | junior $0.0072 | resolved" in done.stdout
    lines = done.stdout.splitlines()
    table = lines[lines.index("run vote"):]  # the run's table, from its title: a grid or a block per task
    assert any(shown in line for line in table) and max(map(len, table)) <= 80
    prediction = finished_predictions(RunLayout(tmp_path / "runs" / "vote").predictions)[task.instance_id]
    assert prediction["strategy"] == "vote" and prediction["source"] == "vote" and prediction["votes"] == 2
    assert prediction["resolved"] is True and set(prediction["models"]) == {"junior"}
    assert prediction["cost"] == pytest.approx({"junior": 6 * 1200 / 1e6, "total": 6 * 1200 / 1e6})
