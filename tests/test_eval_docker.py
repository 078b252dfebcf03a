"""`swepipe eval` on the bundled tasks in real containers, by the official protocol."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from leftovers import run_containers

from pipeline.cli.eval_command import predictions_run_id
from pipeline.evaluation.batch import evaluate_predictions
from pipeline.evaluation.runner import EvalSettings, evaluate
from pipeline.interop.predictions import PatchToScore
from pipeline.tasks import load_tasks
from pipeline.tasks.datasets import BUNDLED, defaults_for

pytestmark = pytest.mark.docker
TASKS = load_tasks(BUNDLED)
BINARY = ("diff --git a/logo.png b/logo.png\nnew file mode 100644\nindex 0000000..1111111\n"
          "Binary files /dev/null and b/logo.png differ\n")


def settings(run_id, **overrides):
    defaults = defaults_for(BUNDLED)
    fields = dict(image_template=defaults.image_template, run_scripts=defaults.run_scripts, run_id=run_id)
    return EvalSettings(**{**fields, **overrides})


def ids(tasks):
    return [t.instance_id for t in tasks]


@pytest.fixture(scope="module")
def gold_and_empty(tmp_path_factory):
    """Every bundled task scored twice: with its gold patch and with an empty patch."""
    out = tmp_path_factory.mktemp("eval")
    run_id = f"test-eval-{os.getpid()}"
    gold = evaluate_predictions([PatchToScore(t.instance_id, t.patch) for t in TASKS], TASKS, out / "gold",
                                settings(run_id), workers=2, show_progress=False)
    empty = evaluate_predictions([PatchToScore(t.instance_id, "") for t in TASKS], TASKS, out / "empty",
                                 settings(run_id), workers=2, show_progress=False)
    return gold, empty, out


def test_every_gold_patch_resolves(gold_and_empty):
    gold, _, out = gold_and_empty
    unresolved = {i: r.category for i, r in gold.results.items() if not r.resolved}
    assert unresolved == {}
    assert len(gold.results) == len(TASKS)
    official = json.loads((out / "gold" / "eval_results.json").read_text())
    assert official == {t.instance_id: True for t in TASKS}
    for task in TASKS:
        result = json.loads((out / "gold" / task.instance_id / "result.json").read_text())
        assert result["patch_applied"] is True
        assert sorted(result["FAIL_TO_PASS"]["passed"]) == sorted(task.fail_to_pass)
        for artefact in ("patch.diff", "entryscript.sh", "stdout.log", "stderr.log", "output.json"):
            assert (out / "gold" / task.instance_id / artefact).exists(), artefact


def test_empty_patch_never_resolves(gold_and_empty):
    _, empty, _ = gold_and_empty
    assert {r.category for r in empty.results.values()} == {"tests_failed"}
    for task in TASKS:
        result = empty.results[task.instance_id].to_dict()
        assert result["FAIL_TO_PASS"]["passed"] == []  # hidden tests really ran, on the base code
        assert sorted(result["PASS_TO_PASS"]["passed"]) == sorted(task.pass_to_pass)


def test_patch_that_does_not_apply_is_patch_failed(tmp_path, run_id):
    task = TASKS[0]
    lines = task.patch.splitlines(keepends=True)
    first_removed = next(i for i, line in enumerate(lines) if line.startswith("-") and not line.startswith("---"))
    lines[first_removed] = "-this line is not in the file\n"
    broken = "".join(lines)
    result = evaluate(task, broken, tmp_path, settings(run_id)).to_dict()
    assert result["category"] == "patch_failed" and result["patch_applied"] is False and not result["resolved"]
    assert result["PASS_TO_PASS"]["passed"]  # the official protocol still ran the tests on the base code


def test_gold_plus_a_binary_section_still_resolves(tmp_path, run_id):
    task = TASKS[1]
    result = evaluate(task, BINARY + task.patch, tmp_path, settings(run_id)).to_dict()
    assert result["resolved"] and result["binary_sections_stripped"]
    assert (tmp_path / "patch.diff").read_text() == task.patch


def test_gold_without_its_final_newline_is_judged_as_git_apply_judges_it(tmp_path, run_id):
    task = TASKS[0]
    truncated = task.patch.rstrip("\n")
    repo = tmp_path / "repo"
    from pipeline.bundled.build import TASKS_ROOT, materialise_repo

    materialise_repo(TASKS_ROOT / task.instance_id, repo)
    (tmp_path / "p.diff").write_text(truncated)
    git_says = subprocess.run(["git", "-C", str(repo), "apply", "--check", str(tmp_path / "p.diff")]).returncode == 0
    result = evaluate(task, truncated, tmp_path / "eval", settings(run_id)).to_dict()
    assert result["patch_applied"] is git_says
    assert result["resolved"] is git_says


def test_hanging_run_script_ends_as_timeout(tmp_path, run_id):
    task = TASKS[0]
    scripts = tmp_path / "run_scripts" / task.instance_id
    scripts.mkdir(parents=True)
    (scripts / "run_script.sh").write_text("#!/bin/bash\necho starting\nsleep 600\n")
    shutil.copy(defaults_for(BUNDLED).run_scripts / task.instance_id / "parser.py", scripts / "parser.py")
    started = time.monotonic()
    result = evaluate(task, task.patch, tmp_path / "eval", settings(run_id, run_scripts=tmp_path / "run_scripts",
                                                                     timeout=8)).to_dict()
    assert result["category"] == "timeout" and not result["resolved"]
    assert time.monotonic() - started < 60
    assert run_containers(run_id) == []


def test_missing_scripts_and_unknown_instances_do_not_stop_the_run(tmp_path, run_id):
    empty_scripts = tmp_path / "none"
    empty_scripts.mkdir()
    predictions = [PatchToScore(TASKS[0].instance_id, ""), PatchToScore("instance_nobody__nothing-1", "")]
    summary = evaluate_predictions(predictions, TASKS, tmp_path / "out", settings(run_id, run_scripts=empty_scripts),
                                   show_progress=False)
    assert summary.unknown == ["instance_nobody__nothing-1"]
    result = summary.results[TASKS[0].instance_id]
    assert result.category == "infra_error" and "run_script.sh" in result.error
    assert json.loads((tmp_path / "out" / "eval_results.json").read_text()) == {}
    assert TASKS[0].instance_id in json.loads((tmp_path / "out" / "infra_errors.json").read_text())


def test_missing_image_is_an_infra_error(tmp_path, run_id):
    result = evaluate(TASKS[0], "", tmp_path, settings(run_id, image_template="swepipe-no-such-image:{dockerhub_tag}"))
    assert result.category == "infra_error" and "not available locally" in result.error


def test_rerun_after_interrupting_eval_skips_what_finished(tmp_path):
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text("".join(json.dumps({"instance_id": t.instance_id, "model_patch": t.patch}) + "\n"
                                   for t in TASKS[:3]))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "pipeline.cli", "eval", "--predictions", str(predictions), "--output",
               str(out), "--workers", "1"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while not list(out.glob("*/result.json")) and time.monotonic() < deadline:
            time.sleep(0.2)
        finished = list(out.glob("*/result.json"))
        assert len(finished) == 1
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert run_containers(predictions_run_id(predictions)) == []
    first = finished[0]
    first_mtime = first.stat().st_mtime_ns
    assert len(list(out.glob("*/result.json"))) < 3
    rerun = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert rerun.returncode == 0, rerun.stderr
    assert "already had a result" in rerun.stdout
    assert first.stat().st_mtime_ns == first_mtime
    assert json.loads((out / "eval_results.json").read_text()) == {t.instance_id: True for t in TASKS[:3]}


def test_a_60_mb_test_log_is_saved_capped_in_bounded_memory_and_the_verdict_is_unchanged(tmp_path, run_id):
    import tracemalloc

    task = TASKS[0]
    official = defaults_for(BUNDLED).run_scripts / task.instance_id
    scripts = tmp_path / "run_scripts" / task.instance_id
    scripts.mkdir(parents=True)
    noise = "yes 'a chatty test run says this again and again 0123456789' | head -c 30000000; echo"
    (scripts / "run_script.sh").write_text(
        f"#!/bin/bash\n{noise}\ncat > /tmp/official.sh <<'SWEPIPE_OFFICIAL'\n{(official / 'run_script.sh').read_text()}"
        f"SWEPIPE_OFFICIAL\nbash /tmp/official.sh \"$@\"\n{noise}\n")
    shutil.copy(official / "parser.py", scripts / "parser.py")
    tracemalloc.start()
    try:
        result = evaluate(task, task.patch, tmp_path / "eval", settings(run_id, run_scripts=tmp_path / "run_scripts",
                                                                         log_limit=2_000_000)).to_dict()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result["category"] == "resolved", result  # the parser read the whole log in the container
    assert peak < 16 * 2**20  # a quarter of the log: read whole, it would not fit
    log = (tmp_path / "eval" / "stdout.log").read_bytes()
    assert len(log) < 2_000_000 + 500 and b"bytes of this log cut here" in log
    assert log.startswith(b"a chatty test run") and b"a chatty test run" in log[-100:]  # its head and its tail
