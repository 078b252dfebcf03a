"""Ablations of the pipeline: no senior (--senior-model none), no juniors (-k 0), no principal (--principal-model
none), and the vote strategy's refusal of k = 0. Stages run for real with the scripted model through litellm, in
local clones (tests/local_opener.py); the end-to-end runs on a bundled task in Docker are at the bottom."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import demo_task
from scripted_pipeline import SUBMIT, apply_patch_command, brief_from_patch, edits_from_patch, patch_per_file
from test_run_docker import swepipe

from pipeline.errors import SwepipeError
from pipeline.juniors.pool import build_pool
from pipeline.models.ledger import Ledger
from pipeline.principal.choice import choose
from pipeline.records import Brief, Rollout
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.runtime.local import LocalRuntime
from pipeline.tasks import Task

PRICES = {"input": 1.0, "output": 2.0}
USAGE = {"prompt_tokens": 1000, "completion_tokens": 100}
FIX = "sed -i 's/a - b/a + b/' calc.py"
PRINCIPAL_EDIT = ("calc.py\n```\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n"
                  ">>>>>>> REPLACE\n```\n")


def reply(content: str) -> dict:
    return {"content": content, "usage": USAGE}


def bash(command: str) -> dict:
    return reply(f"Next.\n```bash\n{command}\n```")


def brief(candidate=None, analysis="add() subtracts; calc.py line 2 must add.") -> dict:
    record = {"analysis": analysis, "spans": [{"file": "calc.py", "start": 1, "end": 2, "reason": "add"}]}
    if candidate is not None:
        record["candidate"] = candidate
    return reply(f"```json\n{json.dumps(record)}\n```\n```bash\nsubmit\n```")


def diff(old: str, new: str) -> str:
    return (f"diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n"
            f"-    return {old}\n+    return {new}\n")


RIGHT, OTHER = diff("a - b", "a + b"), diff("a - b", "b + a")
STALE = diff("a * b", "a + b")  # its context is not in the base file: it does not apply


def pool_of(*patches_and_votes):
    records, index = [], 0
    for patch, votes in patches_and_votes:
        for _ in range(votes):
            records.append(Rollout(index=index, patch=patch, exit_reason="submitted"))
            index += 1
    return build_pool("demo__calc-1", records)


def write_run_config(directory, script: dict, **config) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "script.yaml").write_text(yaml.safe_dump(script))
    spec = {"model": f"scripted/{directory / 'script.yaml'}", "prices": PRICES}
    models = {role: dict(spec) for role in ("junior", "senior", "principal")}
    for role, model in (config.pop("models", None) or {}).items():
        models[role] = model
    (directory / "config.yaml").write_text(yaml.safe_dump({
        "models": {role: spec for role, spec in models.items() if spec is not None},
        "juniors": {"k": 2}, "limits": {"max_steps": 6}, "containers": {"impl": "local_opener:open_local"},
        **config}))


def settings_of(*typed: str) -> list:
    """The command line's ``--set PATH=VALUE`` assignments."""
    from pipeline.settings.config_overlay import parse_set

    return [parse_set(text) for text in typed]


def run_in_process(directory, repo, *typed: str):
    """One task through `swepipe run`'s own setup and task runner (``typed``: its --set assignments); its
    prediction, ledger and paths."""
    from run_sessions import request

    from pipeline.run.lifecycle import Run
    from pipeline.run.setup import resolve_config
    from pipeline.run.task import run_one_task, seeded_run_budget

    config = resolve_config(directory / "config.yaml", settings_of(*typed))
    task = demo_task(repo)
    with Run.open(request(config, "run", directory / "runs")) as run:
        settings = run.settings
        assert run.local_model is None  # no local model for a role that is switched off or not needed
        prediction = run_one_task(task, settings, seeded_run_budget(settings))
    paths = settings.layout.task(task.instance_id)
    return prediction, Ledger.read(paths.ledger), paths, settings


# -- no principal: the senior-informed top candidate -------------------------------------------------------------


def brief_naming(candidate) -> Brief:
    """A brief naming ``candidate``, read as a brief file on disk is (anything there is kept, even ``true``)."""
    brief = Brief.from_data({"candidate": candidate})
    assert isinstance(brief, Brief)
    return brief


@pytest.fixture
def workspace(leaky_repo):
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime:
        yield runtime


