"""The team strategy with scripted models in a local clone: delegation, async leads, messages, guard rails, spend."""

import json

import pytest
import yaml
from live_runs import live_trajectory

from pipeline.agent.actions import FormatError, parse_action
from pipeline.errors import SwepipeError
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.models.ledger import Ledger
from pipeline.runtime.local import LocalRuntime
from pipeline.settings.config import Limits, RunConfig, TeamConfig
from pipeline.settings.config_overlay import parse_set
from pipeline.settings.model_spec import ModelSpec, Prices
from pipeline.tasks import Task
from pipeline.team.actions import LEAD_ACTIONS, inside, normalise_path, parse_delegations, parse_names, report_block
from pipeline.team.lead import run_team

USAGE = {"prompt_tokens": 1000, "completion_tokens": 100}  # $0.0012 a reply at $1 / $2 per million
REPLY_COST = (1000 * 1 + 100 * 2) / 1e6
FIX = "sed -i 's/a - b/a + b/' calc.py"


def reply(content: str) -> dict:
    return {"content": content, "usage": USAGE}


def bash(command: str) -> dict:
    return reply(f"Next.\n```bash\n{command}\n```")


def action(kind: str, body="") -> dict:
    text = body if isinstance(body, str) else yaml.safe_dump(body, sort_keys=False)
    return reply(f"Team action.\n```{kind}\n{text.rstrip()}\n```")


def report(text: str) -> dict:
    return reply(f"Finished.\n```report\n{text}\n```\n```bash\nsubmit\n```")


SUBMIT = bash("submit")


def clients(tmp_path, script: dict, ledger: Ledger):
    path = tmp_path / "script.yaml"
    path.write_text(yaml.safe_dump(script))
    spec = ModelSpec(model=f"scripted/{path}", prices=Prices(input=1, output=2))
    return (ModelClient(spec, role, ledger, stage="team", task="t", scope=str(tmp_path), backoff_base=0.001)
            for role in ("lead", "worker"))


@pytest.fixture
def workspace(leaky_repo):
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime:
        yield runtime


def team(tmp_path, workspace, script, **options):
    ledger = Ledger(tmp_path / "ledger.jsonl")
    lead, worker = clients(tmp_path, script, ledger)
    settings = RunConfig(limits=Limits(max_steps=options.pop("lead_steps", 10), command_timeout=20,
                                       action_format=options.pop("action_format", "text")),
                         team=TeamConfig(worker_max_steps=6, **options))
    directory = tmp_path / "team"
    result = run_team("Fix add in calc.py: it subtracts.", workspace, lead, worker, Budget("task"), settings,
                      directory)
    return result, directory, ledger


def trajectory(directory, name):
    return live_trajectory(directory / f"{name}.trajectory.json")


def delegations(directory):
    return json.loads((directory / "delegations.json").read_text())


# -- parsing ---------------------------------------------------------------------------------


def test_a_reply_holds_exactly_one_action_block():
    assert parse_action("x\n```bash\nls\n```", LEAD_ACTIONS).kind == "bash"
    assert parse_action("```wait\n```", LEAD_ACTIONS).body == ""
    done = report("all good")["content"]
    assert parse_action(done, ("bash", "message")).is_submit and report_block(done) == "all good"
    with pytest.raises(FormatError, match="2 action blocks"):
        parse_action("```bash\nls\n```\n```wait\n```", LEAD_ACTIONS)
    with pytest.raises(FormatError, match="no action blocks"):
        parse_action("```delegate\ntask: x\n```", ("bash", "message"))  # workers cannot delegate
    assert parse_action("```python\nprint(1)\n```\n```check\n```", LEAD_ACTIONS).kind == "check"


