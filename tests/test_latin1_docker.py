"""A fix to a Latin-1 source file, end to end: its bytes survive the rollout's diff, the candidate record, the pool,
the principal's fallback, predictions.jsonl and scoring, so the patch applies and resolves the task."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import git
from leftovers import run_containers
from scripted_pipeline import SUBMIT, bash, reply, write_config

from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.runtime import containers
from pipeline.runtime.docker import DockerRuntime
from pipeline.runtime.images.debian_base import BASE_IMAGE
from pipeline.runtime.images.prepare import prepare_image
from pipeline.text import patchtext

pytestmark = pytest.mark.docker
LATIN1_IMAGE = "swepipe-test-latin1:latest"
INSTANCE = "instance_demo__latin1-1"
BASE_SOURCE = b'# -*- coding: latin-1 -*-\nMESSAGE = "Ol\xe9"\n\n\ndef greet(name):\n    return MESSAGE + " " + name\n'
# The fix edits the very line holding the Latin-1 byte: a patch with U+FFFD in place of it would not apply.
FIXED_SOURCE = BASE_SOURCE.replace(b'"Ol\xe9"', b'"Ol\xe9!"')
RUN_SCRIPT = """#!/bin/bash
cd /app
if python3 -c 'import greet, sys; sys.exit(greet.greet("Ana") != "Ol\\u00e9! Ana")'; then
  echo "PASSED test_greet"
else
  echo "FAILED test_greet"
fi
"""
PARSER = """import json, sys
tests = []
for line in open(sys.argv[1], errors="replace"):
    status, _, name = line.strip().partition(" ")
    if status in ("PASSED", "FAILED"):
        tests.append({"name": name, "status": status})
