"""Canaries (pipeline.evaluation.canaries) and the runner a run script runs (pipeline.evaluation.runners), without
Docker: which runner each script runs and where planted tests cannot go; the planting script run by bash in a
repository here, its tests run by the real pytest and node --test; what the reported statuses make of them; and
the runner-summary check on real runners' output. The attacks in real containers: tests/test_canaries_docker.py."""

import random
import re
import shutil
import subprocess
import sys

import pytest
from fuzzing import fuzz
from hypothesis import given
from hypothesis import strategies as st

from pipeline.evaluation import canaries, integrity
from pipeline.evaluation.runners import Runner, read_run_script
from pipeline.evaluation.summaries import read_summaries
from pipeline.tasks import Task, load_tasks
from pipeline.tasks.datasets import BUNDLED, BUNDLED_DIR

TASKS = load_tasks(BUNDLED)


def make_task(selected, language="python") -> Task:
    return Task.from_row(dict(instance_id="instance_acme__calc-1", repo="acme/calc", base_commit="abc1234",
                              problem_statement="p", repo_language=language, fail_to_pass=["t"], pass_to_pass=[],
                              selected_test_files_to_run=selected, dockerhub_tag="calc-1", before_repo_set_cmd=""))


def official_layout(selected_body: str, outside: str = "") -> str:
    """A run script laid out as the official ones are, running ``selected_body`` on the selected tests."""
    return (f"#!/bin/bash\nset -e\n{outside}\nrun_all_tests() {{\n  echo all\n  make everything\n}}\n\n"
            f"run_selected_tests() {{\n  local test_files=(\"$@\")\n{selected_body}\n}}\n\n"
            "if [ $# -eq 0 ]; then\n  run_all_tests\n  exit $?\nfi\nrun_selected_tests \"$@\"\n")


def test_every_bundled_run_script_is_read_as_its_runner():
    expected = {"python": Runner.PYTEST, "go": Runner.GO, "js": Runner.NODE_TEST, "ts": Runner.NODE_TEST}
    for task in TASKS:
        script = read_run_script((BUNDLED_DIR / "tasks" / task.instance_id / "run_script.sh").read_text())
        assert (script.runner, script.name_filter, script.fail_fast) == (expected[task.repo_language], False,
                                                                          False), task.instance_id


@pytest.mark.parametrize("body, runner, name_filter, fail_fast", [
    ('  pytest "${test_files[@]}" -v --tb=short', Runner.PYTEST, False, False),
    ('  python bin/ansible-test units -v "$f" || true', Runner.PYTEST, False, False),
    ('  pytest "${test_files[@]}" -x', Runner.PYTEST, False, True),
    ('  pytest "${test_files[@]}" --maxfail=1000', Runner.PYTEST, False, False),
    ('  pytest "${test_files[@]}" -k "not slow"', Runner.PYTEST, False, False),
    ('  pytest "${test_files[@]}" -k smoke', Runner.PYTEST, True, False),
    ('  go test ./... -v -run "^(${pattern})$" 2>&1 | awk \'$0 != "PASS"\'', Runner.GO, False, False),
    ("  go test ./... -v -run '^TestOnly$'", Runner.GO, True, False),
    ('  go test -failfast -run "$p" ./...', Runner.GO, False, True),
    ("  npx mocha \"${test_files[@]}\" --reporter=json --bail=false\n  rm -f test/tmp*", Runner.MOCHA, False, False),
    ('  npx mocha "${test_files[@]}" --grep="translation keys"', Runner.MOCHA, True, False),
    ('  npx jest "${test_files[@]}" --ci', Runner.JEST, False, False),
    ('  npx jest --testNamePattern="$name" "$file"', Runner.JEST, True, False),
    ('  yarn test "${test_files[@]}" --json > /tmp/out.json || true', Runner.PACKAGE, False, False),
    ('  node --test --test-reporter=tap "$f"', Runner.NODE_TEST, False, False),
])
def test_the_runner_of_the_selected_tests_and_what_keeps_planted_tests_out(body, runner, name_filter, fail_fast):
    script = read_run_script(official_layout(body))
    assert (script.runner, script.name_filter, script.fail_fast) == (runner, name_filter, fail_fast)