def test_delegations_and_names():
    one = parse_delegations("stage: planning\ntask: find it", None)
    assert [(d.stage, d.writable) for d in one] == [("planning", [])]
    many = parse_delegations(yaml.safe_dump([{"task": "a", "writable": "/app/src/"}, {"task": "b"}]),
                             "implementation", "/app")
    assert [d.writable for d in many] == [["src"], ["."]]
    with pytest.raises(FormatError, match="stage"):
        parse_delegations("task: x", None)
    with pytest.raises(FormatError, match="unknown key"):
        parse_delegations("task: x\nstage: planning\nfolders: [a]", None)
    assert parse_names("") is None and parse_names("all") is None
    assert parse_names("worker-1, 2 [3]") == ["worker-1", "worker-2", "worker-3"]
    assert normalise_path("./src/pkg/") == "src/pkg" and normalise_path("/app", "/app") == "."
    assert inside("src/a.py", ["src"]) and not inside("srcx/a.py", ["src"]) and inside("x", ["."])


# -- blocking lead ---------------------------------------------------------------------------


def test_blocking_lead_delegates_three_planners_and_uses_their_reports(tmp_path, workspace):
    script = {
        "lead": [action("delegate", [{"stage": "planning", "task": f"Planner {i}: find where add is wrong."}
                                     for i in range(3)]),
                 bash(FIX), SUBMIT],
        "worker": [[bash("grep -n return calc.py"), report("calc.py:2 subtracts; make it a + b")],
                   [bash("git log --oneline | head -3"), report("history has no hint")],
                   [report("README says nothing")]],
    }
    result, directory, ledger = team(tmp_path, workspace, script)
    assert result.exit_reason == "submitted" and "+    return a + b" in result.patch
    assert result.delegations == {"planning": 3, "implementation": 0, "verification": 0}

    lead = trajectory(directory, "lead")
    seen = lead["messages"][3]["content"]  # the answer to the delegate block, before the lead's second reply
    positions = [seen.index(f'<report from="worker-{i}" stage="planning" ended="submitted"') for i in range(3)]
    assert positions == sorted(positions)
    assert "calc.py:2 subtracts" in seen and "history has no hint" in seen and "README says nothing" in seen
    assert lead["steps"][0]["action"] == "delegate" and lead["steps"][1]["command"] == FIX

    worker = trajectory(directory, "worker-0")
    assert "Planner 0: find where add is wrong." in worker["messages"][1]["content"]
    assert "it subtracts" not in worker["messages"][1]["content"]  # only its subtask, not the issue
    assert "change no file" in worker["messages"][0]["content"]

    record = delegations(directory)
    assert record["counts"] == {"planning": 3, "implementation": 0, "verification": 0, "total": 3}
    first = record["delegations"][0]
    assert first["by"] == "lead" and first["lead_step"] == 0 and first["stage"] == "planning"
    assert first["state"] == "collected" and first["report"].startswith("calc.py:2")
    assert first["steps"] == 2 and first["cost"] == pytest.approx(2 * REPLY_COST)
    assert [(r.role, r.agent) for r in ledger.rows].count(("worker", "worker-1")) == 2
    assert {r.stage for r in ledger.rows} == {"team"}


def test_worker_writes_outside_its_folders_are_reported_to_the_lead(tmp_path, workspace):
    # One worker after the other (a blocking lead): each ran alone, so each change is surely its own.
    script = {
        "lead": [action("delegate", {"stage": "implementation", "task": "Fix calc.py.", "writable": ["calc.py"]}),
                 action("delegate", {"stage": "implementation", "task": "Document it.", "writable": ["docs/"]}),
                 SUBMIT],
        "worker": [[bash(FIX), report("fixed calc.py")],
                   [bash("mkdir -p docs && echo add > docs/add.md && echo oops >> README"), report("documented")]],
    }
    result, directory, _ = team(tmp_path, workspace, script)
    lead = trajectory(directory, "lead")
    assert "worker-0 changed: calc.py" in lead["messages"][3]["content"]
    seen = lead["messages"][5]["content"]
    assert "worker-1 changed: README, docs/add.md" in seen and "may have changed" not in seen
    assert "WARNING: worker-1 may change docs, but changed README" in seen
    records = delegations(directory)["delegations"]
    assert records[0]["changed_files"] == ["calc.py"] and records[0]["writes_outside"] == []
    assert records[1]["changed_files"] == ["README", "docs/add.md"] and records[1]["writes_outside"] == ["README"]
    assert result.writes_outside == {"worker-1": ["README"]}


