"""ATIF in: Harbor's and OpenHands' trajectories (tests/atif_fixtures.py) replayed with `swepipe replay` and pooled
with `run --juniors-from`, in a local clone (tests/local_opener.py); malformed files refused naming the file and the
step, never a crash. The same in the task's image, and swepipe's own export replayed, are tests/test_atif_docker.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from atif_fixtures import SUBMIT_COMMAND, harbor_mini_trial, openhands_trajectory
from conftest import demo_task
from fuzzing import fuzz
from hostile import hostile_text, json_scalar
from hypothesis import given
from hypothesis import strategies as st
from scripted_pipeline import brief_from_patch, edits_from_patch, reply
from test_replay import FIX, recorded_diff, replay
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.interop.recorded import NotReplayable
from pipeline.interop.trajectory_formats import read_trajectory_file
from pipeline.models.ledger import Ledger
from pipeline.records import Pool, ReplayResult, Rollout, read_predictions, read_trajectory
from pipeline.rundir.layout import RunLayout


@pytest.fixture
def atif_setup(tmp_path, local_repo):
    """A task in a local clone, as test_replay's replay_setup: its dataset, config and runs folder."""
    task = demo_task(local_repo)
    dataset = tmp_path / "tasks.jsonl"
    dataset.write_text(task.model_dump_json() + "\n")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"containers": {"impl": "local_opener:open_local"}}))
    return {"task": task, "dataset": dataset, "config": config, "runs": tmp_path / "runs", "repo": local_repo}


EDIT = {"command": "str_replace", "path": "/testbed/calc.py", "old_str": "    return a - b",
        "new_str": "    return a + b"}


def harbor(setup, tmp_path: Path) -> Path:
    submission = recorded_diff(setup["repo"]["path"], setup["repo"]["base"], [FIX], tmp_path)
    return harbor_mini_trial(tmp_path / "harbor-job", setup["task"].instance_id,
                             [("cat /testbed/calc.py", "def add(a, b):\n    return a - b\n"), (FIX, "")], submission)


def openhands(setup, tmp_path: Path, calls=None) -> Path:
    submission = recorded_diff(setup["repo"]["path"], setup["repo"]["base"], [FIX], tmp_path / "oh")
    calls = calls or [("Let me look.", "execute_bash", {"command": "cat /testbed/calc.py", "is_input": "false"},
                       "def add(a, b):\n    return a - b\n[The command completed with exit code 0.]"),
                      ("", "think", {"thought": "The sign is wrong."}, "Your thought has been logged."),
                      ("Fix it.", "str_replace_editor", EDIT, "The file /testbed/calc.py has been edited."),
                      ("Done.", "finish", {"message": "Fixed add()."}, None)]
    return openhands_trajectory(tmp_path / "openhands" / "output.json", setup["task"].instance_id, calls,
                                submission)


def test_a_harbor_trial_replays_to_the_diff_its_submit_printed_at_no_cost(atif_setup, tmp_path):
    setup, task = atif_setup, atif_setup["task"]
    source = harbor(setup, tmp_path)
    recorded = read_trajectory_file(source)
    assert recorded.format == "atif" and recorded.instance_id == task.instance_id  # from <trial>/result.json
    assert recorded.resolved is True and recorded.cost == pytest.approx(0.006) and recorded.repo_root == "/testbed"
    assert [step.call["name"] for step in recorded.steps] == ["bash", "bash", "submit"]

    result, layout = replay(setup, tmp_path / "harbor-job")
    assert result.exit_code == 0, result.output
    replayed = ReplayResult.read(layout.task(task.instance_id).replay_files.result)
    assert isinstance(replayed, ReplayResult), result.output
    assert replayed.source_format == "atif" and replayed.patch_identical is True, replayed
    assert replayed.recorded_cost == pytest.approx(0.006) and replayed.replayed_steps == 3
    assert "return a + b" in read_predictions(layout.predictions).records[task.instance_id].model_patch
    assert all(row.cost == 0 for row in Ledger.read(layout.task(task.instance_id).ledger))


def test_an_openhands_trajectory_replays_its_editor_and_bash_calls_to_its_git_patch(atif_setup, tmp_path):
    setup, task = atif_setup, atif_setup["task"]
    source = openhands(setup, tmp_path)
    recorded = read_trajectory_file(source)
    assert [step.call["name"] for step in recorded.steps] == ["bash", "str_replace_editor", "submit"]
    assert any("'think' call changes nothing" in note for note in recorded.notes)
    result, layout = replay(setup, source)
    assert result.exit_code == 0, result.output
    replayed = ReplayResult.read(layout.task(task.instance_id).replay_files.result)
    assert replayed.patch_identical is True and replayed.recorded_cost == pytest.approx(0.012), replayed
    assert "/testbed mapped to" in " ".join(replayed.notes)