json.dump({"tests": tests}, open(sys.argv[3], "w"))
"""
# What the agent runs: a byte-exact edit of the Latin-1 line.
FIX_COMMAND = ("python3 - <<'EOF'\nimport pathlib\np = pathlib.Path('greet.py')\n"
               "p.write_bytes(p.read_bytes().replace(b'\"Ol\\xe9\"', b'\"Ol\\xe9!\"'))\nEOF\ngit diff --stat")


@pytest.fixture(scope="session")
def latin1_task(tmp_path_factory):
    root = tmp_path_factory.mktemp("latin1")
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "greet.py").write_bytes(BASE_SOURCE)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "greet.py").write_bytes(FIXED_SOURCE)
    gold = subprocess.run(["git", "-C", str(repo), "diff"], capture_output=True, check=True).stdout
    git(repo, "checkout", "-q", "--", "greet.py")

    context = root / "context"
    shutil.copytree(repo, context / "repo", symlinks=True)
    (context / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nCOPY repo /app\nWORKDIR /app\n")
    containers.client().images.build(path=str(context), tag=LATIN1_IMAGE, rm=True)

    scripts = root / "run_scripts" / INSTANCE
    scripts.mkdir(parents=True)
    (scripts / "run_script.sh").write_text(RUN_SCRIPT)
    (scripts / "parser.py").write_text(PARSER)
    row = {"instance_id": INSTANCE, "repo": "demo/latin1", "base_commit": base, "repo_language": "python",
           "problem_statement": "greet() must say the greeting with an exclamation mark: 'Olé! Ana'.",
           "patch": gold.decode("utf-8", "surrogateescape"), "test_patch": "", "fail_to_pass": ["test_greet"],
           "pass_to_pass": [], "selected_test_files_to_run": [], "before_repo_set_cmd": "", "dockerhub_tag": "latin1"}
    dataset = root / "dataset.jsonl"
    dataset.write_text(json.dumps(row) + "\n")
    return {"repo": repo, "base": base, "gold": gold, "dataset": dataset, "run_scripts": root / "run_scripts"}


def swepipe(*args, cwd):
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "COLUMNS": "250"}, stdin=subprocess.DEVNULL)


@pytest.mark.slow
def test_a_latin1_fix_survives_from_the_rollout_to_scoring(latin1_task, tmp_path, run_id):
    script = {"junior": [[bash(FIX_COMMAND), SUBMIT]],
              "senior": [reply('```json\n{"analysis": "MESSAGE lacks the !", "spans": '
                               '[{"file": "greet.py", "start": 1, "end": 6}]}\n```\n```bash\nsubmit\n```')],
              "principal": [reply("No edit blocks here."), reply("Still none.")]}  # the fallback takes the junior's
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    write_config(tmp_path / "config.yaml", tmp_path / "script.yaml", juniors={"k": 1})
    common = ["--dataset", str(latin1_task["dataset"]), "--run-scripts", str(latin1_task["run_scripts"]),
              "--image-template", LATIN1_IMAGE]
    done = swepipe("run", *common, "--config", "config.yaml", "--run-id", run_id, "--evaluate", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    layout = RunLayout(tmp_path / "runs" / run_id)
    paths = layout.task(INSTANCE)
    rollout = json.loads((paths.junior / "rollout-00.json").read_text())
    assert rollout["patch"].encode("utf-8", "surrogateescape") == latin1_task["gold"]
    assert "\ufffd" not in rollout["patch"]
    pool = json.loads((paths.junior / "pool.json").read_text())
    assert pool["candidates"][0]["patch"].encode("utf-8", "surrogateescape") == latin1_task["gold"]
    result = json.loads((paths.principal / "result.json").read_text())
    assert result["source"] == "fallback:junior_top"
    assert (paths.principal / "patch.diff").read_bytes() == latin1_task["gold"]
    prediction = finished_predictions(layout.predictions)[INSTANCE]
    assert prediction["model_patch"].encode("utf-8", "surrogateescape") == latin1_task["gold"]
    assert prediction["resolved"] is True, prediction
    assert (paths.eval / "patch.diff").read_bytes() == latin1_task["gold"]

    # The candidate applies, byte for byte, in a fresh container of the task's image.
    with DockerRuntime(prepare_image(LATIN1_IMAGE, latin1_task["base"], sanitise=False), latin1_task["base"],
                       run_id=run_id) as fresh:
        fresh.write_file("/tmp/candidate.diff", pool["candidates"][0]["patch"])
        check = fresh.run("git apply --check -v /tmp/candidate.diff && git apply /tmp/candidate.diff && "
                          "python3 -c 'import greet; print(ascii(greet.greet(\"Ana\")))'")
        assert check.ok, check.output
        assert check.output.strip().endswith("'Ol\\xe9! Ana'")

    # `swepipe eval` on the run's predictions.jsonl scores it the same way.
    scored = swepipe("eval", "--predictions", str(layout.predictions), *common, "--output", "scored",
                     cwd=tmp_path)
    assert scored.returncode == 0, scored.stdout[-3000:] + scored.stderr[-3000:]
    verdict = json.loads((tmp_path / "scored" / INSTANCE / "result.json").read_text())
    assert verdict["category"] == "resolved" and verdict["patch_applied"] is True, verdict
    assert run_containers(run_id) == []


def test_an_image_without_base64_still_gives_the_diff(latin1_task, run_id):
    with DockerRuntime(prepare_image(LATIN1_IMAGE, latin1_task["base"]), latin1_task["base"],
                       run_id=run_id, server_in_image=True) as runtime:
        runtime.write_file("greet.py", FIXED_SOURCE)
        assert patchtext.to_bytes(runtime.diff()) == latin1_task["gold"]
        assert runtime.run("rm $(command -v base64) && ! command -v base64").ok
        runtime.write_file("extra.py", "X = 1\n")
        patch = runtime.diff()  # as text: the Latin-1 byte arrives replaced, the rest intact
        assert "+X = 1" in patch and "+MESSAGE = \"Ol\ufffd!\"" in patch
