"""Scoring when Docker fails, without Docker: what counts as the engine not answering, what a rerun scores again,
and `swepipe eval` against an engine that is not there at all (it waits, then stops; exit 1)."""

import json
import os
import subprocess
import sys

import requests
from docker.errors import APIError, DockerException

from pipeline.errors import RuntimeUnavailable
from pipeline.evaluation.batch import plan_eval
from pipeline.evaluation.engine import engine_down
from pipeline.interop.predictions import PatchToScore
from pipeline.rundir.layout import ScoringFiles
from pipeline.tasks import load_tasks
from pipeline.text import patchtext

TASKS = load_tasks("bundled")


def raised(error, cause):
    try:
        try:
            raise cause
        except BaseException as inner:
            raise error from inner
    except BaseException as outer:
        return outer


def test_the_engine_not_answering_is_told_from_the_engine_answering_with_an_error():
    reset = requests.exceptions.ConnectionError(("Connection aborted.", ConnectionResetError(104, "reset")))
    assert engine_down(reset)
    assert engine_down(requests.exceptions.ReadTimeout("read timeout=120"))
    assert engine_down(raised(DockerException("Error while fetching server API version"), reset))
    assert engine_down(raised(RuntimeUnavailable("no Docker engine answers"),
                              raised(DockerException("Error while fetching server API version"), reset)))
    assert not engine_down(APIError("404 Client Error: No such image"))
    assert not engine_down(raised(RuntimeUnavailable("image x is not available locally"), APIError("404")))
    assert not engine_down(ValueError("something else"))


def test_a_rerun_scores_infra_errors_and_unreadable_results_again_and_keeps_verdicts(tmp_path):
    verdict, infra, torn, new = TASKS[:4]
    results = {
        verdict.instance_id: json.dumps({"instance_id": verdict.instance_id, "resolved": False,
                                         "category": "tests_failed", "patch_sha256": patchtext.digest("")}),
        infra.instance_id: json.dumps({"instance_id": infra.instance_id, "resolved": False, "category": "infra_error",
                                       "error": "ConnectionError: ('Connection aborted.')"}),
        torn.instance_id: '{"instance_id": "cut sh'}
    for instance_id, text in results.items():
        (tmp_path / instance_id).mkdir()
        (tmp_path / instance_id / "result.json").write_text(text)
    predictions = [PatchToScore(t.instance_id, "") for t in (verdict, infra, torn, new)]
    summary, todo = plan_eval(predictions, TASKS, tmp_path, redo=False)
    assert [p.instance_id for p in todo] == [infra.instance_id, torn.instance_id, new.instance_id]
    assert summary.skipped == [verdict.instance_id]
    assert summary.results[infra.instance_id].category == "infra_error"  # kept until it is scored again
    _, everything = plan_eval(predictions, TASKS, tmp_path, redo=True)
    assert len(everything) == 4


def test_a_verdict_is_kept_only_for_the_patch_it_was_given(tmp_path):
    """An edited predictions file, or another file of the same name scored into the same folder, is scored
    again: a verdict on one patch is never reported for another."""
    same, edited, legacy_same, legacy_edited, legacy_bare = (t.instance_id for t in TASKS[:5])
    old, new = "diff --git a/x b/x\n-old\n+\udce9\n", "diff --git a/x b/x\n-old\n+new\n"
    recorded = {same: old, edited: old}
    for instance_id in (same, edited, legacy_same, legacy_edited, legacy_bare):
        files = ScoringFiles(tmp_path / instance_id)
        files.root.mkdir()
        result = {"instance_id": instance_id, "resolved": True, "category": "resolved"}
        if instance_id in recorded:
            result["patch_sha256"] = patchtext.digest(recorded[instance_id])
        elif instance_id != legacy_bare:  # a result from before the hash was recorded: the patch saved beside it
            patchtext.write(files.patch, old)
        files.result.write_text(json.dumps(result))
    given = {same: old, edited: new, legacy_same: old, legacy_edited: new, legacy_bare: old}
    summary, todo = plan_eval([PatchToScore(i, p) for i, p in given.items()], TASKS, tmp_path, redo=False)
    rescored = [edited, legacy_edited, legacy_bare]
    assert [p.instance_id for p in todo] == rescored
    assert summary.skipped == [same, legacy_same]
    assert summary.changed == rescored and summary.as_dict()["rescored_changed_patch"] == rescored
    assert set(summary.results) == {same, legacy_same}  # no stale verdict counted


def test_swepipe_eval_with_no_engine_waits_then_stops_exit_1_naming_the_command_again(tmp_path):
    task = TASKS[0]
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text(json.dumps({"instance_id": task.instance_id, "model_patch": task.patch}) + "\n")
    args = ["eval", "--predictions", str(predictions), "--output", str(tmp_path / "out"), "--skip-image-check",
            "--outage-seconds", "3"]
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock", "COLUMNS": "250"})
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "docker has been failing for" in output and "no Docker engine answers" in output
    assert f"run the same command again (`swepipe {' '.join(args)}`) to score the rest" in output
    assert not (tmp_path / "out" / task.instance_id / "result.json").exists()  # no infra_error written for it