def test_a_tool_no_swepipe_tool_stands_for_is_refused_naming_the_tool_and_the_step(atif_setup, tmp_path):
    setup = atif_setup
    source = openhands(setup, tmp_path, [("Browse.", "browser", {"code": "goto('http://x')"}, "page"),
                                         ("Done.", "finish", {}, None)])
    with pytest.raises(NotReplayable, match=r"output\.json: step 3 calls the tool 'browser', which no swepipe tool"):
        read_trajectory_file(source)
    result, layout = replay(setup, source)
    assert "not replayable" in result.output and "'browser'" in result.output


def test_retrieval_audit_and_the_task_rule_apply_to_atif_as_to_the_other_formats(atif_setup, tmp_path):
    setup, task = atif_setup, atif_setup["task"]
    source = openhands(setup, tmp_path, [("Peek.", "execute_bash", {"command": "git log --all --oneline"}, ""),
                                         ("Fix it.", "str_replace_editor", EDIT, "edited"),
                                         ("Done.", "finish", {}, None)])
    result, layout = replay(setup, source)
    assert result.exit_code == 0, result.output
    replayed = ReplayResult.read(layout.task(task.instance_id).replay_files.result)
    assert [(f.kind, f.step) for f in replayed.retrieval] == [("history", 1)]
    named = tmp_path / "named" / "other__task-9.traj.json"  # a file named for one task that records another
    named.parent.mkdir()
    named.write_text(source.read_text())
    with pytest.raises(NotReplayable, match="is named for task 'other__task-9' but records task 'demo__calc-1'"):
        read_trajectory_file(named)


def test_harbor_and_openhands_trajectories_pool_with_juniors_from(atif_setup, tmp_path, monkeypatch):
    setup, task = atif_setup, atif_setup["task"]
    harbor(setup, tmp_path)
    openhands(setup, tmp_path)
    patch = read_trajectory_file(next((tmp_path / "harbor-job").rglob("trajectory.json"))).submission
    script = {"senior": [reply(brief_from_patch(patch))], "principal": [reply(edits_from_patch(patch))]}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    spec = {"model": f"scripted/{tmp_path / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "models": {"senior": spec, "principal": spec}, "juniors": {"k": 0},
        "containers": {"impl": "local_opener:open_local"}}))
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(app, ["run", "--dataset", str(setup["dataset"]), "--config", "config.yaml",
                                    "--runs-dir", "runs", "--run-id", "pooled", "--juniors-from", "harbor-job",
                                    "--juniors-from", "openhands"], env={"COLUMNS": "250"})
    assert done.exit_code == 0, done.output
    paths = RunLayout(tmp_path / "runs" / "pooled").task(task.instance_id)
    rollouts = [Rollout.load(paths.junior_files.rollout(index)) for index in range(2)]
    assert [r.patch for r in rollouts] == [patch, patch] and [r.imported_cost for r in rollouts] == \
        [pytest.approx(0.006), pytest.approx(0.012)]
    assert [r.retrieval for r in rollouts] == [[], []]  # audited, nothing found
    pool = Pool.read(paths.junior_files.pool)
    assert pool.rollouts == 2 and [c.votes for c in pool.candidates] == [2]
    assert "return a + b" in read_predictions(RunLayout(tmp_path / "runs" / "pooled").predictions) \
        .records[task.instance_id].model_patch


# -- hostile input ---------------------------------------------------------------------------------------------


def _valid(tmp_path: Path) -> dict:
    steps = [("Look.", "execute_bash", {"command": "ls"}, "calc.py"), ("Fix.", "str_replace_editor", EDIT, "ok"),
             ("Done.", "finish", {}, None)]
    path = openhands_trajectory(tmp_path / "seed.json", "demo__calc-1", steps, "diff")
    return json.loads(path.read_text())


def _paths(value, prefix=()):
    """Every place in a JSON value: (path, value)."""
    yield prefix, value
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _paths(inner, (*prefix, index))


def _replaced(data, path, value):
    changed = copy.deepcopy(data)
    if not path:
        return value
    holder = changed
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    return changed


_JSON = st.recursive(json_scalar | hostile_text(), lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(hostile_text(max_size=12), inner, max_size=3), max_leaves=8)


@fuzz
@given(place=st.integers(min_value=0), value=_JSON, data=st.data())
def test_any_value_anywhere_in_an_atif_file_is_read_or_refused_naming_the_file_never_a_crash(tmp_path_factory, place,
                                                                                           value, data):
    folder = tmp_path_factory.mktemp("hostile")
    valid = _valid(folder)
    places = list(_paths(valid))
    path, _ = places[place % len(places)]
    hostile = _replaced(valid, path, value)
    file = folder / "hostile.json"
    try:
        file.write_text(json.dumps(hostile, allow_nan=True))
    except (UnicodeEncodeError, ValueError):
        file.write_bytes(json.dumps(hostile, allow_nan=True, ensure_ascii=True).encode())
    try:
        recorded = read_trajectory_file(file)
    except NotReplayable as refused:
        message = str(refused)
        assert message.startswith(f"{file}: ")
        if len(path) >= 2 and path[0] == "steps" and isinstance(hostile, dict) and hostile.get("schema_version") \
                == valid["schema_version"]:
            assert "step" in message, message  # a step's fault names the step
        return
    assert recorded.cost is None or recorded.cost >= 0
    assert all(step.call is None or step.call["name"] in ("bash", "str_replace_editor", "submit")
               for step in recorded.steps)