def test_no_principal_submits_the_candidate_the_senior_names(workspace):
    pool = pool_of((STALE, 2), (OTHER, 1), (RIGHT, 1))  # the most-voted does not even apply
    result = choose(pool, brief_naming(3), workspace)
    assert (result.source, result.candidate, result.patch) == ("senior_choice", 3, RIGHT)
    assert result.senior_choice_problem is None and result.calls == 0 and result.cost == 0.0


def test_no_principal_falls_back_to_the_most_voted_candidate_that_applies(workspace):
    pool = pool_of((STALE, 2), (OTHER, 1), (RIGHT, 1))
    # The senior's pick does not apply, names no candidate, one out of range, or garbage: the vote decides.
    for named in (1, None, 7, 0, "best", True):
        result = choose(pool, brief_naming(named), workspace)
        assert (result.source, result.candidate, result.patch) == ("junior_top", 2, OTHER), named
        assert result.senior_choice_problem, named  # why the senior's pick was not used is recorded
    assert "does not apply" in choose(pool, brief_naming(1), workspace).senior_choice_problem
    assert choose(pool, brief_naming("3"), workspace).source == "senior_choice"  # a number as text is fine


def test_no_principal_with_nothing_that_applies_submits_nothing(workspace):
    result = choose(pool_of((STALE, 3)), brief_naming(1), workspace)
    assert (result.source, result.patch) == ("none", "") and "no candidate applies" in result.error
    empty = choose(pool_of(), brief_naming(None), workspace)
    assert (empty.source, empty.patch, empty.error) == ("none", "", "no candidate")


@pytest.mark.slow
def test_principal_none_runs_without_a_principal_call_or_price(tmp_path, local_repo):
    script = {"junior": [[bash("sed -i 's/a - b/b + a/' calc.py"), bash("submit")], [bash(FIX), bash("submit")]],
              "senior": [bash("cat calc.py"), brief(candidate=2)]}
    write_run_config(tmp_path, script, models={"principal": {"model": "none"}})  # no price: it is never called
    prediction, rows, paths, settings = run_in_process(tmp_path, local_repo)
    assert prediction.source == "senior_choice" and "+    return a + b" in prediction.model_patch, prediction
    assert [r for r in rows if r.role == "principal" or r.stage == "principal"] == []
    assert prediction.cost["principal"] == 0 and prediction.models["principal"] == "none"
    result = json.loads((paths.principal / "result.json").read_text())
    assert result["calls"] == 0 and result["candidate"] == 2 and not (paths.principal / "replies.json").exists()
    assert (paths.principal / "patch.diff").read_text() == prediction.model_patch


# -- no senior: the principal gets the candidates and the code expansion -----------------------------------------


@pytest.mark.slow
def test_senior_none_makes_no_senior_call_and_the_principal_still_writes(tmp_path, local_repo):
    script = {"junior": [[bash(FIX), bash("submit")]], "senior": [brief()], "principal": [reply(PRINCIPAL_EDIT)]}
    write_run_config(tmp_path, script)
    prediction, rows, paths, settings = run_in_process(tmp_path, local_repo, "models.senior.model=none")
    assert settings.config.models["senior"].model == "none"
    assert prediction.source == "principal" and "+    return a + b" in prediction.model_patch, prediction
    assert [r for r in rows if r.role == "senior"] == [] and not (paths.senior / "trajectory.json").exists()
    assert {r.stage for r in rows} == {"junior", "principal"}
    record = json.loads((paths.senior / "brief.json").read_text())
    assert record["source"] == "expansion" and record["senior_cost"] == 0  # the code expansion is still made
    assert "calc.py" in (paths.senior / "context.md").read_text()


# -- no juniors: the senior explores alone -----------------------------------------------------------------------


@pytest.mark.slow
def test_k_zero_runs_no_junior_and_the_senior_explores_alone(tmp_path, local_repo):
    script = {"senior": [bash("grep -n 'def ' calc.py"), brief()], "principal": [reply(PRINCIPAL_EDIT)]}
    write_run_config(tmp_path, script, models={"junior": None})  # no junior model, and no local model started
    prediction, rows, paths, settings = run_in_process(tmp_path, local_repo, "juniors.k=0")
    assert prediction.source == "principal" and "+    return a + b" in prediction.model_patch, prediction
    assert [r for r in rows if r.stage == "junior"] == [] and {r.stage for r in rows} == {"senior", "principal"}
    pool = json.loads((paths.junior / "pool.json").read_text())
    assert (pool["rollouts"], pool["candidates"]) == (0, [])
    assert not list(paths.junior.glob("rollout-*.json"))
    assert settings.config.containers.cpus and settings.config.containers.memory  # sized for one container


