"""The principal stage: the candidates it is shown, the files around the code, request.json, real replies."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import git
from scripted_pipeline import SUBMIT, bash, brief_from_patch, edits_from_patch, patch_per_file, reply

from pipeline.juniors.pool import build_pool
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.models.ledger import Ledger
from pipeline.principal.stage import nearby_files, run_principal, select_candidates
from pipeline.records import Brief, Rollout
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.runtime.local import LocalRuntime
from pipeline.settings.config import PrincipalConfig
from pipeline.settings.model_spec import ModelSpec, Prices
from pipeline.tasks import Task, load_tasks
from pipeline.tasks.datasets import BUNDLED_TASKS_DIR

TESTS = Path(__file__).resolve().parent
SECRET = "sk-ant-api03-principal-test-secret-0123456789abcdef"


def diff(path: str, old: str, new: str) -> str:
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,2 +1,2 @@\n-{old}\n+{new}\n ctx\n"


def words(text: str) -> int:
    """A token counter that is not the default one, to see that the stage uses the one it is given."""
    return len(text.split())


def pool_of(*rollouts: tuple[str, str]):
    """A pool from (patch, exit reason) rollouts, in rollout order."""
    return build_pool("t", [Rollout(index=n, patch=patch, exit_reason=reason)
                            for n, (patch, reason) in enumerate(rollouts)])


# ---------------------------------------------------------------- the candidates shown


def test_candidates_most_voted_first_with_votes_files_and_how_their_rollouts_ended():
    fix, other = diff("pkg/a.py", "x = 1", "x = 2"), diff("pkg/b.py", "y = 1", "y = 2")
    pool = pool_of((other, "submitted"), (fix, "submitted"), (fix, "step_limit"), (fix, "submitted"))
    shown = select_candidates(pool, PrincipalConfig(), words)
    first, second = shown.text.index("## Candidate 1:"), shown.text.index("## Candidate 2:")
    assert first < second
    assert "## Candidate 1: 3 votes; changes pkg/a.py; 3 rollouts: submitted x2, step_limit" in shown.text
    assert "## Candidate 2: 1 vote; changes pkg/b.py; 1 rollout: submitted" in shown.text
    assert "+x = 2" in shown.text[first:second] and "+y = 2" in shown.text[second:]
    assert "unverified" in shown.text.lower() or "none of them is verified" in shown.text.lower()
    assert shown.shown == [1, 2] and shown.over_budget == shown.over_count == shown.cut == []
    assert 0 < shown.tokens < words(shown.text)  # the candidates counted with the counter given, not the preamble


def test_show_candidates_zero_shows_none_and_a_count_names_the_rest():
    pool = pool_of((diff("a.py", "1", "2"), "submitted"), (diff("b.py", "1", "2"), "submitted"),
                   (diff("c.py", "1", "2"), "cost_limit"))
    assert select_candidates(pool, PrincipalConfig(show_candidates=0), words).text == ""
    one = select_candidates(pool, PrincipalConfig(show_candidates=1), words)
    assert one.shown == [1] and one.over_count == [2, 3]
    assert "Candidate 2 (1 vote; b.py): over principal.show_candidates" in one.text
    assert "Candidate 3 (1 vote; c.py): over principal.show_candidates" in one.text
    assert "+2" in one.text and "diff --git a/b.py" not in one.text
    assert select_candidates(build_pool("t", []), PrincipalConfig(), words).text == ""  # no candidate at all


def test_candidates_over_the_budget_are_named_and_one_bigger_than_the_budget_is_cut():
    lines = "".join(f"+value_{n} = compute({n}) + offset\n" for n in range(300))
    huge = f"diff --git a/big.py b/big.py\n--- a/big.py\n+++ b/big.py\n@@ -1 +1,300 @@\n-x\n{lines}"
    small = diff("small.py", "a", "b")
    pool = pool_of((huge, "submitted"), (huge, "submitted"), (small, "submitted"))
    settings = PrincipalConfig(candidate_tokens=400)
    shown = select_candidates(pool, settings, words)
    assert shown.shown == [1] and shown.cut == [1] and shown.over_budget == [2]
    assert shown.tokens <= 400
    assert "+value_0 = compute(0)" in shown.text and "+value_299" not in shown.text
    assert "[Cut: the first " in shown.text and "over the candidates' token budget" in shown.text
    assert "Candidate 2 (1 vote; small.py): over the candidates' token budget" in shown.text

    # The small one first (more votes): it is shown whole, the big one gets what is left.
    pool = pool_of((small, "submitted"), (small, "submitted"), (huge, "step_limit"))
    shown = select_candidates(pool, settings, words)
    assert shown.shown == [1, 2] and shown.cut == [2] and shown.tokens <= 400
    # Nothing of a candidate fits: it is named, not shown half.
    shown = select_candidates(pool, settings, lambda text: 10_000)
    assert shown.shown == [] and shown.over_budget == [1, 2] and "Not shown (2)" in shown.text


def test_a_candidate_patch_holding_a_fence_gets_a_longer_fence():
    doc = ("diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1,3 +1,3 @@\n ```sh\n"
           "-make\n+make all\n ```\n")
    text = select_candidates(pool_of((doc, "submitted")), PrincipalConfig(), words).text
    assert "````diff\n" in text and text.rstrip().endswith("````")


# ---------------------------------------------------------------- the files around the code


REPO_FILES = ["README.md", "setup.py", "pkg/__init__.py", "pkg/core.py", "pkg/util.py", "pkg/io/__init__.py",
              "pkg/io/read.py", "pkg/io/formats/csv.py", "pkg/io/formats/json.py", "docs/index.md",
              "tests/test_core.py"]


def test_nearby_files_lists_siblings_and_one_level_down():
    text = nearby_files(REPO_FILES, ["pkg/core.py", "pkg/core.py"])
    assert text.splitlines() == ["pkg/", "  __init__.py", "  core.py", "  util.py",
                                 "pkg/io/", "  __init__.py", "  read.py", "  formats/ (2 files)"]


def test_nearby_files_of_a_new_folder_lists_its_nearest_existing_ancestor_and_the_root():
    text = nearby_files(REPO_FILES, ["pkg/io/parsers/new.py", "/app/setup.py", "nowhere/deep/x.py"])
    assert text.startswith("pkg/io/\n  __init__.py\n  read.py\n")
    assert "pkg/io/formats/\n  csv.py\n  json.py" in text
    assert "(repository root)/\n  README.md\n  setup.py" in text and "tests/\n  test_core.py" in text
    assert nearby_files([], ["a.py"]) == ""


def test_nearby_files_is_bounded_and_names_what_it_cut():
    files = [f"big/f{n:03}.py" for n in range(120)] + [f"big/sub{n}/x.py" for n in range(30)]
    text = nearby_files(files, ["big/f000.py"], max_files=50, per_directory=40)
    lines = text.splitlines()
    assert sum(1 for line in lines if line.startswith("  f")) == 40
    assert "  ... and 80 more files in this folder, not listed" in lines
    assert "big/sub17/\n  x.py" in text  # ten folders below, one file each, fill the 50
    assert lines[-1] == ("(The listing stops at 50 files; folders not listed: big/sub18/, big/sub19/, big/sub2/, "
                         "big/sub20/, big/sub21/, big/sub22/, big/sub23/, big/sub24/, big/sub25/, big/sub26/ and 10 "
                         "more.)")


def test_nearby_files_lists_every_touched_folder_before_the_folders_below_them():
    files = [f"a/sub{n}/x.py" for n in range(20)] + ["a/one.py", "b/two.py"]
    text = nearby_files(files, ["a/one.py", "b/two.py"], max_files=5)
    assert text.startswith("a/\n  one.py\n") and "b/\n  two.py\n" in text


# ---------------------------------------------------------------- the stage in a checkout


@pytest.fixture
def workspace(leaky_repo):
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime:
        yield runtime


def demo_task(statement: str = "add() subtracts instead of adding.") -> Task:
    return Task(instance_id="demo__calc-1", repo="demo/calc", base_commit="0" * 40, problem_statement=statement,
                repo_language="python", fail_to_pass=["test_add"], pass_to_pass=[], selected_test_files_to_run=[],
                before_repo_set_cmd="", dockerhub_tag="unused")


CALC_FIX = ("diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n"
            "-    return a - b\n+    return a + b\n")
BRIEF = {"analysis": "add() uses the wrong operator.", "context": "### calc.py:1-2\n```\n1 | def add(a, b):\n"
         "2 |     return a - b\n```\n", "context_spans": [{"file": "calc.py", "start": 1, "end": 2}]}


def principal(tmp_path, workspace, replies, pool, statement="add() subtracts instead of adding.",
              directory=None, settings=None, brief=None, ledger=None, script=None):
    script = script or tmp_path / f"principal-{len(list(tmp_path.glob('principal-*.yaml')))}.yaml"
    script.write_text(yaml.safe_dump({"principal": replies}))
    client = ModelClient(ModelSpec(model=f"scripted/{script}", prices=Prices(input=1.0, output=2.0)), "principal",
                         ledger or Ledger(tmp_path / "ledger.jsonl"), task="t", scope=str(script),
                         backoff_base=0.001)
    directory = directory or tmp_path / "principal"
    read = Brief.from_data(brief or BRIEF)  # as a brief file is read: a hostile pick is kept as it is
    assert isinstance(read, Brief), read
    result = run_principal(demo_task(statement), read, pool, client, Budget("task"), workspace,
                           settings or PrincipalConfig(), directory, words)
    return result, directory


def test_request_json_holds_every_call_before_it_is_made_and_no_secret(tmp_path, workspace, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    pool = pool_of((CALC_FIX, "submitted"), (CALC_FIX, "step_limit"))
    # The first reply has no edit; the retry's call is refused: no reply, but it was sent.
    result, directory = principal(tmp_path, workspace, ["I would fix the operator.", {"error": "bad_request"}], pool,
                                  statement=f"add() subtracts. (Our key, pasted by mistake: {SECRET})")
    assert result.calls == 1 and "principal call failed" in result.error
    assert result.source == "fallback:junior_top" and result.candidates.shown == [1]
    raw = (directory / "request.json").read_text()
    assert SECRET not in raw and "[redacted]" in raw
    calls = json.loads(raw)["calls"]
    assert [call["attempt"] for call in calls] == [1, 2]
    first, second = (call["messages"] for call in calls)
    assert [m["role"] for m in first] == ["system", "user"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[:2] == first and second[2]["content"] == "I would fix the operator."
    assert "Your edits could not be used" in second[3]["content"]
    user = first[1]["content"]
    assert "## Candidate 1: 2 votes; changes calc.py; 2 rollouts: submitted, step_limit" in user
    assert "+    return a + b" in user and "add() uses the wrong operator." in user
    assert "<repository_files>" in user and "  calc.py" in user and "  README" in user
    assert "DELETE path/to/file" in first[0]["content"]  # the format, deletion included


@pytest.mark.parametrize(("pick", "said"), [(1, "judged Candidate 1 right"), (2, "judged Candidate 2 (not shown"),
                                            (None, None), ("1", None), (0, None), (3, None), (True, None)])
def test_the_senior_s_pick_is_named_when_it_is_a_candidate(tmp_path, workspace, pick, said):
    pool = pool_of((CALC_FIX, "submitted"), (CALC_FIX, "submitted"), (diff("README", "calc", "x"), "submitted"))
    _, directory = principal(tmp_path, workspace, ["no edits"] * 2, pool, brief={**BRIEF, "candidate": pick},
                             settings=PrincipalConfig(show_candidates=1))
    user = json.loads((directory / "request.json").read_text())["calls"][0]["messages"][1]["content"]
    assert ("The senior engineer judged" in user) == (said is not None)
    assert said is None or said in user


def test_a_resumed_principal_reuses_the_reply_and_keeps_the_request_as_sent(tmp_path, workspace):
    pool = pool_of((CALC_FIX, "submitted"))
    edit = "calc.py\n```\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n```\n"
    result, directory = principal(tmp_path, workspace, [edit], pool)
    assert result.source == "principal" and "+    return a + b" in result.patch
    sent = (directory / "request.json").read_text()
    # Rerun (a resumed session): the reply is reused, no call is made (the script would fail), nothing rewritten.
    again, _ = principal(tmp_path, workspace, [{"error": "bad_request"}], pool, directory=directory,
                         settings=PrincipalConfig(show_candidates=0))
    assert again.patch == result.patch and again.calls == 1
    assert (directory / "request.json").read_text() == sent


def test_a_principal_killed_after_paying_for_its_reply_does_not_pay_again(tmp_path, workspace):
    """The process dies once the reply's ledger row is written, before replies.json has the reply."""
    from test_agent_loop import DyingLedger, Killed

    pool = pool_of((CALC_FIX, "submitted"))
    edit = "calc.py\n```\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n```\n"
    script = tmp_path / "principal.yaml"  # one model for both sessions
    with pytest.raises(Killed):
        principal(tmp_path, workspace, [edit], pool, ledger=DyingLedger(tmp_path / "ledger.jsonl", 1, True),
                  script=script)
    directory = tmp_path / "principal"
    assert not (directory / "replies.json").exists()
    # Resumed: the same conversation position; a new call would add a ledger row.
    again, _ = principal(tmp_path, workspace, [edit], pool, directory=directory, script=script)
    assert again.source == "principal" and "+    return a + b" in again.patch
    assert len(Ledger.read(tmp_path / "ledger.jsonl")) == 1 and not (directory / "reply.journal").exists()