def test_the_lead_s_and_every_worker_s_trajectory_is_audited_for_reaching_for_the_answer(tmp_path, workspace):
    script = {"lead": [bash("git reflog | head -3"),
                       action("delegate", {"stage": "implementation", "task": "Fix calc.py.", "writable": ["calc.py"]}),
                       SUBMIT],
              "worker": [[bash("git log --oneline -2"), bash("git fetch origin && git log origin/fix -1"), bash(FIX),
                          report("fixed calc.py")]]}
    result, _, _ = team(tmp_path, workspace, script)
    assert [(f.agent, f.kind, f.step, f.command) for f in result.retrieval] == [
        ("lead", "history", 0, "git reflog | head -3"),
        ("worker-0", "history", 1, "git fetch origin && git log origin/fix -1"),
        ("worker-0", "network", 1, "git fetch origin && git log origin/fix -1")]


def test_a_worker_must_submit_with_a_report(tmp_path, workspace):
    script = {"lead": [action("delegate", {"stage": "verification", "task": "Check calc.py."}), SUBMIT],
              "worker": [[SUBMIT, report("calc.py is still wrong")]]}
    _, directory, _ = team(tmp_path, workspace, script)
    worker = trajectory(directory, "worker-0")
    assert "needs a ```report block" in worker["steps"][0]["format_error"]
    assert worker["exit_reason"] == "submitted" and "calc.py is still wrong" in \
        trajectory(directory, "lead")["messages"][3]["content"]


# -- asynchronous lead -----------------------------------------------------------------------


def test_async_lead_submitting_early_is_made_to_collect_its_workers(tmp_path, workspace):
    script = {
        "lead": [action("delegate", {"stage": "implementation", "task": "Fix calc.py.", "writable": ["calc.py"]}),
                 SUBMIT, action("wait"), SUBMIT],
        "worker": [[bash("sleep 1.5"), bash(FIX), report("fixed the sign in calc.py")]],
    }
    result, directory, _ = team(tmp_path, workspace, script, mode="async")
    lead = trajectory(directory, "lead")
    assert [s["action"] for s in lead["steps"]] == ["delegate", "submit", "wait", "submit"]
    assert "started worker-0 (implementation)" in lead["steps"][0]["output"]
    refused = lead["steps"][1]["output"]
    assert refused.startswith("Not submitted: workers are still running") and "worker-0 [implementation" in refused
    assert lead["steps"][1]["format_error"] is None  # a refusal is not a format error
    assert "fixed the sign in calc.py" in lead["steps"][2]["output"]
    assert result.exit_reason == "submitted" and "+    return a + b" in result.patch
    assert delegations(directory)["delegations"][0]["collected"] is not None
    assert result.stopped_at_end == [] and result.unread_reports == []


def test_async_reports_arrive_before_the_leads_next_turn(tmp_path, workspace):
    script = {
        "lead": [action("delegate", {"stage": "planning", "task": "Find the bug."}), bash("sleep 2"),
                 bash("true"), SUBMIT],
        "worker": [[{**report("calc.py:2"), "delay": 0.5}]],  # it reports while the lead's command runs
    }
    result, directory, _ = team(tmp_path, workspace, script, mode="async")
    lead = trajectory(directory, "lead")
    # The report was joined to the observation of the lead's sleep, the user turn before its third reply.
    assert lead["messages"][5]["role"] == "user" and "exit code: 0" in lead["messages"][5]["content"]
    assert '<report from="worker-0"' in lead["messages"][5]["content"]
    assert [m["role"] for m in lead["messages"]][1:] == ["user", "assistant"] * 4  # roles still alternate
    assert result.exit_reason == "submitted"