# -- what is refused before anything is spent --------------------------------------------------------------------


def test_ablations_that_cannot_run_are_refused_with_a_clear_message(tmp_path):
    from pipeline.run.setup import resolve_config

    with pytest.raises(SwepipeError, match="vote strategy needs juniors.*-k N"):
        resolve_config(None, settings_of("strategy=vote", "juniors.k=0"))
    with pytest.raises(SwepipeError, match="juniors.k is 0 and the senior model is none"):
        resolve_config(None, settings_of("juniors.k=0", "models.senior.model=none"))
    with pytest.raises(SwepipeError, match="juniors.k is 0, no candidates are imported and the principal model"):
        resolve_config(None, settings_of("juniors.k=0", "models.principal.model=none"))
    with pytest.raises(SwepipeError, match="without its junior model.*use -k 0"):
        resolve_config(None, settings_of("models.junior.model=none"))
    with pytest.raises(SwepipeError, match="solo strategy cannot run without its solo model"):
        resolve_config(None, settings_of("strategy=solo", "models.solo.model=none"))
    with pytest.raises(SwepipeError, match="juniors.k"):
        resolve_config(None, settings_of("juniors.k=65"))
    solo = resolve_config(None, settings_of("strategy=solo", "juniors.k=0"))
    assert solo.juniors.k == 0  # solo has no juniors: k does not matter


def test_vote_with_k_zero_stops_the_command_with_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--strategy", "vote", "-k", "0",
                           "--junior-model", "scripted/x.yaml", "--runs-dir", str(tmp_path)], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, cwd=tmp_path, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 2 and "nothing to vote on" in done.stderr, done.stdout + done.stderr
    assert list(tmp_path.iterdir()) == []  # no run directory


def test_needed_roles_leave_out_what_is_switched_off():
    from pipeline.run.setup import resolve_config
    from pipeline.strategies.base import needed_roles, strategy_class

    def roles(*typed: str):
        config = resolve_config(None, settings_of(*typed))
        return needed_roles(strategy_class(config.strategy), config)

    assert roles() == ("junior", "senior", "principal")
    assert roles("models.senior.model=none") == ("junior", "principal")
    assert roles("models.principal.model=NONE") == ("junior", "senior")
    assert roles("juniors.k=0") == ("senior", "principal")


# -- end to end on a bundled task in Docker, scored with the hidden tests ----------------------------------------

def bundled(name: str) -> Task:
    from pipeline.tasks import load_tasks

    return next(t for t in load_tasks("bundled") if t.repo.split("/")[-1] == name)


def senior_brief(task: Task, candidate=None) -> dict:
    text = brief_from_patch(task.patch)
    if candidate is not None:  # the JSON block with the senior's pick added
        record = json.loads(text.split("```json\n", 1)[1].split("\n```", 1)[0])
        text = f"```json\n{json.dumps({**record, 'candidate': candidate})}\n```\n```bash\nsubmit\n```"
    return reply(text)


def e2e_config(directory, script: dict, prices=PRICES, roles=("junior", "senior", "principal"), **extra) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "script.yaml").write_text(yaml.safe_dump(script))
    config = {"models": {role: {"model": f"scripted/{directory / 'script.yaml'}", "prices": prices} for role in roles},
              "juniors": {"k": 2}, "limits": {"max_steps": 6}, **extra}
    (directory / "config.yaml").write_text(yaml.safe_dump(config))
    return directory / "config.yaml"


def task_rows(layout: RunLayout, task: Task):
    return Ledger.read(layout.task(task.instance_id).ledger)


