"""`swepipe coverage RUN --senior-at`: the senior replayed on the first k rollouts of a scripted run (local clones
through tests/local_opener.py), paid into the ledger as stage 'analysis', resumable, drawn as the third curve."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import git
from scripted_pipeline import SUBMIT, bash, brief_from_patch, edits_from_patch, reply

from pipeline.analysis.coverage import run_coverage
from pipeline.analysis.load import load_run
from pipeline.models.ledger import Ledger
from pipeline.rundir.layout import RunLayout
from pipeline.tasks import Task

TESTS = Path(__file__).parent
A = "def helper(x):\n    return x * 2\n\n\n" + "".join(f"# note {n}\n" for n in range(20)) + \
    "\n\ndef area(w, h):\n    return w + h\n"
B = "import os\n\n\n" + "".join(f"# remark {n}\n" for n in range(30)) + "\n\ndef name(n):\n    return 'x' - n\n"
A_FIXED = A.replace("return w + h", "return w * h")
B_FIXED = B.replace("return 'x' - n", "return 'x' + n")


@pytest.fixture
def project(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "a.py").write_text(A)
    (repo / "pkg" / "b.py").write_text(B)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "pkg" / "a.py").write_text(A_FIXED)
    (repo / "pkg" / "b.py").write_text(B_FIXED)
    gold = git(repo, "diff")
    halves = [git(repo, "diff", "--", path) + "\n" for path in ("pkg/a.py", "pkg/b.py")]
    git(repo, "checkout", "-q", "--", ".")
    task = Task(instance_id="demo__shapes-1", repo="demo/shapes", base_commit=base, patch=gold + "\n",
                problem_statement="area() adds and name() subtracts.", repo_language="python",
                fail_to_pass=["test_area"], pass_to_pass=[], selected_test_files_to_run=[], before_repo_set_cmd="",
                dockerhub_tag="unused")
    (tmp_path / "tasks.jsonl").write_text(json.dumps(task.to_row()) + "\n")
    usage = {"prompt_tokens": 1000, "completion_tokens": 100}
    script = {"junior": [[bash(apply(halves[0], tmp_path / "a.diff")), SUBMIT],  # rollout 0 fixes a.py,
                         [bash(apply(halves[1], tmp_path / "b.diff")), SUBMIT],  # 1 fixes b.py, 2 gives up
                         [SUBMIT]],
              "senior": [bash("grep -n 'def ' pkg/*.py"), reply(brief_from_patch(task.patch), usage)],
              "principal": [reply(edits_from_patch(task.patch))]}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    spec = {"model": f"scripted/{tmp_path / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "models": {role: spec for role in ("junior", "senior", "principal")}, "juniors": {"k": 3},
        "limits": {"max_steps": 6}, "containers": {"impl": "local_opener:open_local"}}))
    env = {**os.environ, "SWEPIPE_TEST_REPO": str(repo), "SWEPIPE_TEST_BASE": base, "COLUMNS": "250",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    return {"dir": tmp_path, "task": task, "env": env}


def apply(patch: str, path: Path) -> str:
    """Apply ``patch`` from a file of its own: local clones share the host's /tmp."""
    return f"cat > {path} <<'SWEPIPE_PATCH'\n{patch}SWEPIPE_PATCH\ngit apply {path} && git status --short"