def test_a_real_reply_with_line_numbers_an_app_path_and_a_deletion_becomes_a_clean_diff(tmp_path, workspace):
    reply_text = ("The operator is wrong, and the README is obsolete.\n\n"
                  "/app/calc.py\n```python\n<<<<<<< SEARCH\n1 | def add(a, b):\n2 |     return a - b\n=======\n"
                  "1 | def add(a, b):\n2 |     return a + b\n>>>>>>> REPLACE\n```\n\nDELETE README\n")
    result, _ = principal(tmp_path, workspace, [reply_text], pool_of((CALC_FIX, "submitted")))
    assert result.source == "principal" and result.failed_attempts == []
    patch = result.patch
    assert "deleted file mode" in patch and "--- a/README" in patch
    assert "-    return a - b\n+    return a + b\n" in patch and "1 |" not in patch
    assert workspace.run(f"git apply --check - <<'EOF'\n{patch}EOF").ok


# ---------------------------------------------------------------- a bundled task, end to end


@pytest.mark.slow
def test_bundled_task_request_holds_the_candidates_with_their_votes(tmp_path):
    """tinyq through `swepipe run` (scripted models, the local runtime on a clone of the task's base files): the
    two juniors each fix one file; request.json shows the principal both diffs with their votes; the principal's
    reply, with /app and a/ paths, resolves to the gold patch."""
    task = next(t for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))
    task_dir = BUNDLED_TASKS_DIR / task.instance_id
    repo = tmp_path / "repo"
    shutil.copytree(task_dir / "base", repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")

    halves = patch_per_file(task.patch)
    blocks = []
    for n, (path, part) in enumerate(halves.items()):
        shown = f"/app/{path}" if n == 0 else f"a/{path}"  # paths as real models write them
        blocks.append(edits_from_patch(part).split("\n\n", 1)[1].replace(f"{path}\n```", f"{shown}\n```", 1))
    # Through stdin: the local runtime's /tmp is the host's, shared by the rollouts running at once.
    script = {"junior": [[bash(f"git apply <<'SWEPIPE_PATCH'\n{part}SWEPIPE_PATCH"), SUBMIT]
                         for part in halves.values()],
              "senior": [bash("ls"), reply(brief_from_patch(task.patch))],
              "principal": [reply("Both halves are needed.\n\n" + "\n".join(blocks))]}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    spec = {"model": f"scripted/{tmp_path / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "models": {role: spec for role in ("junior", "senior", "principal")}, "juniors": {"k": 2},
        "limits": {"max_steps": 6}, "containers": {"impl": "local_opener:open_local"}}))
    env = {**os.environ, "SWEPIPE_TEST_REPO": str(repo), "SWEPIPE_TEST_BASE": base,
           "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", task.instance_id,
                           "--config", "config.yaml", "--run-id", "shown"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    layout = RunLayout(tmp_path / "runs" / "shown")
    paths = layout.task(task.instance_id)
    pool = json.loads((paths.junior / "pool.json").read_text())
    assert [c["votes"] for c in pool["candidates"]] == [1, 1]
    calls = json.loads((paths.principal / "request.json").read_text())["calls"]
    assert len(calls) == 1
    user = calls[0]["messages"][1]["content"]
    for number, candidate in enumerate(pool["candidates"], start=1):
        header = f"## Candidate {number}: 1 vote; changes {', '.join(candidate['files'])}; 1 rollout: submitted"
        assert header in user
        assert candidate["patch"].strip() in user  # the candidate's diff, whole
    assert "<repository_files>" in user and "tinyq/\n" in user and "  worker.py" in user
    prediction = finished_predictions(layout.predictions)[task.instance_id]
    assert prediction["source"] == "principal"
    assert {f for f in patch_per_file(prediction["model_patch"])} == set(halves)
    assert [line for line in prediction["model_patch"].splitlines() if line.startswith(("+", "-"))] == \
        [line for line in task.patch.splitlines() if line.startswith(("+", "-"))]
