import json
import subprocess
import sys

import pytest
from flaky_task import SEEDED_TEST, write_dataset

from pipeline.evaluation.validate import judge_task, leaked_test_names
from pipeline.records import EvalResult
from pipeline.tasks import load_tasks
from pipeline.tasks.datasets import BUNDLED, BUNDLED_DIR, BUNDLED_IMAGE_TEMPLATE

TASK = load_tasks(BUNDLED)[0]
BY_NAME = {t.repo.split("/")[-1]: t for t in load_tasks(BUNDLED)}


def scored(task, passing: set[str], resolved: bool, category: str = "") -> EvalResult:
    """A result.json as the scorer writes it: these tests PASSED, the others FAILED."""
    return EvalResult.of({"instance_id": task.instance_id, "resolved": resolved,
                          "category": category or ("resolved" if resolved else "tests_failed"),
                          "statuses": {name: "PASSED" if name in passing else "FAILED"
                                       for name in task.hidden_test_names}})


def gold_run(task):
    return scored(task, set(task.hidden_test_names), True)


def empty_run(task):
    return scored(task, set(task.pass_to_pass), False)


INFRA = EvalResult.of({"resolved": False, "category": "infra_error", "error": "the container of x failed: engine gone"})


def test_a_task_that_scores_the_same_on_every_replica_is_reliable():
    check = judge_task(TASK, {"gold": [gold_run(TASK)] * 3, "empty": [empty_run(TASK)] * 3})
    assert (check.status, check.ok, check.problems) == ("reliable", True, [])
    assert check.stable_tests == sorted(TASK.hidden_test_names)
    assert check.gold_resolved == 3 and check.empty_resolved == 0


def test_a_test_that_changes_outcome_between_replicas_makes_the_task_flaky():
    name = TASK.pass_to_pass[0]
    dropped = scored(TASK, set(TASK.hidden_test_names) - {name}, False)  # the gold patch, one test failed once
    check = judge_task(TASK, {"gold": [gold_run(TASK), dropped, gold_run(TASK)], "empty": [empty_run(TASK)] * 3})
    assert check.status == "flaky" and check.flaky_tests == [name] and check.broken_tests == []
    assert check.gold_resolved == 2 and not check.ok
    assert f"flaky tests: {name}" in check.problems
    assert any(p.startswith("gold patch: resolved 2 of 3 run(s) (tests_failed") for p in check.problems)


def test_a_test_wrong_on_every_replica_is_broken_and_named_with_why():
    f2p = TASK.fail_to_pass[0]
    at_base = scored(TASK, set(TASK.pass_to_pass) | {f2p}, False)  # a FAIL_TO_PASS test passing without the fix
    check = judge_task(TASK, {"gold": [gold_run(TASK)] * 2, "empty": [at_base] * 2})
    assert check.status == "broken" and check.broken_tests == [f2p] and check.flaky_tests == []
    assert f"FAIL_TO_PASS passing at base: {f2p}" in check.problems


def test_infrastructure_failures_are_counted_apart_as_unevaluable_not_as_outcomes():
    check = judge_task(TASK, {"gold": [gold_run(TASK), INFRA, None], "empty": [empty_run(TASK)] * 3})
    assert check.status == "unevaluable" and check.unevaluable == {"gold": 2, "empty": 0}
    assert check.flaky_tests == [] and check.broken_tests == [] and check.gold_resolved == 1
    assert any("gold patch: 2 of 3 run(s) unevaluable (infra_error the container of x failed: engine gone)" in p
               for p in check.problems)
    # an infra failure beside a real disagreement does not hide it
    dropped = scored(TASK, set(TASK.hidden_test_names) - {TASK.fail_to_pass[0]}, False)
    assert judge_task(TASK, {"gold": [gold_run(TASK), INFRA, dropped], "empty": [empty_run(TASK)] * 3}
                      ).status == "flaky"


def test_prompt_leak_is_found_by_full_name_and_by_function_name():
    assert leaked_test_names(TASK) == []
    name = TASK.fail_to_pass[0]
    by_name = TASK.model_copy(update={"problem_statement": TASK.problem_statement + f"\nRun {name}."})
    assert name in leaked_test_names(by_name)
    function = name.split("::")[-1].split(" | ")[-1]
    by_function = TASK.model_copy(update={"requirements": f"- make {function} pass"})
    assert name in leaked_test_names(by_function)


