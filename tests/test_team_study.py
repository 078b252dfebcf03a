"""The team as the study runs it, with scripted models in a local clone: workers' commands run at the same time,
stray writes are still caught, the submit guard can be turned off (the lead's early submit loses the workers'
later work), workers can be kept unaware of each other, a self-sizing lead's cap, the piv prompts, lead waits."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from test_team import FIX, SUBMIT, action, bash, delegations, report, team, trajectory

from pipeline.runtime.local import LocalRuntime
from pipeline.team.workspace import JOURNAL_ORDER, SharedWorkspace

# Waits (20 s at most) until a file exists, however slowly the machine runs.
WAIT_FOR = "for i in $(seq 200); do [ -e {path} ] && break; sleep 0.1; done; [ -e {path} ]"


def journal(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "commands.jsonl").read_text().splitlines()]


@pytest.fixture
def workspace(leaky_repo):
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime:
        yield runtime


# -- concurrent commands ---------------------------------------------------------------------


def test_two_workers_sleep_at_the_same_time_and_the_lead_waits_for_both(tmp_path, workspace):
    script = {"lead": [action("delegate", [{"stage": "planning", "task": "Look at calc.py."},
                                           {"stage": "planning", "task": "Look at the README."}]), SUBMIT],
              "worker": [[bash("sleep 3 && echo one"), report("calc.py subtracts")],
                         [bash("sleep 3 && echo two"), report("the README says nothing")]]}
    result, directory, _ = team(tmp_path, workspace, script)
    assert result.exit_reason == "submitted"
    sleeps = {e["agent"]: e for e in journal(directory) if e["command"].startswith("sleep 3")}
    assert set(sleeps) == {"worker-0", "worker-1"}
    assert all(e["ended"] - e["started"] >= 2.9 and e["exit_code"] == 0 for e in sleeps.values())
    # The two sleeps overlapped in time: each began before the other ended (one lock would have made them
    # run one after the other, the second starting after the first ended).
    first, second = sorted(sleeps.values(), key=lambda e: e["started"])
    assert second["started"] < first["ended"]
    assert first["seq"] in second["overlapped"] and second["seq"] in first["overlapped"]
    # The blocking lead sat idle from its delegation until both had reported: one wait, on record.
    [wait] = json.loads((directory / "lead_waits.json").read_text())
    assert wait["workers"] == ["worker-0", "worker-1"]
    assert wait["start"] <= first["started"] and wait["end"] >= second["ended"]
    assert JOURNAL_ORDER == "finished"
    ended = [e["ended"] for e in journal(directory)]
    assert ended == sorted(ended)  # the journal is in the order commands finished


def test_a_stray_write_while_another_worker_runs_is_still_reported(tmp_path, workspace):
    marker = tmp_path / "worker-0-sleeps"
    script = {
        "lead": [action("delegate", [{"stage": "implementation", "task": "Fix calc.py.", "writable": ["calc.py"]},
                                     {"stage": "implementation", "task": "Document it.", "writable": ["docs/"]}]),
                 SUBMIT],
        "worker": [[bash(f"touch {marker} && sleep 3"), report("looked")],
                   [bash(WAIT_FOR.format(path=marker) + " && mkdir -p docs && echo add > docs/add.md && "
                         "echo oops >> README"), report("documented")]],
    }
    result, directory, _ = team(tmp_path, workspace, script)
    seen = trajectory(directory, "lead")["messages"][3]["content"]
    # README changed while both ran: it may be either's, and each is warned about it (never silently lost).
    assert "WARNING: worker-1 may change docs, but README changed while it ran (by worker-1\nor by worker-0)" in seen
    assert "worker-1 may have changed (others ran commands at the same time): README (or worker-0)" in seen
    records = delegations(directory)["delegations"]
    assert records[1]["possible_writes_outside"] == {"README": ["worker-0"]}
    assert records[0]["possible_writes_outside"] == {"README": ["worker-1"], "docs/add.md": ["worker-1"]}
    assert records[1]["changed_files"] == [] and records[1]["writes_outside"] == []
    assert result.possible_writes_outside["worker-1"] == {"README": ["worker-0"]}


def test_a_write_after_the_other_command_ended_is_pinned_on_its_author(tmp_path, workspace):
    """Overlapping commands do not blur a change the other one's window did not see: worker-1's command began
    while worker-0's ran, but wrote only after worker-0's had ended (its line is in the journal), so the stray
    file is surely worker-1's."""
    started, log = tmp_path / "worker-1-started", tmp_path / "team" / "commands.jsonl"
    script = {
        "lead": [action("delegate", [{"stage": "planning", "task": "Wait for the other."},
                                     {"stage": "implementation", "task": "Fix calc.py.", "writable": ["calc.py"]}]),
                 SUBMIT],
        "worker": [[bash(WAIT_FOR.format(path=started)), report("waited")],
                   [bash(f"touch {started} && for i in $(seq 200); do grep -q worker-0 {log} && break; sleep 0.1; "
                         f"done && {FIX} && echo stray > notes.txt"), report("fixed")]],
    }
    result, directory, _ = team(tmp_path, workspace, script)
    entries = {e["agent"]: e for e in journal(directory)}
    assert entries["worker-1"]["seq"] in entries["worker-0"]["overlapped"]  # they did run at the same time
    records = delegations(directory)["delegations"]
    assert records[0]["changed_files"] == [] and records[0]["possibly_changed"] == {}
    assert records[1]["changed_files"] == ["calc.py", "notes.txt"] and records[1]["possibly_changed"] == {}
    assert result.writes_outside == {"worker-1": ["notes.txt"]}
    assert "WARNING: worker-1 may change calc.py, but changed notes.txt" in \
        trajectory(directory, "lead")["messages"][3]["content"]