def test_a_runner_named_only_in_a_comment_or_in_run_all_tests_is_not_the_selected_tests_runner():
    script = read_run_script(official_layout("  # pytest would be nicer here\n  make check  # not pytest"))
    assert script.runner is None and "no test runner swepipe knows" in script.unknown
    other = read_run_script(official_layout("  npx ospec test/*.js"))
    assert other.runner is None and "ospec" in other.unknown


def test_a_runner_set_in_a_variable_outside_the_functions_is_found_with_its_options():
    script = read_run_script(official_layout('  "${GO_TEST[@]}" -run "^(${p})$" ./...', 'GO_TEST=(go test -v)'))
    assert script.runner is Runner.GO and not script.name_filter
    fixed = read_run_script(official_layout('  "${GO_TEST[@]}" -run TestA ./...', 'GO_TEST=(go test -v)'))
    assert fixed.name_filter


def test_a_plan_draws_new_names_every_time_and_says_why_when_it_cannot_plant():
    task = make_task(["tests/test_a.py", "tests/test_b.py"])
    first, second = (canaries.plan(task, "pytest -v", "") for _ in range(2))
    assert first.target == "tests/test_b.py" and first.arguments == []  # the last file; files run whole
    assert {c.name for c in first.canaries}.isdisjoint(c.name for c in second.canaries)
    assert [c.must_pass for c in first.canaries] == [True, False]
    assert all(re.fullmatch(r"test_[a-z]+_[a-z]+_[a-z0-9]{8}", c.name) for c in first.canaries)
    passing, failing = first.canaries
    assert sum(passing.values[:2]) == passing.values[2] and sum(failing.values[:2]) != failing.values[2]

    node_ids = canaries.plan(make_task(["tests/test_a.py::TestX::test_y"]), "pytest -v", "")
    assert node_ids.arguments == [f"tests/test_a.py::{c.name}" for c in node_ids.canaries]
    go = canaries.plan(make_task(["TestParse", "TestNext/leap_year"], "go"), "go test -run \"$p\" ./...", "")
    assert go.target == "TestNext" and go.arguments == [c.name for c in go.canaries]
    assert all(re.fullmatch(r"Test[A-Z][a-z]+[A-Z][a-z]+[A-Z0-9][a-z0-9]{7}", c.name) for c in go.canaries)

    refused = {
        "run_script.sh picks pytest's tests by name": canaries.plan(task, "pytest -k smoke", ""),
        "stops pytest at the first failure": canaries.plan(task, "pytest -x", ""),
        "no test runner swepipe knows": canaries.plan(task, "make test", ""),
        "no Python test file": canaries.plan(make_task(["/etc/passwd"]), "pytest", ""),
        "is no Go test name": canaries.plan(make_task(["tests/x.go"], "go"), "go test ./...", ""),
        "selects no test files": canaries.plan(make_task([]), "pytest", ""),
        "required tests include the whole file": canaries.plan(
            Task.from_row({**task.to_row(), "pass_to_pass": ["tests/test_b.py"]}), "pytest", ""),
    }
    for words, plan in refused.items():
        assert not plan.planned and words in plan.reason, (words, plan.reason)
    assert not canaries.plan(make_task(["../up/test_x.py"]), "pytest", "").planned


def git_repo(tmp_path, files: dict) -> "Path":  # noqa: F821 - a pathlib.Path
    root = tmp_path / "app"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    subprocess.run("git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm base", shell=True,
                   cwd=root, check=True)
    return root