def test_async_lead_checks_stops_and_resumes_a_worker(tmp_path, workspace):
    script = {
        "lead": [action("delegate", {"stage": "planning", "task": "Look around."}), action("check", "worker-0"),
                 action("stop", "worker-0"), action("resume", {"worker": 0, "text": "Just report."}),
                 action("wait", "worker-0"), SUBMIT],
        "worker": [[bash("sleep 1"), bash("sleep 1"), report("nothing more to find")]],
    }
    result, directory, _ = team(tmp_path, workspace, script, mode="async")
    lead = trajectory(directory, "lead")
    assert "worker-0 [planning, running" in lead["steps"][1]["output"]
    assert lead["steps"][2]["output"].startswith("stopped worker-0") and "ended without a report (stopped)" in \
        lead["steps"][2]["output"]
    assert lead["steps"][3]["output"].startswith("resumed worker-0")
    assert "nothing more to find" in lead["steps"][4]["output"]
    record = delegations(directory)["delegations"][0]
    assert [s["exit_reason"] for s in record["sessions"]] == ["stopped", "submitted"]
    assert record["sessions"][1]["instructions"] == "Just report." and record["state"] == "collected"
    worker = trajectory(directory, "worker-0")
    assert "The lead resumes your work:\nJust report." in worker["messages"][3]["content"]
    assert result.exit_reason == "submitted"


def test_workers_still_running_when_the_lead_runs_out_are_stopped_and_recorded(tmp_path, workspace):
    script = {"lead": [action("delegate", {"stage": "planning", "task": "Look."}), bash("true")],
              "worker": [[bash("sleep 1")] * 6]}
    result, directory, _ = team(tmp_path, workspace, script, mode="async", lead_steps=2)
    assert result.exit_reason == "step_limit" and result.stopped_at_end == ["worker-0"]
    record = delegations(directory)["delegations"][0]
    assert record["stopped_by"] == "end of task" and record["exit_reason"] == "stopped"
    assert result.unread_reports == ["worker-0"]


# -- messages and the directory --------------------------------------------------------------


# Waits (10 s at most) until worker-0's message is on record, however slowly the machine runs.
WAIT_FOR_MESSAGE = "for i in $(seq 100); do grep -q 'line 2 subtracts' {log} 2>/dev/null && break; sleep 0.1; done"


def test_messages_between_workers_are_delivered_and_logged(tmp_path, workspace):
    script = {
        "lead": [action("delegate", [{"stage": "planning", "task": "Find the bug; tell worker-1."},
                                     {"stage": "implementation", "task": "Fix what worker-0 tells you.",
                                      "writable": ["calc.py"]}]),
                 SUBMIT],
        "worker": [[action("message", {"to": "worker-1", "text": "calc.py line 2 subtracts"}), action("directory"),
                    report("told worker-1")],
                   [bash(WAIT_FOR_MESSAGE.format(log=tmp_path / "team" / "messages.json")), bash(FIX),
                    action("message", {"to": "lead", "text": "fixed it"}), report("fixed calc.py as worker-0 said")]],
    }
    result, directory, _ = team(tmp_path, workspace, script)
    assert "+    return a + b" in result.patch
    worker0 = trajectory(directory, "worker-0")
    assert worker0["steps"][0]["output"] == "message sent to worker-1"
    listing = worker0["steps"][1]["output"]
    assert "- lead: waiting for worker-0, worker-1" in listing and "worker-1 [implementation, running" in listing
    worker1 = trajectory(directory, "worker-1")
    before_fix = worker1["messages"][:4]  # the message is read before the worker's second reply (its fix)
    assert worker1["messages"][4]["content"].endswith(f"```bash\n{FIX}\n```")
    assert any('<message from="worker-0">\ncalc.py line 2 subtracts\n</message>' in m["content"]
               for m in before_fix if m["role"] == "user")
    lead_seen = trajectory(directory, "lead")["messages"][3]["content"]
    assert '<message from="worker-1">\nfixed it\n</message>' in lead_seen
    log = json.loads((directory / "messages.json").read_text())
    assert [(m["from"], m["to"], m["text"]) for m in log] == [("worker-0", "worker-1", "calc.py line 2 subtracts"),
                                                              ("worker-1", "lead", "fixed it")]
    assert all(m["delivered"] is not None and m["delivered"] >= m["sent"] for m in log)


def test_messages_can_be_turned_off(tmp_path, workspace):
    script = {"lead": [action("message", {"to": "all", "text": "hi"}), SUBMIT]}
    _, directory, _ = team(tmp_path, workspace, script, messages=False)
    lead = trajectory(directory, "lead")
    assert "no action blocks" in lead["steps"][0]["format_error"]
    assert "```message" not in lead["messages"][0]["content"]