def test_the_journal_replays_concurrent_commands_to_the_same_tree(tmp_path, leaky_repo):
    """Two agents' commands overlap and write the same file; the later finisher wrote last. A fresh clone
    rebuilt from the journal (as a resumed team is) holds what the first one held."""
    path = tmp_path / "commands.jsonl"
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime:
        shared = SharedWorkspace(runtime, journal=path)
        marker = tmp_path / "slow-started"
        slow = threading.Thread(target=shared.run, args=(f"touch {marker} && sleep 2 && echo slow > f.txt",),
                                kwargs={"agent": "a"})
        slow.start()
        shared.run(WAIT_FOR.format(path=marker) + " && echo fast > f.txt", agent="b")
        slow.join()
        shared.run("echo more >> f.txt", agent="a")
        before = runtime.read_file("f.txt")
    assert before == b"slow\nmore\n"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["agent"] for e in lines] == ["b", "a", "a"]  # finishing order, not start order
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as fresh:
        again = SharedWorkspace(fresh, journal=path)
        assert again.restore({"a": 2, "b": 1}) == 3
        assert fresh.read_file("f.txt") == before
        assert again.writes("a") == {"f.txt": ["b"]}  # b ran while a's first command did, and saw f.txt change


def test_the_journal_is_in_finishing_order_when_the_first_finisher_is_slow_to_be_recorded(tmp_path, leaky_repo):
    """Command a ends first, but its closing snapshot is slow (a loaded machine), so b's line is ready first;
    the journal still holds a before b, and a resumed tree replayed from it holds b's write, as the tree did."""
    from pipeline.team.workspace import SNAPSHOT

    class SlowSnapshotAfterA(LocalRuntime):
        snapshots_of_a = 0

        def run(self, command, timeout=60, output_limit=None):
            if command == SNAPSHOT and threading.current_thread().name == "a":
                SlowSnapshotAfterA.snapshots_of_a += 1
                if SlowSnapshotAfterA.snapshots_of_a == 2:  # the one after a's command
                    time.sleep(2)
            return super().run(command, timeout=timeout, output_limit=output_limit)

    path = tmp_path / "commands.jsonl"
    with SlowSnapshotAfterA(leaky_repo["path"], leaky_repo["base"]) as runtime:
        shared = SharedWorkspace(runtime, journal=path)
        marker = tmp_path / "a-wrote"
        a = threading.Thread(target=shared.run, args=(f"echo a > f.txt && touch {marker}",), kwargs={"agent": "a"},
                             name="a")
        a.start()
        shared.run(WAIT_FOR.format(path=marker) + " && sleep 0.3 && echo b > f.txt", agent="b")
        a.join()
        assert runtime.read_file("f.txt") == b"b\n"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["agent"] for e in lines] == ["a", "b"] and lines[0]["ended"] < lines[1]["ended"]
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as fresh:
        assert SharedWorkspace(fresh, journal=path).restore({"a": 1, "b": 1}) == 2
        assert fresh.read_file("f.txt") == b"b\n"


# -- the submit guard ------------------------------------------------------------------------


def early_submit_script(marker: Path) -> dict:
    """An async lead that submits while its worker's command runs (the worker then fixes calc.py); its later
    replies (wait, submit) are read only when the guard refuses that first submit."""
    return {"lead": [action("delegate", {"stage": "implementation", "task": "Fix calc.py.", "writable": ["calc.py"]}),
                     bash(WAIT_FOR.format(path=marker) + " && echo '# notes' > NOTES.md"), SUBMIT,
                     action("wait"), SUBMIT],
            "worker": [[bash(f"touch {marker} && sleep 2 && {FIX}"), report("fixed the sign")]]}