def plant(root, plan, patch="") -> str:
    """Run the planting part of the entry script in ``root``; the status word it leaves."""
    script = canaries.plant_script(plan, patch) + 'echo "$canary_status"\n'
    done = subprocess.run(["bash", "-c", script], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout.split()[-1]


PYTEST_FILE = ("import pytest\n\n\nclass TestThing:\n    def test_in_class(self):\n        assert 1\n\n\n"
               "def test_end():\n    assert True")


def test_planted_pytest_canaries_run_last_and_come_out_as_they_must(tmp_path):
    root = git_repo(tmp_path, {"tests/test_a.py": PYTEST_FILE})  # no newline at its end
    plan = canaries.plan(make_task(["tests/test_a.py"]), "pytest -v", "")
    assert plant(root, plan) == canaries.PLANTED
    done = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "tests/test_a.py"],
                          cwd=root, capture_output=True, text=True)
    reported = re.findall(r"^(tests/test_a\.py::\S+) (PASSED|FAILED)", done.stdout, re.M)
    passing, failing = plan.canaries
    assert reported[-2:] == [(f"tests/test_a.py::{passing.name}", "PASSED"),
                             (f"tests/test_a.py::{failing.name}", "FAILED")]  # after the file's own tests
    assert ("tests/test_a.py::TestThing::test_in_class", "PASSED") in reported
    outcome = canaries.read_outcome(plan, canaries.PLANTED, reported)
    assert canaries.findings(outcome) == [] and reported == [("tests/test_a.py::TestThing::test_in_class", "PASSED"),
                                                             ("tests/test_a.py::test_end", "PASSED")]


def test_where_the_required_tests_are_methods_the_canaries_are_methods_of_a_class_of_their_own(tmp_path):
    """A parser that reads only ``file::Class::test`` names (as some official ones do) reads them too."""
    task = Task.from_row(dict(instance_id="instance_acme__calc-1", repo="acme/calc", base_commit="abc1234",
                              problem_statement="p", repo_language="python", dockerhub_tag="calc-1",
                              fail_to_pass=["tests/test_a.py::TestThing::test_in_class"],
                              pass_to_pass=["tests/test_b.py::test_elsewhere"], before_repo_set_cmd="",
                              selected_test_files_to_run=["tests/test_a.py::TestThing::test_in_class"]))
    plan = canaries.plan(task, "pytest -v", "")
    assert re.fullmatch(r"Test[A-Z][a-z]+[A-Z][a-z]+[A-Z0-9][a-z0-9]{7}", plan.suite)
    assert plan.arguments == [f"tests/test_a.py::{plan.suite}::{c.name}" for c in plan.canaries]  # node ids run
    root = git_repo(tmp_path, {"tests/test_a.py": PYTEST_FILE})
    assert plant(root, plan) == canaries.PLANTED
    done = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *plan.arguments],
                          cwd=root, capture_output=True, text=True)
    assert re.findall(r"^(\S+) (PASSED|FAILED)", done.stdout, re.M) == [(arg, status) for arg, status in zip(
        plan.arguments, ("PASSED", "FAILED"), strict=True)]
    mixed = Task.from_row({**task.to_row(), "pass_to_pass": ["tests/test_a.py::test_end"]})
    assert canaries.plan(mixed, "pytest -v", "").suite == ""  # a parser that reads both: functions do


def test_where_a_pytest_canary_cannot_go_the_entry_script_says_why(tmp_path):
    plan = canaries.plan(make_task(["tests/test_a.py"]), "pytest -v", "")
    root = git_repo(tmp_path, {"tests/test_b.py": "def test_b():\n    pass\n"})
    assert plant(root, plan) == "target_missing"
    (root / "tests" / "test_a.py").symlink_to(root / "tests" / "test_b.py")
    assert plant(root, plan) == "target_missing"  # never written through a link the patch may have made
    configured = git_repo(tmp_path / "c", {"tests/test_a.py": "def test_a():\n    pass\n",
                                           "pytest.ini": "[pytest]\npython_functions = check_*\n"})
    assert plant(configured, plan) == "function_names_configured"
    assert (configured / "tests" / "test_a.py").read_text() == "def test_a():\n    pass\n"
    outcome = canaries.read_outcome(plan, "function_names_configured", [])
    assert not outcome.planted and "python_functions" in outcome.reason() and canaries.findings(outcome) == []


