"""The bundled tasks are consistent, reproducible and in SWE-Bench Pro shape (no Docker needed).

scripts/bundled_check.sh is the end-to-end check (images, gold resolves, empty patch does not).
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest

from pipeline.bundled import build

TASK_DIRS = build.task_dirs()
TASK_IDS = [d.name for d in TASK_DIRS]


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def rows() -> dict[str, dict]:
    return {row["instance_id"]: row for row in build.build_rows()}


@pytest.fixture(scope="module")
def repos(tmp_path_factory) -> dict[str, tuple[Path, str, str]]:
    out = {}
    for task_dir in TASK_DIRS:
        dest = tmp_path_factory.mktemp("bundled") / task_dir.name
        base_sha, gold_sha = build.materialise_repo(task_dir, dest)
        out[task_dir.name] = (dest, base_sha, gold_sha)
    return out


def _load_parser(task_dir: Path):
    spec = importlib.util.spec_from_file_location(f"parser_{task_dir.name[-8:]}", task_dir / "parser.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _leaf(name: str, language: str) -> str:
    """The part of a test name that is the test's own name."""
    if language == "python":
        return name.split("::")[-1]
    if language == "go":
        return name.split("/")[0]
    return name.split(" | ")[-1]


def test_there_are_bundled_tasks_in_three_languages():
    languages = {build.load_task(d)["repo_language"] for d in TASK_DIRS}
    assert {"python", "go", "js"} <= languages


def test_rows_are_deterministic(rows):
    again = {row["instance_id"]: row for row in build.build_rows()}
    assert again == rows


def test_dataset_jsonl_is_up_to_date(rows):
    committed = build.DATASET_PATH.read_text(encoding="utf-8")
    assert committed == build.render_dataset(rows[i] for i in sorted(rows)), (
        "pipeline/bundled/dataset.jsonl is stale: run `python -m pipeline.bundled.build`"
    )
    for line in committed.splitlines():
        row = json.loads(line)
        assert list(row) == list(build.ROW_COLUMNS)
        for column in ("fail_to_pass", "pass_to_pass", "selected_test_files_to_run"):
            assert isinstance(row[column], list)


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_task_files_and_fields(task_id, rows):
    task_dir = build.TASKS_ROOT / task_id
    for name in ("task.yaml", "history.yaml", "gold.patch", "test.patch", "run_script.sh", "parser.py"):
        assert (task_dir / name).is_file(), name
    row = rows[task_id]
    assert re.fullmatch(r"instance_swepipe-bundled__[a-z0-9-]+-[0-9a-f]{40}", row["instance_id"])
    assert row["repo"].startswith("swepipe-bundled/")
    assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", row["dockerhub_tag"])
    assert row["dockerhub_tag"] == (f"swepipe-bundled.{row['repo'].split('/')[1]}-"
                                    f"{row['instance_id'][len('instance_'):]}")
    f2p, p2p = row["fail_to_pass"], row["pass_to_pass"]
    assert f2p and len(p2p) >= 3
    assert len(set(f2p)) == len(f2p) and len(set(p2p)) == len(p2p) and not set(f2p) & set(p2p)
    for column in ("problem_statement", "requirements", "interface"):
        assert row[column].strip()


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_base_project_is_realistic(task_id):
    task_dir = build.TASKS_ROOT / task_id
    files = build.base_files(task_dir)
    language = build.load_task(task_dir)["repo_language"]
    suffix = {"python": ".py", "go": ".go", "js": ".js", "ts": ".ts"}[language]
    sources = [f for f in files if f.endswith(suffix) and not build.is_test_path(f, language)]
    assert len(sources) >= 5
    lines = sum(len((task_dir / "base" / f).read_text(encoding="utf-8").splitlines()) for f in files)
    assert lines >= 400
    assert len(build.plan_history(task_dir)) >= 3


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_repository_layout(task_id, repos, rows):
    repo, base_sha, gold_sha = repos[task_id]
    assert rows[task_id]["base_commit"] == base_sha
    assert build.gold_sha_of(rows[task_id]) == gold_sha
    assert _git(repo, "rev-parse", "HEAD").stdout.strip() == base_sha
    assert _git(repo, "symbolic-ref", "--short", "HEAD").stdout.strip() == build.BASE_BRANCH
    assert _git(repo, "rev-parse", build.GOLD_REF).stdout.strip() == gold_sha
    assert _git(repo, "rev-parse", f"{gold_sha}^").stdout.strip() == base_sha
    assert _git(repo, "status", "--porcelain").stdout == ""
    identity = f"{build.AUTHOR_NAME}|{build.AUTHOR_EMAIL}"
    people = set(_git(repo, "log", "--all", "--format=%an|%ae%n%cn|%ce").stdout.splitlines())
    assert people == {identity}


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_before_repo_set_cmd_has_the_official_shape(task_id, rows):
    row = rows[task_id]
    lines = row["before_repo_set_cmd"].split("\n")
    base, gold = row["base_commit"], build.gold_sha_of(row)
    assert lines[:3] == [f"git reset --hard {base}", "git clean -fd ", f"git checkout {base} "]
    assert lines[-1] == f"git checkout {gold} -- " + " ".join(build.patch_paths(row["test_patch"]))


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_patches_apply_to_the_base(task_id, repos):
    repo, _, _ = repos[task_id]
    task_dir = build.TASKS_ROOT / task_id
    for name in ("gold.patch", "test.patch"):
        result = _git(repo, "apply", "--check", str((task_dir / name).resolve()))
        assert result.returncode == 0, f"{name}: {result.stderr}"


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_patches_are_split_into_source_and_tests(task_id, rows):
    row = rows[task_id]
    language = row["repo_language"]
    test_paths = build.patch_paths(row["test_patch"])
    gold_paths = build.patch_paths(row["patch"])
    assert test_paths and gold_paths
    assert all(build.is_test_path(p, language) for p in test_paths), test_paths
    assert not any(build.is_test_path(p, language) for p in gold_paths), gold_paths
    assert not build.patch_deletes(row["test_patch"])


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_selected_tests_match_the_runner(task_id, rows):
    row = rows[task_id]
    names = row["fail_to_pass"] + row["pass_to_pass"]
    selected = row["selected_test_files_to_run"]
    if row["repo_language"] == "go":
        # go: the run script turns test names into a -run pattern
        assert {n.split("/")[0] for n in names} <= set(selected)
    else:
        files = {n.split("::")[0] if row["repo_language"] == "python" else n.split(" | ")[0] for n in names}
        assert files <= set(selected)
        assert set(build.patch_paths(row["test_patch"])) <= set(selected)
    assert not any("," in s for s in selected), "selected tests are joined with commas"


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_task_text_does_not_name_hidden_tests(task_id, rows):
    row = rows[task_id]
    text = "\n".join(row[c] for c in ("problem_statement", "requirements", "interface"))
    for name in row["fail_to_pass"] + row["pass_to_pass"]:
        assert _leaf(name, row["repo_language"]) not in text, name
    for path in build.patch_paths(row["test_patch"]):
        assert path not in text and Path(path).name not in text, path