def test_guard_off_an_early_submit_ends_the_task_and_the_workers_later_work_is_lost(tmp_path, workspace):
    script = early_submit_script(tmp_path / "worker-started")
    result, directory, ledger = team(tmp_path, workspace, script, mode="async", submit_guard=False)
    lead = trajectory(directory, "lead")
    assert [s["action"] for s in lead["steps"]] == ["delegate", "bash", "submit"]
    assert result.exit_reason == "submitted" and result.stopped_at_end == ["worker-0"]
    # The patch is the tree as the lead submitted it: its own note, not the fix the worker made after.
    assert "+# notes" in result.patch and "a + b" not in result.patch
    [lost_work] = result.lost_work
    assert lost_work.worker == "worker-0" and lost_work.files == ["calc.py"] and lost_work.steps == 0
    [command] = lost_work.commands
    assert command.command.endswith(FIX) and command.started_before_submit and command.exit_code == 0
    assert result.files_changed_after_submit == ["calc.py"]
    lost = lost_work.to_dict()
    record = delegations(directory)
    assert record["submit_guard"] is False and record["lost_work"] == [lost]
    worker = record["delegations"][0]
    assert worker["lost_work"] == lost and worker["stopped_by"] == "lead submitted"
    assert worker["exit_reason"] == "stopped" and worker["report"] is None
    submission = json.loads((directory / "submission.json").read_text())
    assert submission["running"] == {"worker-0": 1} and submission["patch"] == result.patch
    assert "submitting ends the task at once" in lead["messages"][0]["content"]
    assert [r.agent for r in ledger.rows].count("lead") == 3  # its wait and second submit were never asked for


def test_guard_on_the_same_early_submit_is_refused(tmp_path, workspace):
    script = early_submit_script(tmp_path / "worker-started")
    result, directory, _ = team(tmp_path, workspace, script, mode="async")
    lead = trajectory(directory, "lead")
    assert [s["action"] for s in lead["steps"]] == ["delegate", "bash", "submit", "wait", "submit"]
    assert lead["steps"][2]["output"].startswith("Not submitted: workers are still running")
    assert "+# notes" in result.patch and "+    return a + b" in result.patch
    assert result.lost_work == [] and not (directory / "submission.json").exists()
    [wait] = json.loads((directory / "lead_waits.json").read_text())  # the async lead's ```wait
    assert wait["workers"] == ["worker-0"] and wait["end"] >= wait["start"]
    assert "you cannot submit while a worker is running" in lead["messages"][0]["content"]


# -- the directory, messages, the cap and the prompts -----------------------------------------


def two_workers(**first) -> list[dict]:
    return [{"stage": "planning", "task": "Find the bug in calc.py.", **first},
            {"stage": "planning", "task": "Read the README for hints."}]


def test_directory_off_workers_know_only_their_own_task_and_message_only_the_lead(tmp_path, workspace):
    script = {"lead": [action("delegate", two_workers()), SUBMIT],
              "worker": [[action("directory"), action("message", {"to": "worker-1", "text": "hello"}),
                          action("message", {"to": "lead", "text": "calc.py:2"}), report("calc.py:2")],
                         [action("message", "to: lead\ntext:"), report("nothing")]]}
    _, directory, _ = team(tmp_path, workspace, script, directory=False)
    worker0 = trajectory(directory, "worker-0")
    opening = worker0["messages"][0]["content"] + worker0["messages"][1]["content"]
    assert "Read the README" not in opening and "worker-1" not in opening and "Team (" not in opening
    assert "```directory" not in opening and "other agents may work" not in opening
    assert "no action blocks" in worker0["steps"][0]["format_error"]  # it has no directory action
    assert worker0["steps"][1]["output"] == "error: you can send messages to the lead only (to: lead)"
    assert worker0["steps"][2]["output"] == "message sent to lead"
    log = json.loads((directory / "messages.json").read_text())
    assert sorted((m["from"], m["to"], m["malformed"]) for m in log) == [  # the two workers wrote at the same time
        ("worker-0", "lead", False), ("worker-0", "worker-1", True), ("worker-1", "lead", True)]
    assert all(isinstance(m["time"], float) for m in log)
    assert "Workers do not know about each other" in trajectory(directory, "lead")["messages"][0]["content"]


def test_directory_on_workers_see_each_other(tmp_path, workspace):
    script = {"lead": [action("delegate", two_workers()), SUBMIT],
              "worker": [[report("calc.py:2")], [report("nothing")]]}
    _, directory, _ = team(tmp_path, workspace, script)
    opening = trajectory(directory, "worker-0")["messages"][1]["content"]
    assert "worker-1 [planning, running" in opening and "Read the README for hints." in opening
    assert "may coordinate with each other" in trajectory(directory, "lead")["messages"][0]["content"]