def swepipe(project, *args, check=True):
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=project["dir"], env=project["env"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    if check:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def analysis_rows(paths):
    return [row for row in Ledger.read(paths.ledger) if row.stage == "analysis"]


@pytest.mark.slow
def test_senior_at_runs_the_senior_on_the_first_k_rollouts_once_and_draws_its_curve(project):
    swepipe(project, "run", "--dataset", "tasks.jsonl", "--config", "config.yaml", "--run-id", "senior-at")
    run = project["dir"] / "runs" / "senior-at"
    paths = RunLayout(run).task(project["task"].instance_id)
    run_rows = Ledger.read(paths.ledger)
    assert analysis_rows(paths) == [] and (paths.senior / "expansion_text.json").is_file()

    done = swepipe(project, "coverage", str(run), "--dataset", "tasks.jsonl", "--senior-at", "1,2,3,5",
                   "--output", str(project["dir"] / "out"))
    out = done.stdout
    assert "demo__shapes-1 k=5: skipped, the task has K=3 rollouts" in out
    assert "demo__shapes-1 k=1/3: brief from the senior" in out and "demo__shapes-1 k=2/3: brief from the senior" in out
    assert "2 run now, 1 already there, 0 without a brief" in out  # k=3 is the run's own brief
    for k in (1, 2):
        brief = json.loads((paths.root / "analysis" / f"senior-at-{k:02d}" / "brief.json").read_text())
        assert brief["source"] == "senior" and brief["analysis"]["rollouts"] == list(range(k))
    assert not (paths.root / "analysis" / "senior-at-03").exists()
    # Paid: two senior conversations of two calls each, in the task's ledger as stage 'analysis'.
    rows = analysis_rows(paths)
    assert len(rows) == 4 and {r.role for r in rows} == {"senior"} and all(r.cost > 0 for r in rows)
    assert Ledger.read(paths.ledger)[:len(run_rows)] == run_rows
    assert f"${sum(r.cost for r in rows):.4f} spent (ledger stage 'analysis')" in out
    assert (project["dir"] / "out" / "figures" / "coverage-senior-at.png").read_bytes()[:4] == b"\x89PNG"

    # The senior's curve: at k=1 the pool holds only a.py's fix, and the senior's spans reach b.py too.
    result = run_coverage(load_run(run), {project["task"].instance_id: project["task"].patch})
    (task,) = result.tasks
    assert sorted(task.senior) == [1, 2, 3]
    assert task.senior[1].removed == 1.0 and task.senior[1].files == 1.0
    assert task.paired[1].removed == 0.5  # a.py's line only: b.py is not in a.py's expansion
    assert "rm: +senior" in out and "(+50.0 pp, 1)" in out

    # A second invocation pays nothing.
    again = swepipe(project, "coverage", str(run), "--dataset", "tasks.jsonl", "--senior-at", "1,2,3")
    assert "0 run now, 3 already there" in again.stdout and "$0.0000 spent" in again.stdout
    assert len(analysis_rows(paths)) == 4


def test_senior_at_refuses_bad_pool_sizes(project):
    (project["dir"] / "runs" / "senior-at").mkdir(parents=True)
    done = swepipe(project, "coverage", "runs/r", "--dataset", "tasks.jsonl", "--senior-at", "1,two", check=False)
    assert done.returncode == 2 and "'two' is not a pool size" in done.stderr


@pytest.mark.slow
def test_a_senior_the_budget_stopped_goes_on_from_its_trajectory_when_rerun(project):
    """The first senior call fits the (task, k) budget, the second (after a long observation) does not: no brief
    is saved. A rerun with a bigger budget goes on from the saved trajectory: the first reply is not paid again."""
    swepipe(project, "run", "--dataset", "tasks.jsonl", "--config", "config.yaml", "--run-id", "senior-at")
    run = project["dir"] / "runs" / "senior-at"
    paths = RunLayout(run).task(project["task"].instance_id)
    script = yaml.safe_load((project["dir"] / "script.yaml").read_text())
    script["senior"] = [bash("seq 1 50000"), reply(brief_from_patch(project["task"].patch))]  # ~290 kB seen
    (project["dir"] / "script.yaml").write_text(yaml.safe_dump(script))
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["limits"]["observation_limit"] = 400_000  # so the second call's prompt (and worst case) is ~10x the first's

    def coverage_with(per_task):
        config["budgets"]["per_task"] = per_task
        (run / "config.yaml").write_text(yaml.safe_dump(config))
        return swepipe(project, "coverage", str(run), "--dataset", "tasks.jsonl", "--senior-at", "1")

    coverage_with(0.03)
    directory = paths.root / "analysis" / "senior-at-01"
    first = analysis_rows(paths)
    assert [r.error for r in first] == [None] and not (directory / "brief.json").exists()
    assert json.loads((directory / "trajectory.json").read_text())["exit_reason"] == "cost_limit"

    done = coverage_with(1.0)
    assert "1 run now" in done.stdout
    rows = analysis_rows(paths)
    assert rows[:1] == first and len(rows) == 2 and rows[1].error is None  # one new call: the brief
    brief = json.loads((directory / "brief.json").read_text())
    assert brief["source"] == "senior" and brief["senior_steps"] == 2