NODE_FILES = {
    "test/cjs.test.js": "'use strict';\nconst assert = require('node:assert/strict');\n"
                        "const { describe, it } = require('node:test');\n"
                        "describe('suite', () => { it('works', () => { assert.strictEqual(1, 1); }); });\n",
    "test/esm.test.mjs": "import assert from 'node:assert/strict';\nimport { test } from 'node:test';\n"
                         "test('works', () => { assert.equal(2, 2); });\n",
    "test/bare.test.js": "// a file that imports no runner\nconsole.log('nothing here');\n",
}


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
@pytest.mark.parametrize("file", sorted(NODE_FILES))
def test_planted_javascript_canaries_run_under_node_test_in_commonjs_and_modules(tmp_path, file):
    root = git_repo(tmp_path, NODE_FILES)
    plan = canaries.plan(make_task([f"{file} | suite | works"], "js"), "node --test \"$f\"", "")
    assert plan.runner is Runner.NODE_TEST and plan.target == file
    assert plant(root, plan) == canaries.PLANTED
    done = subprocess.run(["node", "--test", "--test-reporter=tap", file], cwd=root, capture_output=True,
                          text=True, timeout=60)
    results = dict((name, ok) for ok, name in re.findall(r"^\s*(ok|not ok) \d+ - (.*)$", done.stdout, re.M))
    passing, failing = plan.canaries
    assert results[passing.name] == "ok" and results[failing.name] == "not ok", done.stdout
    assert "Expected values to be strictly equal" in done.stdout  # failed by the assertion, not an error


def test_what_the_reported_statuses_make_of_the_canaries():
    plan = canaries.plan(make_task(["tests/test_a.py"]), "pytest", "")
    passing, failing = plan.canaries
    honest = [(f"tests/test_a.py::{passing.name}", "PASSED"), (f"tests/test_a.py::{failing.name}", "FAILED")]
    assert canaries.findings(canaries.read_outcome(plan, canaries.PLANTED, list(honest))) == []
    forged = canaries.findings(canaries.read_outcome(plan, canaries.PLANTED, [honest[0], (honest[1][0], "PASSED")]))
    assert forged == [f"the planted test that must fail, {failing.name} (in tests/test_a.py), was reported PASSED"]
    twice = canaries.findings(canaries.read_outcome(plan, canaries.PLANTED, [*honest, (honest[1][0], "PASSED")]))
    assert len(twice) == 1 and "must fail" in twice[0]  # any PASSED entry of it counts
    unrun = canaries.findings(canaries.read_outcome(plan, canaries.PLANTED, []))
    assert unrun == [f"the planted test that must pass, {passing.name} (in tests/test_a.py), was not reported, though "
                     "the required tests beside it passed"]
    # many parsers keep only passes (a go test parser reading "--- PASS" lines alone): an unreported failure is none
    assert canaries.findings(canaries.read_outcome(plan, canaries.PLANTED, [honest[0]])) == []
    broken = canaries.findings(canaries.read_outcome(plan, canaries.PLANTED, [(honest[0][0], "ERROR"), honest[1]]))
    assert broken == [f"the planted test that must pass, {passing.name} (in tests/test_a.py), was reported ERROR"]
    # a status the entry script never printed as "planted": no canary ran, nothing to hold against the run
    for status in (None, "none", "target_missing", "garbage"):
        assert canaries.findings(canaries.read_outcome(plan, status, [])) == []
    assert canaries.read_outcome(plan, None, []).reason() == "the entry script said 'none'"
    assert canaries.read_outcome(plan, "target_missing", []).reason().startswith("the test file to plant them in")


def summaries(tmp_path, text):
    (tmp_path / "stdout.log").write_text(text)
    return read_summaries(tmp_path / "stdout.log")