@pytest.mark.docker
@pytest.mark.slow
def test_e2e_senior_none_resolves_and_the_report_says_it_dominates_solo(tmp_path):
    task = bundled("tinyq")
    halves = list(patch_per_file(task.patch).values())
    # The baseline: a solo agent at ten times the price that looks around and gives up.
    e2e_config(tmp_path / "solo", {"solo": [[bash("ls"), bash("git status"), SUBMIT]]},
               prices={"input": 10.0, "output": 20.0}, roles=("solo",))
    swepipe("run", "--strategy", "solo", "--instance-ids", task.instance_id, "--config", "solo/config.yaml",
            "--run-id", "solo-e2e", "--evaluate", cwd=tmp_path)
    script = {"junior": [[bash(apply_patch_command(half)), SUBMIT] for half in halves],
              "principal": [reply(edits_from_patch(task.patch))]}
    e2e_config(tmp_path / "nosenior", script, roles=("junior", "principal"))
    done = swepipe("run", "--instance-ids", task.instance_id, "--config", "nosenior/config.yaml", "--run-id",
                   "nosenior", "--senior-model", "none", "--evaluate", cwd=tmp_path)
    assert "local model" not in done.stdout  # nothing started for the senior that is switched off
    layout = RunLayout(tmp_path / "runs" / "nosenior")
    prediction = finished_predictions(layout.predictions)[task.instance_id]
    assert prediction["source"] == "principal" and prediction["resolved"] is True, prediction
    rows = task_rows(layout, task)
    assert [r for r in rows if r.role == "senior"] == [] and {r.stage for r in rows} == {"junior", "principal"}
    paths = layout.task(task.instance_id)
    assert not (paths.senior / "trajectory.json").exists()
    context = (paths.senior / "context.md").read_text()
    assert all(f"### {path}:" in context for path in patch_per_file(task.patch))  # the expansion reached both
    assert yaml.safe_load(layout.config.read_text())["models"]["senior"]["model"] == "none"

    report = swepipe("report", "runs/nosenior", "--baseline", "runs/solo-e2e", cwd=tmp_path)
    markdown = (layout.root / "report.md").read_text()
    line = lambda name: next(row for row in markdown.splitlines() if row.startswith(f"| {name}"))  # noqa: E731
    assert "dominates: +100.0 pp for $" in line("efficiency vs solo"), markdown
    assert "no senior" in line("pipeline variant") and "solo" in line("pipeline variant")
    assert "100.0% (mean over 1 task)" in line("FAIL_TO_PASS") and "0.0% (mean over 1 task)" in line("FAIL_TO_PASS")
    ratio = line("$/task vs solo").split("|")[3].strip()
    assert ratio.startswith("0.") and ratio.endswith(")")  # a fraction of the baseline's cost
    assert "dominates" in report.stdout


@pytest.mark.docker
@pytest.mark.slow
def test_e2e_principal_none_submits_the_senior_choice_without_a_principal_call(tmp_path):
    task = bundled("tinyq")
    halves = list(patch_per_file(task.patch).values())
    # Rollout 0 fixes one file (candidate 1: the vote's pick), rollout 1 the whole bug (candidate 2).
    script = {"junior": [[bash(apply_patch_command(patch)), SUBMIT] for patch in (halves[0], task.patch)],
              "senior": [bash("git grep -n 'def ' -- '*.py' | head -40"), senior_brief(task, candidate=2)]}
    e2e_config(tmp_path, script, roles=("junior", "senior"))
    swepipe("run", "--instance-ids", task.instance_id, "--config", "config.yaml", "--run-id", "noprincipal",
            "--principal-model", "none", "--evaluate", cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / "noprincipal")
    prediction = finished_predictions(layout.predictions)[task.instance_id]
    assert prediction["source"] == "senior_choice" and prediction["resolved"] is True, prediction
    assert [r for r in task_rows(layout, task) if r.stage == "principal" or r.role == "principal"] == []
    assert prediction["cost"]["principal"] == 0
    result = json.loads((layout.task(task.instance_id).principal / "result.json").read_text())
    assert result["calls"] == 0 and result["candidate"] == 2


@pytest.mark.docker
@pytest.mark.slow
def test_e2e_k_zero_the_senior_explores_alone_and_the_principal_resolves(tmp_path):
    task = bundled("tinyq")
    script = {"senior": [bash("git grep -n 'def ' -- '*.py' | head -40"), senior_brief(task)],
              "principal": [reply(edits_from_patch(task.patch))]}
    e2e_config(tmp_path, script, roles=("senior", "principal"))
    done = swepipe("run", "--instance-ids", task.instance_id, "--config", "config.yaml", "--run-id", "nojuniors",
                   "-k", "0", "--evaluate", cwd=tmp_path)
    assert "local model" not in done.stdout
    layout = RunLayout(tmp_path / "runs" / "nojuniors")
    prediction = finished_predictions(layout.predictions)[task.instance_id]
    assert prediction["source"] == "principal" and prediction["resolved"] is True, prediction
    rows = task_rows(layout, task)
    assert {r.stage for r in rows} == {"senior", "principal"} and len([r for r in rows if r.stage == "senior"]) == 2
    brief_record = json.loads((layout.task(task.instance_id).senior / "brief.json").read_text())
    assert brief_record["source"] == "senior"
    swepipe("report", "runs/nojuniors", cwd=tmp_path)
    assert "no juniors (k=0)" in (layout.root / "report.md").read_text()