PYTEST_OUT = """\
Running test file: tests/test_a.py
tests/test_a.py::test_one PASSED                                         [ 33%]
tests/test_a.py::test_two FAILED                                         [ 66%]
tests/test_a.py::test_param[a b] SKIPPED (nope)                          [100%]
tests/test_a.py::test_three PASSED
tests/test_a.py::test_three ERROR
=========================== short test summary info ============================
PASSED tests/test_a.py::test_one
FAILED tests/test_a.py::test_two - AssertionError: boom
"""

GO_OUT = """\
=== RUN   TestA
--- PASS: TestA (0.00s)
=== RUN   TestB
=== RUN   TestB/case_1
    b_test.go:9: nope
    --- FAIL: TestB/case_1 (0.00s)
--- FAIL: TestB (0.01s)
--- SKIP: TestC (0.00s)
FAIL
"""

TAP_OUT = """\
### node --test test/a.test.js
TAP version 13
# Subtest: suite one
    # Subtest: passes
    ok 1 - passes
      ---
      duration_ms: 0.5
      ...
    # Subtest: fails
    not ok 2 - fails
      ---
      error: |-
        ok 3 - this is not a result
      ...
    # Subtest: nested
        # Subtest: deep
        ok 1 - deep
        1..1
    ok 3 - nested
      ---
      type: 'suite'
      ...
    # Subtest: later # SKIP
    ok 4 - later # SKIP
    1..4
not ok 1 - suite one
# Subtest: top level \\# 1
ok 2 - top level \\# 1
### node --test test/b.test.js
TAP version 13
# Subtest: x
ok 1 - x
"""


def _statuses(task_language: str, stdout: str) -> dict[str, str]:
    task_dir = next(d for d in TASK_DIRS if build.load_task(d)["repo_language"] == task_language)
    parser = _load_parser(task_dir)
    return {r.name: r.status.name for r in parser.parse_test_output(stdout, "")}


def test_python_parser():
    assert _statuses("python", PYTEST_OUT) == {
        "tests/test_a.py::test_one": "PASSED",
        "tests/test_a.py::test_two": "FAILED",
        "tests/test_a.py::test_param[a b]": "SKIPPED",
        "tests/test_a.py::test_three": "ERROR",
    }


def test_go_parser():
    assert _statuses("go", GO_OUT) == {"TestA": "PASSED", "TestB/case_1": "FAILED", "TestB": "FAILED",
                                       "TestC": "SKIPPED"}


def test_node_parser():
    assert _statuses("js", TAP_OUT) == {
        "test/a.test.js | suite one | passes": "PASSED",
        "test/a.test.js | suite one | fails": "FAILED",
        "test/a.test.js | suite one | nested | deep": "PASSED",
        "test/a.test.js | suite one | later": "SKIPPED",
        "test/a.test.js | top level # 1": "PASSED",
        "test/b.test.js | x": "PASSED",
    }


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_parser_writes_the_official_output_shape(task_id, tmp_path):
    parser = _load_parser(build.TASKS_ROOT / task_id)
    results = [parser.TestResult("t1", parser.TestStatus.PASSED), parser.TestResult("t2", parser.TestStatus.ERROR)]
    parser.export_to_json(results, tmp_path / "output.json")
    assert json.loads((tmp_path / "output.json").read_text()) == {
        "tests": [{"name": "t1", "status": "PASSED"}, {"name": "t2", "status": "ERROR"}]
    }


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_run_script_splits_comma_joined_arguments(task_id):
    script = (build.TASKS_ROOT / task_id / "run_script.sh").read_text()
    assert "IFS=',' read -r -a" in script and "cd /app" in script
    assert subprocess.run(["bash", "-n", str(build.TASKS_ROOT / task_id / "run_script.sh")]).returncode == 0


def test_docker_context(tmp_path):
    task_dir = TASK_DIRS[0]
    task = build.load_task(task_dir)
    build.docker_context(task_dir, tmp_path / "ctx")
    dockerfile = (tmp_path / "ctx" / "Dockerfile").read_text()
    assert dockerfile.splitlines()[1] == f"FROM {build.language_image(task['repo_language'])}"
    assert "COPY app /app" in dockerfile and "WORKDIR /app" in dockerfile
    assert (tmp_path / "ctx" / "app" / ".git").is_dir()
    assert build.image_name(task) == f"swepipe-bundled:{task['dockerhub_tag']}"
