import json

import pytest

from pipeline.errors import DatasetError
from pipeline.evaluation.protocol import (
    dockerfile_env_exports,
    entry_script,
    judge,
    parse_statuses,
    parser_script,
    strip_binary_sections,
)
from pipeline.interop.predictions import load_predictions
from pipeline.tasks import Task

TEXT_SECTION = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
BINARY_SECTION = "diff --git a/img.png b/img.png\nindex 1..2 100644\nBinary files a/img.png and b/img.png differ\n"
GIT_BINARY = "diff --git a/f.bin b/f.bin\nnew file mode 100644\nGIT binary patch\nliteral 3\nKcmZ>Y%>V!Z\n\n"


def make_task(**overrides) -> Task:
    row = dict(instance_id="instance_acme__calc-1", repo="acme/calc", base_commit="abc1234", problem_statement="p",
               repo_language="python", fail_to_pass=["t.py::test_new"], pass_to_pass=["t.py::test_old"],
               selected_test_files_to_run=["t.py", "u.py"], dockerhub_tag="calc-1",
               before_repo_set_cmd="git reset --hard abc1234\ngit clean -fd \ngit checkout abc1234\n"
                                   "git checkout def456 -- t.py\n")
    row.update(overrides)
    return Task.from_row(row)


def test_binary_sections_are_removed_and_text_kept_byte_for_byte():
    assert strip_binary_sections(BINARY_SECTION + TEXT_SECTION + GIT_BINARY) == TEXT_SECTION
    no_final_newline = TEXT_SECTION.rstrip("\n")
    assert strip_binary_sections(no_final_newline) == no_final_newline
    assert strip_binary_sections("") == ""


def test_env_lines_become_exports_like_the_official_harness():
    base = "FROM x\nENV A=1\n  ENV PATH=/go/bin:$PATH\nRUN ENV=2 make\n"
    assert dockerfile_env_exports(base, "ENV B 2\n") == ["export A=1", "export PATH=/go/bin:$PATH", "export B 2"]


def test_entry_script_runs_only_the_last_setup_line_and_joins_test_files():
    script = entry_script(make_task(), ["export A=1"], "MARKER")
    lines = script.splitlines()
    assert "git checkout def456 -- t.py" in lines and "git clean -fd" not in script
    assert lines.index("git reset --hard abc1234") < lines.index("git apply -v /workspace/patch.diff") \
        < lines.index("git checkout def456 -- t.py") < lines.index("canary_status=none") \
        < lines.index('echo "MARKER $apply_status $canary_status"')
    # the tests' output goes to the container's own streams, after the marker line on each
    marker = 'echo "MARKER $apply_status $canary_status"'
    assert lines[-3:] == [marker, f"{marker} >&2", "bash /workspace/run_script.sh t.py,u.py"]
    assert lines[1] == "export A=1" and "parser.py" not in script


def test_the_canaries_are_planted_after_the_hidden_tests_are_restored_and_run_after_the_selected_tests():
    lines = entry_script(make_task(), [], "MARKER", "plant here\n", ["t.py::test_planted"]).splitlines()
    assert lines.index("git checkout def456 -- t.py") < lines.index("plant here") \
        < lines.index('echo "MARKER $apply_status $canary_status"')
    assert lines[-1] == "bash /workspace/run_script.sh t.py,u.py,t.py::test_planted"


def test_the_parser_runs_apart_as_the_official_last_step():
    lines = parser_script(["export A=1"]).splitlines()
    assert lines.index("tar -x -C / || exit 3") < lines.index("export A=1") < lines.index("cd /app")
    assert lines[-1] == "python /workspace/parser.py /workspace/stdout.log /workspace/stderr.log /workspace/output.json"


def test_resolved_only_when_every_required_name_passed():
    task = make_task()
    assert judge(task, {"t.py::test_new": "PASSED", "t.py::test_old": "PASSED"}).resolved
    failed = judge(task, {"t.py::test_new": "FAILED", "t.py::test_old": "PASSED", "extra": "FAILED"})
    assert not failed.resolved and failed.fail_to_pass.failed == ["t.py::test_new"]
    missing = judge(task, {"t.py::test_old": "PASSED"})
    assert not missing.resolved and missing.fail_to_pass.missing == ["t.py::test_new"]


def test_near_miss_recorded_but_verdict_stays_official():
    verdict = judge(make_task(), {"t.py::test_new ": "PASSED", "t.py::test_old": "PASSED"})
    assert not verdict.resolved
    assert verdict.near_misses == {"t.py::test_new": "t.py::test_new "}


def test_parser_output_without_tests_list_is_rejected():
    with pytest.raises(ValueError):
        parse_statuses({"results": []})


def test_three_prediction_forms(tmp_path):
    ours = tmp_path / "predictions.jsonl"
    ours.write_text(json.dumps({"instance_id": "a", "model_patch": "P", "strategy": "pipeline"}) + "\n\n")
    official = tmp_path / "patches.json"
    official.write_text(json.dumps([{"instance_id": "b", "patch": "Q", "prefix": "gold"}]))
    swebench = tmp_path / "preds.json"
    swebench.write_text(json.dumps([{"instance_id": "c", "model_patch": "", "model_name_or_path": "m"}]))
    assert load_predictions(ours)[0].patch == "P"
    assert load_predictions(official)[0].model == "gold"
    assert load_predictions(swebench)[0].patch == ""


def test_bad_predictions_name_the_entry(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"instance_id": "a", "model_patch": "x"}\n{"model_patch": "y"}\n')
    with pytest.raises(DatasetError, match="line 2.*instance_id"):
        load_predictions(bad)
    dup = tmp_path / "d.jsonl"
    dup.write_text('{"instance_id": "a", "model_patch": "x"}\n{"instance_id": "a", "model_patch": "y"}\n')
    with pytest.raises(DatasetError, match="second prediction"):
        load_predictions(dup)


def test_attempts_report_flaky_tests_and_keep_the_first_verdict(tmp_path, monkeypatch):
    from pipeline.evaluation import batch
    from pipeline.evaluation.runner import EvalSettings
    from pipeline.interop.predictions import PatchToScore
    from pipeline.records import EvalResult

    task = make_task()
    outcomes = iter([
        {"t.py::test_new": "PASSED", "t.py::test_old": "FAILED"},  # attempt 1: a P2P test flakes
        {"t.py::test_new": "PASSED", "t.py::test_old": "PASSED"},  # attempt 2: all pass
    ])

    def fake_evaluate(task_, patch, out_dir, settings):  # stands in for the container run only
        statuses = next(outcomes)
        resolved = all(s == "PASSED" for s in statuses.values())
        return EvalResult.of({"instance_id": task_.instance_id, "resolved": resolved,
                              "category": "resolved" if resolved else "tests_failed", "statuses": statuses})

    monkeypatch.setattr(batch, "evaluate", fake_evaluate)
    summary = batch.evaluate_predictions([PatchToScore(task.instance_id, "p")], [task], tmp_path,
                                         EvalSettings(image_template="x"), attempts=3, show_progress=False)
    result = summary.results[task.instance_id]
    assert result.resolved is False  # the official verdict is the first attempt's
    assert [a.resolved for a in result.attempts] == [False, True]  # stops once an attempt resolves
    assert result.flaky_tests == ["t.py::test_old"]
    assert json.loads((tmp_path / "eval_results.json").read_text()) == {task.instance_id: False}