@fuzz
@given(cost=st.one_of(st.just(float("nan")), st.just(float("inf")), st.floats(max_value=-1e-9), st.booleans(),
                      st.text(max_size=5), st.integers(min_value=10 ** 309, max_value=10 ** 400)))
def test_a_cost_that_is_no_amount_of_dollars_is_left_out_and_said(tmp_path_factory, cost):
    folder = tmp_path_factory.mktemp("cost")
    data = _valid(folder)
    data["final_metrics"]["total_cost_usd"] = cost
    file = folder / "costly.json"
    file.write_text(json.dumps(data, allow_nan=True))
    try:
        recorded = read_trajectory_file(file)
    except NotReplayable as refused:  # the specification's models refuse a cost that is text or a boolean
        assert str(refused).startswith(f"{file}: ") and "final_metrics.total_cost_usd" in str(refused)
        return
    assert recorded.cost is None
    assert any("no amount of dollars" in note for note in recorded.notes)


def test_the_submit_echo_of_mini_is_a_submit_and_its_printed_diff_the_submission(tmp_path):
    source = harbor_mini_trial(tmp_path, "t__1", [], "diff --git a/x b/x\n")
    recorded = read_trajectory_file(source)
    assert recorded.submission == "diff --git a/x b/x\n" and recorded.steps[-1].call["name"] == "submit"
    assert SUBMIT_COMMAND.startswith("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")


# -- round trip: swepipe's own run, exported as ATIF, replayed -----------------------------------------------------


@pytest.mark.parametrize("action_format", ["text", "tools"])
def test_a_solo_run_exported_as_atif_replays_to_the_run_s_own_patch(atif_setup, tmp_path, action_format):
    """A text-format run (a bash step, an ```edit block, a format error, submit) and a tool-call one (bash, the
    editor, a call of no tool, submit), each exported as ATIF and replayed: the same patch, the same format error."""
    setup, task = atif_setup, atif_setup["task"]
    if action_format == "text":
        edit = "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n"
        replies = [{"content": "Look.\n```bash\ncat calc.py\n```"}, {"content": f"Fix.\n```edit\n{edit}```"},
                   {"content": "No block at all."}, {"content": "Note.\n```bash\nprintf 'ok\\n' > NOTES.txt\n```"},
                   {"content": "Done.\n```bash\nsubmit\n```"}]
    else:
        def call(name, **arguments):
            return {"content": "", "tool_calls": [{"name": name, "arguments": arguments}]}
        replies = [call("bash", command="cat calc.py"),
                   call("str_replace_editor", command="str_replace", path="calc.py", old_str="    return a - b",
                        new_str="    return a + b"),
                   {"content": "Thinking, no call."}, call("bash", command="printf 'ok\\n' > NOTES.txt"),
                   call("submit")]
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"solo": [replies]}))
    config = yaml.safe_load(setup["config"].read_text()) | {
        "models": {"solo": {"model": f"scripted/{script}", "prices": {"input": 1.0, "output": 2.0}}},
        "limits": {"action_format": action_format}}
    setup["config"].write_text(yaml.safe_dump(config))
    runner = CliRunner()
    ran = runner.invoke(app, ["run", "--strategy", "solo", "--dataset", str(setup["dataset"]), "--config",
                              str(setup["config"]), "--run-id", "orig", "--runs-dir", str(setup["runs"])])
    assert ran.exit_code == 0, ran.output
    original = read_predictions(RunLayout(setup["runs"] / "orig").predictions).records[task.instance_id]
    assert "return a + b" in original.model_patch and "NOTES.txt" in original.model_patch
    exported = runner.invoke(app, ["export", str(setup["runs"] / "orig"), "--format", "atif", "--output",
                                   str(tmp_path / "atif")])
    assert exported.exit_code == 0, exported.output

    result, layout = replay(setup, tmp_path / "atif")
    assert result.exit_code == 0, result.output
    replayed = ReplayResult.read(layout.task(task.instance_id).replay_files.result)
    assert replayed.source_format == "atif" and replayed.patch_identical is True, replayed
    assert replayed.recorded_cost == pytest.approx(original.cost["total"])
    assert read_predictions(layout.predictions).records[task.instance_id].model_patch == original.model_patch
    steps = read_trajectory(layout.task(task.instance_id).solo_files.trajectory).data["steps"]
    assert [bool(step["format_error"]) for step in steps] == [False, False, True, False, False]