# Output as the runners print it (pytest's and node's were printed here by the runners themselves, shortened)
PYTEST_RUN = ("============================= test session starts ==============================\n"
              "collected 2 items\n\ntests/test_a.py::test_a PASSED [ 50%]\ntests/test_a.py::test_b PASSED [100%]\n\n"
              "============================== 2 passed in 0.01s ===============================\n")
GO_RUN = "=== RUN   TestA\n--- PASS: TestA (0.00s)\nPASS\nok  \texample.com/calc\t0.004s\n"
GO_JSON = ('{"Time":"2025-01-01T00:00:00Z","Action":"pass","Package":"example.com/calc","Test":"TestA"}\n'
           '{"Time":"2025-01-01T00:00:00Z","Action":"pass","Package":"example.com/calc","Elapsed":0.01}\n')
NODE_RUN = "TAP version 13\nok 1 - works\n1..1\n# tests 1\n# suites 0\n# pass 1\n# fail 0\n"
JEST_RUN = "PASS src/a.test.js\n  ✓ works (3 ms)\n\nTest Suites: 1 passed, 1 total\nTests:       1 passed, 1 total\n"
MOCHA_RUN = "  suite\n    ✔ works\n\n\n  1 passing (4ms)\n\n"
MOCHA_JSON = '{\n  "stats": {\n    "suites": 1,\n    "tests": 1,\n    "passes": 1\n  },\n  "tests": []\n}\n'


@pytest.mark.parametrize("runner, log", [
    (Runner.PYTEST, PYTEST_RUN), (Runner.PYTEST, "2 passed in 0.01s\n"), (Runner.GO, GO_RUN), (Runner.GO, GO_JSON),
    (Runner.NODE_TEST, NODE_RUN), (Runner.JEST, JEST_RUN), (Runner.MOCHA, MOCHA_RUN), (Runner.MOCHA, MOCHA_JSON),
    (Runner.PACKAGE, JEST_RUN), (Runner.PACKAGE, MOCHA_RUN), (Runner.PYTEST, PYTEST_RUN.replace("\n", "\r\n")),
    (Runner.PYTEST, PYTEST_RUN.replace("== 2 passed", "== \x1b[32m2 passed\x1b[0m")),
])
def test_an_honest_run_of_each_runner_has_its_summary(tmp_path, runner, log):
    assert integrity.summary_missing_findings(runner, summaries(tmp_path, log)) == []


@pytest.mark.parametrize("runner, log", [
    (Runner.PYTEST, "tests/test_a.py::test_a PASSED\n"),  # PASSED lines printed, then the run ended
    (Runner.PYTEST, PYTEST_RUN + PYTEST_RUN.split("\n", 1)[0] + "\ntests/test_b.py::test_c PASSED\n"),
    (Runner.GO, "--- PASS: TestA (0.00s)\nPASS\n"),
    (Runner.NODE_TEST, "ok 1 - works\n"),
    (Runner.JEST, "  ✓ works (3 ms)\n"),
    (Runner.MOCHA, PYTEST_RUN),  # another runner's summary is not this one's
])
def test_a_run_whose_runner_printed_no_summary_is_a_finding(tmp_path, runner, log):
    [finding] = integrity.summary_missing_findings(runner, summaries(tmp_path, log))
    assert finding["kind"] == "summary_missing"


def test_a_runner_swepipe_does_not_know_is_not_asked_for_a_summary(tmp_path):
    assert integrity.summary_missing_findings(None, summaries(tmp_path, "ok 1\n")) == []


selected_entry = st.one_of(st.text(max_size=40), st.sampled_from(
    ("tests/test_a.py", "tests/x y.py::test_a[1 2]", "test/a.test.js | s | t", "TestA", "TestA/sub",
     "tests/'quoted'.py", "tests/$(touch pwned).py", "tests/`id`.py", "-rf.py", "a\nb.py", "../x.py")))


