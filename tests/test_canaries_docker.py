"""Verdicts no patch can forge from inside the test process (issue 42), scored in real containers: each forgery of
tests/forging.py (pytest's reports rewritten by the package under test, PASSED lines printed before any test runs,
a conftest.py that passes everything; node --test's reports rewritten by a module the tests load; a Go TestMain
that rewrites the results) makes the official protocol resolve a task whose fix is not there. None counts as
resolved: the planted tests (canaries) and the runner's own summary say why, in `swepipe eval`, `swepipe run
--evaluate` and the report."""

import html
import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from forging import forged_patches
from leftovers import run_containers
from scripted_pipeline import SUBMIT, apply_patch_command, bash

from pipeline.evaluation.runner import EvalSettings, evaluate
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.tasks import load_tasks
from pipeline.tasks.datasets import BUNDLED, defaults_for

pytestmark = pytest.mark.docker
TASKS = {t.repo.split("/")[-1]: t for t in load_tasks(BUNDLED)}
FORGED = forged_patches(TASKS)
# the findings each forgery must get, beside canary
ALSO = {"PASSED before any test": {"summary_missing"}}


def settings(run_id):
    defaults = defaults_for(BUNDLED)
    return EvalSettings(image_template=defaults.image_template, run_scripts=defaults.run_scripts, run_id=run_id)


@pytest.mark.parametrize("forgery", sorted(FORGED))
def test_a_forged_verdict_resolves_by_the_official_protocol_but_does_not_count(tmp_path, run_id, forgery):
    task, patch = FORGED[forgery]
    result = evaluate(task, patch, tmp_path / "eval", settings(run_id)).to_dict()
    assert result["patch_applied"] is True and result["official_resolved"] is True, result
    assert result["resolved"] is False and result["category"] == "flagged"
    assert {finding["kind"] for finding in result["integrity"]} == {"canary", *ALSO.get(forgery, ())}
    planted = result["canaries"]
    assert planted["planted"] is True and planted["target"]
    must_fail = next(test for test in planted["tests"] if test["must"] == "fail")
    assert "PASSED" in must_fail["reported"]
    assert f"the planted test that must fail, {must_fail['name']}" in " ".join(
        finding["detail"] for finding in result["integrity"])
    assert not any(must_fail["name"] in name for name in result["statuses"])  # out of the recorded statuses
    assert run_containers(run_id) == []


def test_the_gold_patch_of_each_runner_vouched_for_by_its_canaries(tmp_path, run_id):
    for name in ("tinyq", "flagpole", "cronlite"):
        task = TASKS[name]
        result = evaluate(task, task.patch, tmp_path / name, settings(run_id)).to_dict()
        assert result["resolved"] is True and result["integrity"] == [], result
        statuses = {test["must"]: test["reported"] for test in result["canaries"]["tests"]}
        assert statuses == {"pass": ["PASSED"], "fail": ["FAILED"]}, (name, result["canaries"])
    assert run_containers(run_id) == []


def swepipe(*args, cwd):
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "COLUMNS": "400"}, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return " ".join(done.stdout.split())


@pytest.mark.slow
def test_forged_verdicts_of_every_runner_are_not_resolved_by_eval_nor_run_evaluate_nor_in_the_report(tmp_path):
    chosen = [FORGED["pytest reports rewritten"], FORGED["node reports rewritten"],
              FORGED["go TestMain rewriting results"]]
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text("".join(json.dumps({"instance_id": task.instance_id, "model_patch": patch}) + "\n"
                                   for task, patch in chosen))
    shown = swepipe("eval", "--predictions", str(predictions), "--output", "out", cwd=tmp_path)
    assert json.loads((tmp_path / "out" / "eval_results.json").read_text()) == dict.fromkeys(
        (task.instance_id for task, _ in chosen), False)
    for task, _ in chosen:
        assert f"integrity findings in {task.instance_id} (not resolved): canary" in shown
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["flagged"] == 3
    assert "canaries planted in 3 of 3 scored" in shown

    # `swepipe run --evaluate`: a solo agent applies the task's forgery and submits
    marks = {"tinyq": "tinyq/__init__.py", "flagpole": "src/hash.js", "cronlite": "cron/parser.go"}
    chooser = "".join(f"if [ -f {marks[task.repo.split('/')[-1]]} ]; then\n{apply_patch_command(patch)}\nfi\n"
                      for task, patch in chosen)
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"solo": [[bash(chooser), SUBMIT]]}))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"models": {"solo": {
        "model": f"scripted/{tmp_path / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}}}}))
    swepipe("run", "--strategy", "solo", "--instance-ids", ",".join(task.instance_id for task, _ in chosen),
            "--config", "config.yaml", "--run-id", "forged", "--evaluate", cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / "forged")
    finished = finished_predictions(layout.predictions)
    for task, patch in chosen:
        assert patch.splitlines()[-1] in finished[task.instance_id]["model_patch"]  # the agent's diff has it
        assert finished[task.instance_id]["resolved"] is False, finished[task.instance_id]
        result = json.loads((layout.task(task.instance_id).eval / "result.json").read_text())
        assert result["official_resolved"] is True and [f["kind"] for f in result["integrity"]] == ["canary"]
    swepipe("report", str(layout.root), cwd=tmp_path)
    report = (layout.root / "report.md").read_text().replace("\\", "")  # as shown, Markdown's escapes read
    assert "verdicts flagged by integrity checks (not resolved) | 3 (canary 3)" in report
    assert "| resolved (95% CI) | 0/3 = 0.0%" in report
    page = html.unescape(next(tmp_path.rglob(f"{TASKS['cronlite'].instance_id}.html")).read_text())
    assert "integrity findings" in page and "canary: the planted test that must fail" in page
    assert re.search(r"planted beside TestJoinValues: Test\w+ \(must pass\): PASSED; Test\w+ \(must fail\): "
                     r"PASSED", page)