# -- team size and stages --------------------------------------------------------------------


def test_team_size_stage_and_fixed_sizing_are_enforced(tmp_path, workspace):
    three = [{"stage": "planning", "task": f"t{i}"} for i in range(3)]
    script = {"lead": [action("delegate", three), action("delegate", {"stage": "implementation", "task": "fix"}),
                       action("delegate", {"task": "look"}), SUBMIT],
              "worker": [[report("seen")]]}
    result, directory, _ = team(tmp_path, workspace, script, size=2, sizing="fixed", stages="planning")
    lead = trajectory(directory, "lead")
    assert lead["steps"][0]["output"].startswith("error: your team has exactly 2 workers")
    assert lead["steps"][1]["output"] == "error: this team's workers serve only planning, not implementation"
    assert lead["steps"][2]["output"].count("<report from=") == 2  # one task, both workers
    assert delegations(directory)["counts"]["total"] == 2 and result.workers == 2

    script["lead"] = [action("delegate", three), SUBMIT]
    (tmp_path / "capped").mkdir()
    _, directory, _ = team(tmp_path / "capped", workspace, script, size=2)
    assert "needs 3 worker(s) but only 2 of 2 are free" in trajectory(directory, "lead")["steps"][0]["output"]


# -- the task function, the ledger and the run setup ------------------------------------------


def make_task(leaky_repo) -> Task:
    return Task(instance_id="demo__calc-1", repo="demo/calc", base_commit=leaky_repo["base"],
                problem_statement="add() subtracts instead of adding.", repo_language="python",
                fail_to_pass=["test_add"], pass_to_pass=[], selected_test_files_to_run=[],
                before_repo_set_cmd="", dockerhub_tag="unused")


def test_run_one_task_records_lead_and_worker_spend(tmp_path, leaky_repo, monkeypatch):
    from run_sessions import request

    from pipeline.models.budget import Budget
    from pipeline.run.lifecycle import Run
    from pipeline.run.setup import resolve_config
    from pipeline.run.task import run_one_task

    script = {"lead": [action("delegate", {"stage": "implementation", "task": "Fix add.", "writable": ["calc.py"]}),
                       action("wait"), bash("git diff --stat"), SUBMIT],
              "worker": [[bash(FIX), report("fixed")]]}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    spec = {"model": f"scripted/{tmp_path / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"models": {"lead": spec, "worker": spec},
                                                          "team": {"mode": "async"},
                                                          "containers": {"impl": "local_opener:open_local"}}))
    monkeypatch.setenv("SWEPIPE_TEST_REPO", str(leaky_repo["path"]))
    monkeypatch.setenv("SWEPIPE_TEST_BASE", leaky_repo["base"])
    cfg = resolve_config(tmp_path / "config.yaml", [parse_set("strategy=team"), parse_set("team.size=4")])
    assert cfg.team.size == 4 and cfg.team.mode == "async"
    task = make_task(leaky_repo)
    with Run.open(request(cfg, "team-local", tmp_path / "runs")) as run:
        settings = run.settings
        assert run.local_model is None
        prediction = run_one_task(task, settings, Budget("run"))
    assert prediction.strategy == "team" and prediction.source == "team" and prediction.error is None
    assert "+    return a + b" in prediction.model_patch
    assert prediction.cost == pytest.approx({"lead": 4 * REPLY_COST, "worker": 2 * REPLY_COST,
                                                "total": 6 * REPLY_COST})
    assert prediction.tokens["lead"].to_dict() == {"input": 4000, "cached": 0, "output": 400}
    assert prediction.tokens["worker"].to_dict() == {"input": 2000, "cached": 0, "output": 200}
    assert set(prediction.models) == {"lead", "worker"} and prediction.delegations["implementation"] == 1
    paths = settings.layout.task(task.instance_id)
    rows = Ledger.read(paths.ledger)
    assert sorted({(r.stage, r.role, r.agent) for r in rows}) == [("team", "lead", "lead"),
                                                                  ("team", "worker", "worker-0")]
    team_dir = paths.root / "team"
    assert (team_dir / "patch.diff").read_text() == prediction.model_patch
    assert {p.name for p in team_dir.iterdir()} >= {"lead.trajectory.json", "worker-0.trajectory.json",
                                                   "delegations.json", "messages.json", "result.json",
                                                   "commands.jsonl"}
    monkeypatch.setenv("SWEPIPE_TEST_REFUSE", "1")
    again = run_one_task(task, settings, Budget("run"))
    assert again.model_patch == prediction.model_patch and len(Ledger.read(paths.ledger)) == len(rows)