@fuzz
@given(selected=st.lists(selected_entry, max_size=4), runner=st.sampled_from(
    ("pytest -v", "go test -run \"$p\" ./...", "node --test \"$f\"", "npx jest \"$f\"", "make test")),
       patch_path=st.text(max_size=30))
def test_any_selected_tests_make_a_plan_whose_planting_script_is_sound_bash(tmp_path_factory, selected, runner,
                                                                          patch_path):
    """Test names and file names are data: a plan or a reason, never an exception, and a planting script that bash
    parses and that writes nowhere but the repository (names never reach the shell unquoted)."""
    task = make_task(selected, "go" if "go test" in runner else "python")
    patch = f"diff --git a/{patch_path} b/{patch_path}\n--- a/{patch_path}\n+++ b/{patch_path}\n"
    plan = canaries.plan(task, runner, patch)
    assert plan.planned or plan.reason
    script = canaries.plant_script(plan, patch)
    assert subprocess.run(["bash", "-n", "-c", script], capture_output=True).returncode == 0, script
    if plan.planned and plan.runner is not Runner.GO:
        last = [entry for entry in task.selected_test_files_to_run if entry.strip()][-1]
        assert plan.target in last and canaries._safe_path(plan.target)
        root = tmp_path_factory.mktemp("app")
        marker = root.parent / f"{root.name}-outside"
        subprocess.run(["bash", "-c", canaries.plant_script(plan, patch)], cwd=root, capture_output=True,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(marker)})
        assert not marker.exists() and not (root / "pwned").exists()
        assert sorted(p.name for p in root.iterdir()) == []  # nothing there to write into: target_missing


def test_a_plan_never_takes_its_names_from_the_patch_or_the_task():
    """Unpredictable: drawn from the system's randomness, not derived from anything a patch author knows."""
    task = make_task(["tests/test_a.py"])
    names = {c.name for _ in range(50) for c in canaries.plan(task, "pytest", "same patch").canaries}
    assert len(names) == 100
    seeded = [canaries.plan(task, "pytest", "", random.Random(7)).canaries for _ in range(2)]
    assert seeded[0] == seeded[1]  # the randomness is the only source


script_piece = st.sampled_from(("run_selected_tests() {", "}", "run_all_tests() {", "pytest -x", "go test -run '^A$'",
                                "npx mocha --grep x", "yarn test", "# pytest", "\\\n", "GO=(go test)", '"${GO[@]}"',
                                "node --test", "-k not", "\x00", "\ud800", "$(", "'", '"'))


@fuzz
@given(st.lists(st.one_of(script_piece, st.text(max_size=20)), max_size=30).map("\n".join))
def test_any_run_script_is_read_as_a_runner_or_a_reason_never_an_exception(text):
    script = read_run_script(text)
    assert (script.runner is None) == bool(script.unknown)


def test_how_canaries_are_said_on_a_task_page_and_in_evals_summary():
    from pipeline.records.evaluation import EvalResult, canary_coverage, canary_words

    planted = {"planted": True, "runner": "pytest", "target": "tests/[b]a.py", "tests": [
        {"name": "test_a", "must": "pass", "reported": ["PASSED"]}, {"name": "test_b", "must": "fail", "reported": []}]}
    none = {"planted": False, "runner": None, "reason": "run_script.sh runs no test runner swepipe knows"}
    assert canary_words(EvalResult.of({"canaries": planted}).canaries) == \
        "planted in tests/[b]a.py: test_a (must pass): PASSED; test_b (must fail): not reported"
    assert canary_words(EvalResult.of({"canaries": none}).canaries) == f"none planted: {none['reason']}"
    assert canary_words(EvalResult.of({}).canaries) is None  # scored before canaries
    results = [EvalResult.of(data) for data in ({"canaries": planted}, {"canaries": none}, {"canaries": none}, {})]
    assert canary_coverage(results) == f"canaries planted in 1 of 3 scored; none in 2: {none['reason']} (2)"
    assert canary_coverage([EvalResult.of({})]) == ""