def test_a_self_sizing_lead_is_capped_at_16_by_default_and_told_so(tmp_path, workspace):
    many = [{"stage": "planning", "task": f"Look at part {i}."} for i in range(17)]
    script = {"lead": [action("delegate", many), SUBMIT]}
    _, directory, _ = team(tmp_path, workspace, script)
    lead = trajectory(directory, "lead")
    assert "You choose how many workers to use: at most 16 at a time." in lead["messages"][0]["content"]
    assert "needs 17 worker(s) but only 16 of 16 are free" in lead["steps"][0]["output"]
    assert delegations(directory)["size"] == 16


def test_the_leads_piv_prompt_is_used_when_chosen(tmp_path, workspace):
    script = {"lead": [SUBMIT]}
    _, directory, _ = team(tmp_path, workspace, script, lead_prompt="piv")
    system = trajectory(directory, "lead")["messages"][0]["content"]
    assert "Work in three phases" in system and "1. Plan." in system and "3. Verify." in system
    assert "```delegate" in system  # the actions are described as in the minimal prompt
    (tmp_path / "minimal").mkdir()
    _, directory, _ = team(tmp_path / "minimal", workspace, script)
    assert "Work in three phases" not in trajectory(directory, "lead")["messages"][0]["content"]


@pytest.mark.slow
def test_swepipe_run_takes_the_study_options_and_records_them(tmp_path, leaky_repo):
    """`swepipe run` with --set solo.prompt=piv, and an async team with the guard and directory off and the piv lead
    prompt: the prompts are used, config.yaml records every choice, and the lead's early submit leaves the worker's
    later fix out of the prediction, which records it as lost work."""
    from pipeline.tasks import load_tasks

    task_id = next(t.instance_id for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))
    # The worker fixes calc.py only once the lead has submitted (submission.json is written at the submit): in a
    # fresh process the lead's replies may take longer than any sleep, so the worker waits for the submit itself.
    marker, submitted = tmp_path / "worker-started", tmp_path / "runs/team/tasks/*/team/submission.json"
    script = {"solo": [[SUBMIT]],
              "lead": [action("delegate", {"stage": "implementation", "task": "Fix calc.py.", "writable": ["calc.py"]}),
                       bash(WAIT_FOR.format(path=marker) + " && echo '# notes' > NOTES.md"), SUBMIT],
              "worker": [[bash(f"touch {marker} && for i in $(seq 200); do ls {submitted} >/dev/null 2>&1 && break; "
                               f"sleep 0.1; done && {FIX}"), report("fixed the sign")]]}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    spec = {"model": f"scripted/{tmp_path / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "models": {"solo": spec, "lead": spec, "worker": spec}, "containers": {"impl": "local_opener:open_local"}}))
    env = {**os.environ, "SWEPIPE_TEST_REPO": str(leaky_repo["path"]), "SWEPIPE_TEST_BASE": leaky_repo["base"],
           "PYTHONPATH": str(Path(__file__).parent)}
    runs = {"solo": ["--strategy", "solo", "--set", "solo.prompt=piv"],
            "team": ["--strategy", "team", "--set", "team.mode=async", "--set", "team.submit_guard=false", "--set",
                     "team.directory=off", "--set", "team.lead_prompt=piv"]}
    for run_id, options in runs.items():
        done = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", *options, "--instance-ids", task_id,
                               "--config", "config.yaml", "--run-id", run_id], cwd=tmp_path, env=env,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run = tmp_path / "runs"
    solo = yaml.safe_load((run / "solo" / "config.yaml").read_text())
    assert solo["solo"] == {"prompt": "piv"}
    saved = json.loads((run / "solo" / "tasks" / task_id / "solo" / "trajectory.json").read_text())
    assert "Work in three phases" in saved["messages"][0]["content"]
    team_config = yaml.safe_load((run / "team" / "config.yaml").read_text())["team"]
    assert (team_config["submit_guard"], team_config["directory"], team_config["lead_prompt"]) == (False, False, "piv")
    lead = trajectory(run / "team" / "tasks" / task_id / "team", "lead")
    assert "Work in three phases" in lead["messages"][0]["content"]
    assert "Workers do not know about each other" in lead["messages"][0]["content"]
    prediction = json.loads((run / "team" / "predictions.jsonl").read_text().splitlines()[0])
    [lost] = prediction["lost_work"]
    assert lost["worker"] == "worker-0" and lost["files"] == ["calc.py"]
    assert "+# notes" in prediction["model_patch"] and "calc.py" not in prediction["model_patch"]
    bad = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--set", "team.submit_guard=maybe",
                          "--print-config"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "--set team.submit_guard=maybe: Input should be a valid boolean" in bad.stderr