def test_team_options_are_checked_before_anything_runs(tmp_path):
    from pipeline.run.setup import resolve_config

    with pytest.raises(SwepipeError, match="team.size"):
        resolve_config(None, [parse_set(text) for text in ("models.lead.model=scripted/x",
                                                           "models.worker.model=scripted/x", "strategy=team",
                                                           "team.size=17")])


EDIT_FIX = reply("Fix it.\n```edit\ncalc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n"
                 ">>>>>>> REPLACE\n```")


@pytest.mark.slow
@pytest.mark.parametrize("fix", [bash(FIX), EDIT_FIX], ids=["bash", "editor"])
def test_a_killed_team_run_resumes_and_pays_each_reply_once(tmp_path, leaky_repo, fix):
    """SIGKILL while two workers are mid-task; the rerun rebuilds the workspace from the command journal (the
    fix made by a command or by the editor), continues every conversation where it stopped, and the final diff
    holds the workers' changes."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    script = {"lead": [action("delegate", [{"stage": "implementation", "task": "Fix add.", "writable": ["calc.py"]},
                                           {"stage": "planning", "task": "Look around."}]),
                       bash("git diff --stat"), SUBMIT],
              "worker": [[fix, bash("sleep 3 && echo checked"), bash("sleep 3 && echo again"), report("fixed")],
                         [bash("sleep 3 && ls"), bash("sleep 3 && echo more"), report("nothing else")]]}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    spec = {"model": f"scripted/{tmp_path / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "models": {"lead": spec, "worker": spec}, "containers": {"impl": "local_opener:open_local"},
        "team": {"mode": "blocking"}}))
    env = {**os.environ, "SWEPIPE_TEST_REPO": str(leaky_repo["path"]), "SWEPIPE_TEST_BASE": leaky_repo["base"],
           "PYTHONPATH": str(Path(__file__).parent)}
    from pipeline.tasks import load_tasks

    task_id = next(t.instance_id for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))
    command = [sys.executable, "-m", "pipeline.cli", "run", "--strategy", "team", "--instance-ids", task_id,
               "--config", "config.yaml", "--run-id", "team-killed"]
    team_dir = tmp_path / "runs" / "team-killed" / "tasks" / task_id / "team"
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # kill once both workers have run a command and are in the next
            try:
                steps = [trajectory(team_dir, f"worker-{n}").get("steps", []) for n in (0, 1)]
            except (OSError, ValueError):
                steps = [[], []]
            if all(len(s) >= 2 for s in steps):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the team never got to the point where it was to be killed")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    ledger_path = team_dir.parent / "ledger.jsonl"
    paid_before = Ledger.read(ledger_path)
    assert 4 <= len(paid_before) < 3 + 4 + 3 and not (team_dir / "result.json").exists()

    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = Ledger.read(ledger_path)
    calls = [r.agent for r in rows]
    # Every conversation position paid once: the lead 3 replies, worker-0 4, worker-1 3.
    assert (calls.count("lead"), calls.count("worker-0"), calls.count("worker-1")) == (3, 4, 3), calls
    assert all(r.error is None for r in rows)
    prediction = json.loads((tmp_path / "runs" / "team-killed" / "predictions.jsonl").read_text().splitlines()[0])
    assert "+    return a + b" in prediction["model_patch"]  # the fix made before the kill was replayed
    assert prediction["cost"]["total"] == pytest.approx(10 * REPLY_COST)
    lead = trajectory(team_dir, "lead")
    assert lead["resumed"] and "nothing else" in lead["steps"][0]["output"] and "fixed" in lead["steps"][0]["output"]
    journal = [json.loads(line) for line in (team_dir / "commands.jsonl").read_text().splitlines()]
    assert [e["agent"] for e in journal].count("worker-0") == 3 and journal[-1]["agent"] == "lead"
    first = next(e for e in journal if e["agent"] == "worker-0")
    assert ("edit" in first) == (fix is EDIT_FIX) and first["changed"] == ["calc.py"]


# -- the tool-call action format -------------------------------------------------------------


def call(name: str, **arguments) -> dict:
    return {"content": "", "tool_calls": [{"name": name, "arguments": arguments}], "usage": USAGE}


def test_a_team_works_in_the_tool_call_format(tmp_path, workspace):
    delegation = yaml.safe_dump({"stage": "implementation", "task": "Fix add.", "writable": ["calc.py"]})
    script = {
        "lead": [{"content": "", "tool_calls": [{"name": "delegate", "arguments": "calc.py please"}], "usage": USAGE},
                 call("delegate", body=delegation),
                 call("bash", command="git diff --stat"),
                 call("submit")],
        "worker": [[call("bash", command=FIX),
                    call("submit"),  # no report handed in: corrected, as in the text format
                    {"content": "Done.", "tool_calls": [{"name": "submit", "arguments": {
                        "text": "```report\ncalc.py:2 now adds\n```"}}], "usage": USAGE}]],
    }
    result, _, _ = team(tmp_path, workspace, script, lead_steps=8, action_format="tools")
    assert result.exit_reason == "submitted" and "+    return a + b" in result.patch
    saved = trajectory(tmp_path / "team", "lead")
    assert "must be a JSON object" in saved["steps"][0]["format_error"]
    assert "calc.py:2 now adds" in saved["steps"][1]["output"]  # the worker's report, from its submit's text
    assert "`delegate`" in saved["messages"][3]["content"] or "delegate" in saved["messages"][3]["content"]
    assert "through function calls" in saved["messages"][0]["content"]  # the system prompt says how
    worker_steps = trajectory(tmp_path / "team", "worker-0")["steps"]
    assert "report" in worker_steps[1]["format_error"] and worker_steps[2]["format_error"] is None


def test_team_agents_edit_through_the_editor_and_its_writes_are_attributed(tmp_path, workspace):
    """A worker fixes calc.py with str_replace_editor and creates a file outside its folders with it: the fix is
    in the patch, the stray file is reported as surely its; the lead views a file with the same tool."""
    delegation = yaml.safe_dump({"stage": "implementation", "task": "Fix add.", "writable": ["calc.py"]})
    script = {
        "lead": [call("delegate", body=delegation),
                 call("str_replace_editor", command="view", path="calc.py"),
                 call("submit")],
        "worker": [[call("str_replace_editor", command="str_replace", path="calc.py", old_str="return a - b",
                         new_str="return a + b"),
                    call("str_replace_editor", command="create", path="notes.txt", file_text="scratch\n"),
                    call("submit", text="```report\ncalc.py:2 now adds\n```")]],
    }
    result, _, _ = team(tmp_path, workspace, script, lead_steps=8, action_format="tools")
    assert result.exit_reason == "submitted" and "+    return a + b" in result.patch
    assert result.writes_outside == {"worker-0": ["notes.txt"]} and not result.possible_writes_outside
    worker_run = trajectory(tmp_path / "team", "worker-0")
    assert "str_replace_editor" in worker_run["messages"][0]["content"]
    assert [e["command"] for s in worker_run["steps"] for e in s["edits"]] == ["str_replace", "create"]
    lead_run = trajectory(tmp_path / "team", "lead")
    assert "return a + b" in lead_run["steps"][1]["output"]  # the lead's view of the fixed file
    journal = [json.loads(line) for line in (tmp_path / "team" / "commands.jsonl").read_text().splitlines()]
    assert [(e["agent"], e["edit"]["command"]) for e in journal] == [("worker-0", "str_replace"),
                                                                      ("worker-0", "create")]