@pytest.mark.docker
def test_validate_fails_on_a_broken_task_and_names_the_problems(tmp_path):
    row = TASK.to_row()
    row["pass_to_pass"] = row["pass_to_pass"] + [row["fail_to_pass"][0]]  # fails at base: not a P2P test
    row["problem_statement"] += f"\n\nSee {row['fail_to_pass'][1 % len(row['fail_to_pass'])]}."
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(row) + "\n")
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "validate", "--dataset", str(broken),
                           "--run-scripts", str(BUNDLED_DIR / "tasks"), "--image-template", BUNDLED_IMAGE_TEMPLATE,
                           "--output", str(tmp_path / "out")], capture_output=True, text=True,
                          env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "PASS_TO_PASS not passing at base" in done.stdout
    assert "prompt mentions hidden tests" in done.stdout
    assert "0 of 1 task(s) sound" in " ".join(done.stdout.split())


@pytest.mark.docker
def test_validate_replicas_find_the_seeded_flaky_task_keep_the_stable_ones_and_resume(tmp_path):
    """Six replicas: the task whose one test fails on odd seeds is flaky (that test named) and left out of
    reliable.txt; the untouched tasks are reliable. The same command again scores nothing more."""
    stable = [BY_NAME["tinyq"], BY_NAME["cursorly"]]
    dataset, scripts, flaky = write_dataset(tmp_path, stable, BY_NAME["tinyq"])
    command = [sys.executable, "-m", "pipeline.cli", "validate", "--dataset", str(dataset), "--run-scripts",
               str(scripts), "--image-template", BUNDLED_IMAGE_TEMPLATE, "--replicas", "6", "--output", "out"]
    env = {"COLUMNS": "400", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr  # the flaky task is not sound
    rows = {row["instance_id"]: row for row in map(json.loads, (tmp_path / "out" / "instances.jsonl").open())}
    assert rows[flaky.instance_id]["status"] == "flaky" and rows[flaky.instance_id]["tests"]["flaky"] == [SEEDED_TEST]
    assert rows[flaky.instance_id]["gold"] == {"resolved": 3, "unevaluable": 0}  # the even seeds of 1..6
    assert rows[flaky.instance_id]["tests"]["stable"] == sorted(set(flaky.hidden_test_names) - {SEEDED_TEST})
    for task in stable:
        assert rows[task.instance_id]["status"] == "reliable", rows[task.instance_id]
        assert rows[task.instance_id]["gold"] == {"resolved": 6, "unevaluable": 0}
        assert rows[task.instance_id]["tests"] == {"stable": sorted(task.hidden_test_names), "flaky": [], "broken": []}
    assert (tmp_path / "out" / "reliable.txt").read_text().split() == sorted(t.instance_id for t in stable)
    seeds = [json.loads((tmp_path / "out" / "gold" / f"r{r}" / flaky.instance_id / "result.json").read_text())
             ["scorer"]["seed"] for r in range(1, 7)]
    assert seeds == [1, 2, 3, 4, 5, 6]
    text = " ".join(done.stdout.replace("│", " ").split())
    assert "swepipe-bundled/tinyq python 2 1 1 0 0" in text  # the table per repository: 2 tasks, 1 reliable
    assert "2 of 3 task(s) sound; 2 reliable over 6 replica(s)" in text
    results = sorted((tmp_path / "out").glob("*/r*/*/result.json"))
    assert len(results) == 2 * 6 * 3
    before = {path: path.stat().st_mtime_ns for path in results}
    again = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert again.returncode == 1 and "2 of 3 task(s) sound" in again.stdout
    assert {path: path.stat().st_mtime_ns for path in results} == before  # nothing scored twice


@pytest.mark.parametrize("args, named", [(["--scoring-profile", "fast"], "no scoring profile 'fast'; choose one of: "
                                          "local (plain local Docker"), (["--replicas", "0"], "--replicas (0)")])
def test_a_bad_profile_or_replica_count_is_refused_before_anything_is_scored(tmp_path, args, named):
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "validate", *args, "--output", "out"],
                          capture_output=True, text=True, cwd=tmp_path, env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"})
    assert done.returncode != 0 and named in " ".join((done.stdout + done.stderr).split())
    assert not (tmp_path / "out").exists()
