"""swepipe replay: a trajectory written by another harness, replayed through swepipe's agent with its recorded
replies as the model, here in a local clone (tests/local_opener.py) instead of the task's image; the same command
with Docker is tests/test_replay_docker.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import demo_task, git
from fuzzing import fuzz
from hostile import hostile_text, page_text
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.errors import SwepipeError
from pipeline.models.ledger import Ledger
from pipeline.records import ReplayResult, SoloResult, read_predictions, read_trajectory
from pipeline.rundir.layout import RunLayout

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
FIX = "sed -i 's/a - b/a + b/' /testbed/calc.py"
SCRATCH = "printf 'print(1)\\n' > /testbed/reproduce.py"


def mini_trajectory(path: Path, instance_id: str, steps: list[tuple[str | None, int | None]], submission: str,
                    exit_status: str = "Submitted") -> Path:
    """A mini-swe-agent 1.x trajectory: each step a reply with one ```bash block (or a reply that is its format
    error, when the command is None) and the observation with its return code."""
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Fix add() in /testbed."}]
    for command, code in steps:
        if command is None:  # two blocks: mini refused it
            messages.append({"role": "assistant", "content": "Both.\n```bash\nls\n```\n```bash\npwd\n```"})
            messages.append({"role": "user", "content": "Please always provide EXACTLY ONE action in triple "
                                                        "backticks, found 2 actions."})
            continue
        messages.append({"role": "assistant", "content": f"THOUGHT: next.\n\n```bash\n{command}\n```"})
        if code is not None:
            messages.append({"role": "user", "content": f"<returncode>{code}</returncode>\n<output>\n</output>"})
    path.write_text(json.dumps({
        "info": {"exit_status": exit_status, "submission": submission,
                 "model_stats": {"instance_cost": 0.0123, "api_calls": len(steps)},
                 "config": {"model": {"model_name": "recorded/model"}}},
        "messages": messages, "trajectory_format": "mini-swe-agent-1", "instance_id": instance_id}))
    return path


def recorded_diff(repo: Path, base: str, commands: list[str], tmp_path: Path) -> str:
    """What mini's submit command prints after ``commands`` ran in a clone at /testbed (here: in a clone, with the
    clone's path for /testbed)."""
    clone = tmp_path / "source-clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    git(clone, "checkout", "-q", base)
    for command in commands:
        subprocess.run(command.replace("/testbed", str(clone)), shell=True, cwd=clone, check=True)
    git(clone, "add", "-A")
    return subprocess.run(["git", "-C", str(clone), "diff", "--cached", base], capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture
def replay_setup(tmp_path, local_repo):
    task = demo_task(local_repo)
    dataset = tmp_path / "tasks.jsonl"
    dataset.write_text(task.model_dump_json() + "\n")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"containers": {"impl": "local_opener:open_local"}}))
    return {"task": task, "dataset": dataset, "config": config, "runs": tmp_path / "runs", "repo": local_repo}


def replay(setup, *trajectories: Path, run_id: str = "r"):
    result = CliRunner().invoke(app, ["replay", *map(str, trajectories), "--dataset", str(setup["dataset"]),
                                      "--config", str(setup["config"]), "--run-id", run_id,
                                      "--runs-dir", str(setup["runs"])], env={"COLUMNS": "200"})
    return result, RunLayout(setup["runs"] / run_id)


def test_a_mini_swe_agent_trajectory_replays_to_its_recorded_patch_at_no_cost(replay_setup, tmp_path):
    setup, task = replay_setup, replay_setup["task"]
    submission = recorded_diff(setup["repo"]["path"], setup["repo"]["base"], [FIX, SCRATCH], tmp_path)
    source = mini_trajectory(tmp_path / f"{task.instance_id}.traj.json", task.instance_id,
                             [("cat /testbed/calc.py", 0), (None, None), (FIX, 0), (SCRATCH, 0), (SUBMIT, None)],
                             submission)
    result, layout = replay(setup, source)
    assert result.exit_code == 0, result.output

    replayed = ReplayResult.read(layout.task(task.instance_id).replay_files.result)
    assert isinstance(replayed, ReplayResult), replayed
    assert replayed.patch_identical is True and replayed.only_replayed == [] and replayed.differing == []
    assert replayed.exit_codes_differ == [] and replayed.source_format == "mini-swe-agent-1"
    assert replayed.recorded_steps == 5 and replayed.replayed_steps == 5
    assert replayed.recorded_cost == 0.0123 and replayed.recorded_exit_status == "Submitted"
    assert any("/testbed mapped to" in note for note in replayed.notes)
    steps = read_trajectory(layout.task(task.instance_id).solo_files.trajectory).data["steps"]
    assert steps[1]["format_error"] and [step["exit_code"] for step in steps[::2][:2]] == [0, 0]

    prediction = read_predictions(layout.predictions).records[task.instance_id]
    assert prediction.model_patch == submission and "reproduce.py" in submission
    rows = Ledger.read(layout.task(task.instance_id).ledger)
    assert len(rows) == 5 and all(row.cost == 0 for row in rows)  # every reply came from the record
    assert ".traj.json: patch identical" in result.output


def test_differences_from_the_record_are_named_file_by_file_and_step_by_step(replay_setup, tmp_path):
    """The source submitted without its reproduction script, and recorded another exit status for a step."""
    setup, task = replay_setup, replay_setup["task"]
    submission = recorded_diff(setup["repo"]["path"], setup["repo"]["base"], [FIX], tmp_path)
    source = mini_trajectory(tmp_path / f"{task.instance_id}.traj.json", task.instance_id,
                             [("cat /testbed/calc.py", 1), (FIX, 0), (SCRATCH, 0), (SUBMIT, None)], submission)
    result, layout = replay(setup, source)
    assert result.exit_code == 0, result.output
    replayed = ReplayResult.read(layout.task(task.instance_id).replay_files.result)
    assert replayed.patch_identical is False and replayed.only_replayed == ["reproduce.py"]
    assert replayed.only_recorded == [] and replayed.differing == []
    assert replayed.exit_codes_differ == ["step 1: recorded 1, replayed 0"]
    assert ".traj.json: patch differs: +reproduce.py" in result.output
    assert ".traj.json: step 1: recorded 1, replayed 0" in result.output


def test_the_recorded_trajectory_is_audited_and_replay_names_each_step_that_reached_for_the_answer(
        replay_setup, tmp_path):
    """The source's harness was not sealed: its own commands that reached for the answer are named by the summary,
    recorded beside the replay and counted by the report; its task's text and outputs are not read as actions."""
    setup, task = replay_setup, replay_setup["task"]
    steps = [("git log --oneline -2", 0), ("git log --all --oneline -S 'a + b'", 0),
             ("cat /work/answers/demo__calc-1.patch 2>/dev/null || true", 0), (FIX, 0), (SUBMIT, None)]
    source = mini_trajectory(tmp_path / f"{task.instance_id}.traj.json", task.instance_id, steps, "")
    result, layout = replay(setup, source)
    assert result.exit_code == 0, result.output

    replayed = ReplayResult.read(layout.task(task.instance_id).replay_files.result)
    assert [(f.kind, f.step, f.command) for f in replayed.retrieval] == [
        ("history", 2, steps[1][0]), ("outside", 3, steps[2][0])]
    said = " ".join(result.output.split())
    assert ("step 2 reached for the answer (history): git log --all --oneline -S a + b: walks every ref (--all), "
            "not only the base's history; command: git log --all --oneline -S 'a + b'") in said
    assert "step 3 reached for the answer (outside)" in said
    from pipeline.cli.replay_command import _reached_word

    assert _reached_word(replayed) == "history 1, outside 1"  # the table's column (a narrow console folds it)
    report = CliRunner().invoke(app, ["report", str(setup["runs"] / "r")])
    assert report.exit_code == 0, report.output
    markdown = (setup["runs"] / "r" / "report.md").read_text()
    assert "| candidates from trajectories that reached for the answer | 1 of 1 (history 1, outside 1) |" in markdown


def test_a_trajectory_that_cannot_be_replayed_is_named_and_the_others_go_on(replay_setup, tmp_path):
    setup, task = replay_setup, replay_setup["task"]
    folder = tmp_path / "trajectories"
    folder.mkdir()
    (folder / "broken.traj.json").write_text("{not json")
    mini_trajectory(folder / "no-such-task.traj.json", "no-such-task", [(SUBMIT, None)], "")
    mini_trajectory(folder / f"{task.instance_id}.traj.json", task.instance_id, [(FIX, 0)], "", "LimitsExceeded")
    result, layout = replay(setup, folder)
    assert result.exit_code == 0, result.output
    assert "broken.traj.json" in result.output and "no-such-task is not in the dataset" in result.output
    replayed = ReplayResult.read(layout.task(task.instance_id).replay_files.result)
    assert replayed.patch_identical is False and replayed.only_replayed == ["calc.py"]
    assert any("ended without a submit (LimitsExceeded)" in note for note in replayed.notes)  # a submit added


def test_a_finished_replay_resumes_as_done_and_refuses_another_trajectory_for_its_task(replay_setup, tmp_path):
    setup, task = replay_setup, replay_setup["task"]
    source = mini_trajectory(tmp_path / f"{task.instance_id}.traj.json", task.instance_id,
                             [(FIX, 0), (SUBMIT, None)], "")
    assert replay(setup, source)[0].exit_code == 0
    again, layout = replay(setup, source)
    assert again.exit_code == 0 and "skipped" in again.output
    assert len(Ledger.read(layout.task(task.instance_id).ledger)) == 2  # nothing replayed twice
    (tmp_path / "other").mkdir()
    other = mini_trajectory(tmp_path / "other" / f"{task.instance_id}.traj.json", task.instance_id, [(SUBMIT, None)],
                            "")
    refused, _ = replay(setup, other)
    assert isinstance(refused.exception, SwepipeError) and "give another --run-id" in str(refused.exception)


def test_swepipe_s_own_exported_trajectory_replays_to_the_run_s_patch(replay_setup, tmp_path):
    """A solo run of the scripted model (text format: a bash step, an ```edit block, a format error, submit),
    exported as trajectories, replays in the tool format to the very patch the run made."""
    setup, task = replay_setup, replay_setup["task"]
    edit = "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n"
    replies = ["Look.\n```bash\ncat calc.py\n```", f"Fix.\n```edit\n{edit}```", "No block at all.",
               "Note it.\n```bash\nprintf 'fixed\\n' > NOTES.txt\n```", "Done.\n```bash\nsubmit\n```"]
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"solo": [replies]}))
    config = yaml.safe_load(setup["config"].read_text()) | {"models": {"solo": {"model": f"scripted/{script}",
                                                                                 "free": True}}}
    setup["config"].write_text(yaml.safe_dump(config))
    runner = CliRunner()
    ran = runner.invoke(app, ["run", "--strategy", "solo", "--dataset", str(setup["dataset"]), "--config",
                              str(setup["config"]), "--run-id", "orig", "--runs-dir", str(setup["runs"])])
    assert ran.exit_code == 0, ran.output
    original = read_predictions(RunLayout(setup["runs"] / "orig").predictions).records[task.instance_id]
    assert "return a + b" in original.model_patch and "NOTES.txt" in original.model_patch
    exported = runner.invoke(app, ["export", str(setup["runs"] / "orig"), "--format", "trajectories",
                                   "--output", str(tmp_path / "exported")])
    assert exported.exit_code == 0, exported.output

    result, layout = replay(setup, tmp_path / "exported")
    assert result.exit_code == 0, result.output
    replayed = ReplayResult.read(layout.task(task.instance_id).replay_files.result)
    assert replayed.source_format == "swepipe" and replayed.patch_identical is True, replayed
    assert read_predictions(layout.predictions).records[task.instance_id].model_patch == original.model_patch
    steps = read_trajectory(layout.task(task.instance_id).solo_files.trajectory).data["steps"]
    assert [bool(step["format_error"]) for step in steps] == [False, False, True, False, False]


def test_a_mini_swe_agent_2_trajectory_replays_and_names_the_files_it_did_not_submit(replay_setup, tmp_path):
    """mini-swe-agent 2.x submits the files its agent lists: the replay's whole-tree patch holds the scratch file
    too, and says so."""
    setup, task = replay_setup, replay_setup["task"]
    submission = recorded_diff(setup["repo"]["path"], setup["repo"]["base"], [FIX], tmp_path)
    commands = ["cat /testbed/calc.py", FIX, SCRATCH, "cd /testbed && git diff -- calc.py > patch.txt",
                "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt"]
    messages = [{"role": "system", "content": "Use the bash tool."}, {"role": "user", "content": "Fix add()."}]
    for number, command in enumerate(commands):
        call_id = f"call_{number}"
        messages.append({"role": "assistant", "content": f"Step {number}.", "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "bash",
                                                             "arguments": json.dumps({"command": command})}}],
            "extra": {"actions": [{"command": command, "tool_call_id": call_id}]}})
        if number < len(commands) - 1:
            messages.append({"role": "tool", "tool_call_id": call_id, "content": "",
                             "extra": {"returncode": 0, "raw_output": ""}})
    messages.append({"role": "exit", "content": submission, "extra": {"exit_status": "Submitted",
                                                                      "submission": submission}})
    source = tmp_path / f"{task.instance_id}.traj.json"
    source.write_text(json.dumps({"info": {"exit_status": "Submitted", "submission": submission,
                                           "config": {"environment": {"cwd": "/testbed"}}},
                                  "messages": messages, "trajectory_format": "mini-swe-agent-1.1"}))
    result, layout = replay(setup, source)
    assert result.exit_code == 0, result.output
    replayed = ReplayResult.read(layout.task(task.instance_id).replay_files.result)
    assert replayed.source_format == "mini-swe-agent-2" and replayed.patch_identical is False
    assert sorted(replayed.only_replayed) == ["patch.txt", "reproduce.py"]
    assert sorted(replayed.not_submitted) == ["patch.txt", "reproduce.py"] and replayed.differing == []


def test_with_leave_out_scratch_the_replay_s_patch_is_the_files_the_source_submitted(replay_setup, tmp_path):
    """limits.leave_out_scratch: the patch leaves out the reproduction script nothing uses, as mini-swe-agent's
    agent did by listing only calc.py; the rest of the patch keeps its bytes, and the record names what went."""
    setup, task = replay_setup, replay_setup["task"]
    submission = recorded_diff(setup["repo"]["path"], setup["repo"]["base"], [FIX], tmp_path)
    source = mini_trajectory(tmp_path / f"{task.instance_id}.traj.json", task.instance_id,
                             [(FIX, 0), (SCRATCH, 0), (SUBMIT, None)], submission)
    config = yaml.safe_load(setup["config"].read_text()) | {"limits": {"leave_out_scratch": True}}
    setup["config"].write_text(yaml.safe_dump(config))
    result, layout = replay(setup, source)
    assert result.exit_code == 0, result.output
    replayed = ReplayResult.read(layout.task(task.instance_id).replay_files.result)
    assert replayed.patch_identical is True, (replayed.only_replayed, replayed.differing)
    solo = SoloResult.read(layout.task(task.instance_id).solo_files.result)
    assert list(solo.scratch_left_out) == ["reproduce.py"] and "reproduction" in solo.scratch_left_out["reproduce.py"]


def test_the_task_page_shows_the_replay_beside_its_record(replay_setup, tmp_path):
    setup, task = replay_setup, replay_setup["task"]
    submission = recorded_diff(setup["repo"]["path"], setup["repo"]["base"], [FIX], tmp_path)
    source = mini_trajectory(tmp_path / f"{task.instance_id}.traj.json", task.instance_id,
                             [("cat /testbed/calc.py", 1), (FIX, 0), (SCRATCH, 0), (SUBMIT, None)], submission)
    assert replay(setup, source)[0].exit_code == 0
    report = CliRunner().invoke(app, ["report", str(setup["runs"] / "r"), "--dataset", str(setup["dataset"])])
    assert report.exit_code == 0, report.output
    page = setup["runs"] / "r" / "report_tasks" / "r" / f"{task.instance_id}.html"
    text = page_text(page.read_text())
    assert "Replay of a recorded trajectory" in text and "mini-swe-agent-1" in text and "differs" in text
    assert "only in the replay's patch" in text and "reproduce.py" in text
    assert "step 1: recorded 1, replayed 0" in text and "The recorded patch" in text

    result = RunLayout(setup["runs"] / "r").task(task.instance_id).replay_files.result
    result.write_text("{not json")
    CliRunner().invoke(app, ["report", str(setup["runs"] / "r"), "--dataset", str(setup["dataset"])])
    assert "replay/result.json is not valid JSON" in page_text(page.read_text())


def test_a_replay_with_nothing_of_the_dataset_says_so(replay_setup, tmp_path):
    setup = replay_setup
    source = mini_trajectory(tmp_path / "elsewhere.traj.json", "no-such-task", [(SUBMIT, None)], "")
    result, layout = replay(setup, source)
    assert isinstance(result.exception, SwepipeError) and "none that could be read is of a task in the dataset" \
        in str(result.exception)
    assert not layout.root.exists()


def test_a_file_named_for_one_task_recording_another_is_refused_and_that_task_s_own_trajectory_replays(
        replay_setup, tmp_path):
    """One rule for the task of a trajectory (the recorded id, else the file's name): a file named for another task
    that records this one (it sorts first) is named with both and left out; it neither replays as this task under
    its own name nor pushes this task's own trajectory out as "a second trajectory"."""
    setup, task = replay_setup, replay_setup["task"]
    folder = tmp_path / "trajectories"
    folder.mkdir()
    stray = mini_trajectory(folder / "a-other-task.traj.json", task.instance_id, [(SCRATCH, 0), (SUBMIT, None)], "")
    own = mini_trajectory(folder / f"{task.instance_id}.traj.json", task.instance_id, [(FIX, 0), (SUBMIT, None)], "")
    result, layout = replay(setup, folder)
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert (f"not replayable {stray}: is named for task 'a-other-task' but records task '{task.instance_id}'"
            in said), said
    assert "a second trajectory" not in said
    replayed = ReplayResult.read(layout.task(task.instance_id).replay_files.result)
    assert replayed.source == str(own)
    patch = read_predictions(layout.predictions).records[task.instance_id].model_patch
    assert "return a + b" in patch and "reproduce.py" not in patch


# -- the source's repository root, read as the task's ------------------------------------------------------------

OTHER_PATHS = ["/testbed-old", "/home/u/testbed", "x/testbed", "/testbed.bak", "/testbedx", "${R}/testbed", "/testbed*",
               "~/testbed", "./testbed", "/testbed-old/x", "/srv/testbed/x", "testbed", "/Testbed"]
UNDER_ROOT = [("/testbed", "/app"), ("/testbed/x", "/app/x"), ("/testbed/", "/app/"),
              ("cd /testbed && ls", "cd /app && ls"), ('"/testbed"', '"/app"'), ("'/testbed/a b'", "'/app/a b'"),
              ("PYTHONPATH=/x:/testbed", "PYTHONPATH=/x:/app"), ("(cd /testbed; ls)", "(cd /app; ls)"),
              ("cat </testbed/a >/testbed/b", "cat </app/a >/app/b"), ("--root=/testbed/src", "--root=/app/src"),
              ("{/testbed,/tmp}", "{/app,/tmp}"), ("`ls /testbed`|wc", "`ls /app`|wc")]


def test_the_source_s_root_is_mapped_only_where_it_is_a_path_s_root_component():
    from pipeline.interop.replay import map_call, map_root

    assert map_root("ls /testbed-old /home/u/testbed", "/testbed", "/app") == "ls /testbed-old /home/u/testbed"
    for text, mapped in UNDER_ROOT:
        assert map_root(text, "/testbed", "/app") == mapped, text
        assert map_root(text, "/testbed/", "/app/") == mapped, text  # a root and a workdir with a trailing slash
    for text in OTHER_PATHS:
        assert map_root(text, "/testbed", "/app") == text, text
    editor = {"name": "str_replace_editor", "arguments": {"command": "view", "path": "/testbed-old/a.py"}}
    assert map_call(editor, "/testbed", "/app") == editor
    assert map_call({**editor, "arguments": {"command": "view", "path": "/testbed/a.py"}}, "/testbed", "/app") == \
        {**editor, "arguments": {"command": "view", "path": "/app/a.py"}}
    for root in ("/", "//", "testbed", "", "./testbed"):  # no path can be read under these: all kept as written
        assert map_root("cd /testbed && ls / testbed", root, "/app") == "cd /testbed && ls / testbed"


@fuzz
@given(before=hostile_text(), after=hostile_text(), other=st.sampled_from(OTHER_PATHS),
       under=st.sampled_from(UNDER_ROOT))
def test_around_hostile_text_only_the_root_component_is_mapped(before, after, other, under):
    from pipeline.interop.replay import map_root

    text, mapped = under
    whole = f"{before} {other} {text} {other} {after}"
    assert map_root(whole, "/testbed", "/app") == \
        f"{map_root(before, '/testbed', '/app')} {other} {mapped} {other} {map_root(after, '/testbed', '/app')}"


@fuzz
@given(text=hostile_text(max_size=80).filter(lambda text: "/testbed" not in text))
def test_hostile_text_that_names_no_root_is_kept_byte_for_byte(text):
    from pipeline.interop.replay import map_root

    assert map_root(text, "/testbed", "/app") == text


@fuzz
@given(text=hostile_text(max_size=80), root=st.one_of(hostile_text(max_size=20), st.sampled_from(["/", "/testbed"])),
       workdir=st.sampled_from(["/app", "/", "/tmp/x y/repo"]), name=st.sampled_from(["bash", "str_replace_editor",
                                                                                       "submit", "other"]))
def test_any_root_and_any_command_map_without_a_crash_and_a_root_no_path_can_be_under_maps_nothing(text, root,
                                                                                                  workdir, name):
    from pipeline.interop.recorded import root_pattern
    from pipeline.interop.replay import map_call, map_root

    mapped = map_root(text, root, workdir)
    assert isinstance(mapped, str)
    if root_pattern(root) is None:
        assert mapped == text
    call = {"name": name, "arguments": {"command": text, "path": text}}
    assert isinstance(map_call(call, root, workdir), dict)


def test_a_replay_maps_the_root_in_its_commands_and_keeps_every_other_path(replay_setup, tmp_path):
    setup, task = replay_setup, replay_setup["task"]
    listing = "ls -d /testbed-old /home/u/testbed /testbed 2>&1; true"
    source = mini_trajectory(tmp_path / f"{task.instance_id}.traj.json", task.instance_id,
                             [(listing, 0), (FIX, 0), (SUBMIT, None)], "")
    result, layout = replay(setup, source)
    assert result.exit_code == 0, result.output
    script = json.loads(layout.task(task.instance_id).replay_files.script.read_text())
    commands = [reply["tool_calls"][0]["arguments"]["command"] for reply in script["solo"][0][:2]]
    workdir = next(note for note in script["notes"] if "mapped to" in note).split(" mapped to ")[1].split(" in ")[0]
    assert commands[0] == f"ls -d /testbed-old /home/u/testbed {workdir} 2>&1; true"
    assert commands[1] == FIX.replace("/testbed", workdir)
    assert "return a + b" in read_predictions(layout.predictions).records[task.instance_id].model_patch


def test_a_replay_s_containers_never_get_the_network_whatever_the_config_says(replay_setup, tmp_path):
    """The recorded commands are untrusted: containers.network: true in the user's config is not used, and the
    replay says so where it reports its settings."""
    setup, task = replay_setup, replay_setup["task"]
    config = yaml.safe_load(setup["config"].read_text())
    setup["config"].write_text(yaml.safe_dump({**config, "containers": {**config["containers"], "network": True}}))
    source = mini_trajectory(tmp_path / f"{task.instance_id}.traj.json", task.instance_id,
                             [(FIX, 0), (SUBMIT, None)], "")
    result, layout = replay(setup, source)
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(layout.config.read_text())["containers"]["network"] is False
    prediction = read_predictions(layout.predictions).records[task.instance_id]
    assert [seal.network for seal in prediction.containers] == [False]
    assert ("containers without the network, whatever containers.network says (the recorded commands are "
            "untrusted)") in " ".join(result.output.split())
