"""`swepipe export`: a run's predictions for the official and swebench harnesses, its trajectories for viewers.

The end-to-end test records a real scripted run of two bundled tasks (one resolved, one left with an empty patch)
and scores the exported official file with `swepipe eval`; the others read hand-built run directories."""

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from pipeline.agent.agent_run import AgentRun, AgentStep
from pipeline.interop.predictions import load_predictions
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.text import patchtext

FIXTURES = Path(__file__).parent / "fixtures" / "runs"


def cli(*args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "COLUMNS": "250", **(env or {})}, stdin=subprocess.DEVNULL)


def ok(*args, cwd, env=None):
    done = cli(*args, cwd=cwd, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


# -- a recorded scripted run of two bundled tasks --------------------------------------------------------


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory):
    """runs/two under a temporary directory: tinyq resolved by the principal; cursorly, given tinyq's script,
    ends with an empty patch (its principal's two replies edit files it does not have). Scored with --evaluate."""
    from scripted_pipeline import edits_from_patch, reply
    from test_run_docker import TASKS, pipeline_script, setup, swepipe

    where = tmp_path_factory.mktemp("export")
    tinyq, cursorly = TASKS["tinyq"], TASKS["cursorly"]
    setup(where, pipeline_script(tinyq, [reply(edits_from_patch(tinyq.patch))] * 2))
    swepipe("run", "--instance-ids", f"{tinyq.instance_id},{cursorly.instance_id}", "--config", "config.yaml",
            "--run-id", "two", "--evaluate", cwd=where)
    layout = RunLayout(where / "runs" / "two")
    finished = finished_predictions(layout.predictions)
    assert set(finished) == {tinyq.instance_id, cursorly.instance_id}
    assert finished[tinyq.instance_id]["resolved"] is True and finished[cursorly.instance_id]["model_patch"] == ""
    return where, layout


@pytest.mark.docker
@pytest.mark.slow
def test_official_export_scores_as_the_run_did(scripted_run):
    where, layout = scripted_run
    done = ok("export", "two", "--format", "official", cwd=where)
    path = where / "runs" / "two" / "export" / "official.json"
    assert f"wrote {Path('runs/two/export/official.json')}" in done.stdout
    assert "2 prediction(s) exported; 1 with an empty patch, exported empty" in done.stdout
    entries = json.loads(path.read_text())
    assert isinstance(entries, list) and len(entries) == 2
    finished = finished_predictions(layout.predictions)
    for entry in entries:
        assert set(entry) == {"instance_id", "patch", "prefix"}  # what swe_bench_pro_eval.py reads
        assert entry["prefix"] == "two" and entry["patch"] == finished[entry["instance_id"]]["model_patch"]

    ok("eval", "--predictions", str(path), "--output", "scored", cwd=where)
    ok("eval", "two", cwd=where)  # the run itself, by its id: its predictions.jsonl into runs/two/eval
    verdicts = set()
    for instance_id, prediction in finished.items():
        ours = json.loads((layout.task(instance_id).eval / "result.json").read_text())
        for scored in (where / "scored", layout.root / "eval"):
            again = json.loads((scored / instance_id / "result.json").read_text())
            for key in ("category", "resolved", "patch_empty", "FAIL_TO_PASS", "PASS_TO_PASS"):
                assert again[key] == ours[key], (scored, instance_id, key)
            assert again["resolved"] == prediction["resolved"]
            verdicts.add(again["category"])
    assert verdicts == {"resolved", "tests_failed"}  # one of each: the comparison can tell them apart


@pytest.mark.docker
@pytest.mark.slow
def test_swebench_export_as_json_list_and_jsonl(scripted_run):
    where, layout = scripted_run
    finished = finished_predictions(layout.predictions)
    ok("export", str(layout.root), "--format", "swebench", "--prefix", "swepipe/two", cwd=where)
    listed = json.loads((layout.root / "export" / "swebench.json").read_text())
    ok("export", "two", "--format", "swebench", "--output", "preds.jsonl", cwd=where)
    lines = (where / "preds.jsonl").read_text().splitlines()
    assert len(listed) == len(lines) == 2
    for entry in listed + [json.loads(line) for line in lines]:
        assert set(entry) == {"instance_id", "model_patch", "model_name_or_path"}
        assert entry["model_patch"] == finished[entry["instance_id"]]["model_patch"]
    assert {e["model_name_or_path"] for e in listed} == {"swepipe/two"}
    assert {json.loads(line)["model_name_or_path"] for line in lines} == {"two"}
    for path in (layout.root / "export" / "swebench.json", where / "preds.jsonl"):  # swepipe eval reads both
        assert {p.instance_id: p.patch for p in load_predictions(path)} == \
            {i: p["model_patch"] for i, p in finished.items()}


@pytest.mark.docker
@pytest.mark.slow
def test_trajectories_export_one_file_per_agent(scripted_run):
    where, layout = scripted_run
    done = ok("export", "two", "--format", "trajectories", "--output", "trajs", cwd=where)
    assert "8 trajectories of 2 task(s) (junior 4, principal 2, senior 2)" in done.stdout
    for instance_id, prediction in finished_predictions(layout.predictions).items():
        paths = layout.task(instance_id)
        folder = where / "trajs" / instance_id
        assert sorted(p.name for p in folder.iterdir()) == [
            "junior-rollout-00.traj.json", "junior-rollout-01.traj.json", "principal.traj.json", "senior.traj.json"]
        for index in (0, 1):
            rollout = json.loads((paths.junior / f"rollout-{index:02d}.json").read_text())
            saved = json.loads((folder / f"junior-rollout-{index:02d}.traj.json").read_text())
            assert saved["trajectory_format"] == "mini-swe-agent-1"
            assert [m["role"] for m in saved["messages"]] == [m["role"] for m in rollout["trajectory"]["messages"]]
            assert [m["content"] for m in saved["messages"]] == \
                [m["content"] for m in rollout["trajectory"]["messages"]]
            assert saved["info"]["exit_status"] == rollout["exit_reason"] == "submitted"
            assert saved["info"]["submission"] == rollout["patch"]
            assert saved["info"]["model_stats"] == {"instance_cost": rollout["cost"], "api_calls": rollout["steps"]}
            assert saved["info"]["config"]["model"]["model_name"] == rollout["model"]
            commands = [m["extra"].get("command") for m in saved["messages"] if m["role"] == "assistant"]
            assert commands == [s["command"] for s in rollout["trajectory"]["steps"]]
        senior = json.loads((paths.senior / "trajectory.json").read_text())
        saved = json.loads((folder / "senior.traj.json").read_text())
        assert [m["role"] for m in saved["messages"]] == [m["role"] for m in senior["messages"]]
        assert saved["info"]["exit_status"] == senior["exit_reason"]
        principal = json.loads((folder / "principal.traj.json").read_text())
        replies = json.loads((paths.principal / "replies.json").read_text())
        roles = [m["role"] for m in principal["messages"]]
        assert roles == ["system"] + ["user", "assistant"] * len(replies)  # two messages a call
        assert [m["content"] for m in principal["messages"] if m["role"] == "assistant"] == \
            [r["content"] for r in replies]
        if prediction["source"] == "principal":
            assert principal["info"]["exit_status"] == "submitted" and len(replies) == 1
            assert principal["info"]["submission"] == prediction["model_patch"]
        else:  # both replies' edits were unusable, so the retry's message sits between them
            assert principal["info"]["exit_status"] == "format_errors" and len(replies) == 2
            assert "could not be applied" in principal["messages"][3]["content"]


# -- hand-built runs: the imperfect inputs ------------------------------------------------------------------

# A patch whose bytes must survive: CRLF line ends, non-ASCII UTF-8, one Latin-1 byte, a JWT-shaped fixture.
ODD_PATCH = patchtext.from_bytes(
    b"diff --git a/notes.txt b/notes.txt\r\n--- a/notes.txt\r\n+++ b/notes.txt\r\n@@ -1 +1,3 @@\r\n"
    b"-caf\xe9\r\n+caf\xc3\xa9 \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac\r\n"
    b"+token = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl'\r\n+end\r\n")


def _agent_run(name: str, exit_reason: str, *, tools: bool = False, secret: str = "") -> dict:
    """An AgentRun as the agent saves it: system, user, then a reply and its observation per step."""
    record = AgentRun(name=name, exit_reason=exit_reason, cost=0.5, input_tokens=30, output_tokens=6)
    record.messages = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix it."}]
    for index, command in enumerate(["ls", f"echo {secret or 'hi'}"]):
        if tools:
            call = {"id": f"call-{index}", "name": "bash", "arguments": json.dumps({"command": command})}
            record.messages.append({"role": "assistant", "content": "",
                                    "tool_calls": [{"id": call["id"], "type": "function",
                                                    "function": {"name": "bash", "arguments": call["arguments"]}}]})
            record.messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok"})
        else:
            record.messages.append({"role": "assistant", "content": f"```bash\n{command}\n```"})
            record.messages.append({"role": "user", "content": "exit code 0"})
        record.steps.append(AgentStep(index=index, reply="", command=command, action="bash", exit_code=0, cost=0.25))
    record.messages.append({"role": "assistant", "content": "```bash\nsubmit\n```"})
    record.steps.append(AgentStep(index=2, reply="", action="submit"))
    return asdict(record)


def _write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _prediction(instance_id: str, patch: str, **extra) -> str:
    return json.dumps({"instance_id": instance_id, "model_patch": patch, "strategy": "solo",
                       "models": {"solo": "scripted/solo"}, **extra}) + "\n"


@pytest.fixture
def odd_run(tmp_path):
    """runs/odd: a solo task with the odd patch, a task with an empty patch, a task whose prediction line was
    cut short by a kill (the last line, no newline), and a task that never finished."""
    root = tmp_path / "runs" / "odd"
    (root / "tasks").mkdir(parents=True)
    for name in ("demo__odd-1", "demo__empty-2", "demo__torn-3", "demo__unfinished-4"):
        (root / "tasks" / name).mkdir()
    _write(root / "tasks" / "demo__odd-1" / "solo" / "trajectory.json", _agent_run("solo", "submitted"))
    _write(root / "tasks" / "demo__odd-1" / "solo" / "result.json", {"exit_reason": "submitted", "patch": ODD_PATCH})
    text = (_prediction("demo__odd-1", ODD_PATCH) + _prediction("demo__empty-2", "", source="none")
            + _prediction("demo__torn-3", "diff --git a/x b/x\n")[:40])
    _write(root / "predictions.jsonl", text)
    return root


def test_official_export_keeps_patch_bytes_and_counts_what_is_left_out(odd_run, tmp_path):
    done = ok("export", "odd", "--format", "official", cwd=tmp_path)
    assert done.stdout.splitlines()[1] == (
        "2 prediction(s) exported; 1 with an empty patch, exported empty (the harness scores it unresolved); "
        "1 patch(es) with bytes that are not UTF-8, kept as \\udcXX escapes (swepipe eval applies them byte for "
        "byte; a harness that writes the patch as UTF-8 text cannot); 2 task(s) without a prediction left out "
        "(unfinished or an infrastructure error; `swepipe run` with the same --run-id finishes them); the last "
        "line of predictions.jsonl was cut short by a killed write and is left out")
    path = odd_run / "export" / "official.json"
    entries = {e["instance_id"]: e for e in json.loads(path.read_text())}
    assert set(entries) == {"demo__odd-1", "demo__empty-2"}
    assert entries["demo__empty-2"] == {"instance_id": "demo__empty-2", "patch": "", "prefix": "odd"}
    assert patchtext.to_bytes(entries["demo__odd-1"]["patch"]) == patchtext.to_bytes(ODD_PATCH)  # CRLF, é, ✓, 0xe9
    assert "eyJhbGciOiJIUzI1NiJ9" in entries["demo__odd-1"]["patch"]  # a fixture in a patch is code, not a secret
    read = {p.instance_id: p for p in load_predictions(path)}  # what swepipe eval applies
    assert patchtext.to_bytes(read["demo__odd-1"].patch) == patchtext.to_bytes(ODD_PATCH)
    assert read["demo__odd-1"].model == "odd"


def test_swebench_jsonl_keeps_patch_bytes(odd_run, tmp_path):
    ok("export", str(odd_run), "--format", "swebench", "--output", str(tmp_path / "p.jsonl"), cwd=tmp_path)
    lines = (tmp_path / "p.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    assert [sorted(e) for e in entries] == [["instance_id", "model_name_or_path", "model_patch"]] * 2
    odd = next(e for e in entries if e["instance_id"] == "demo__odd-1")
    assert patchtext.to_bytes(odd["model_patch"]) == patchtext.to_bytes(ODD_PATCH)


def test_trajectories_of_solo_and_team_keep_roles_and_redact_secrets(tmp_path):
    secret = "s3cr3t-value-of-the-env-7731"
    root = tmp_path / "runs" / "mixed"
    solo, team = root / "tasks" / "demo__solo-1" / "solo", root / "tasks" / "demo__team-2" / "team"
    _write(solo / "trajectory.json", _agent_run("solo", "step_limit", secret=secret))
    _write(solo / "result.json", {"exit_reason": "step_limit", "patch": ODD_PATCH})
    _write(team / "lead.trajectory.json", _agent_run("lead", "submitted", tools=True))
    _write(team / "worker-1.trajectory.json", {**_agent_run("worker-1", "submitted"), "submission": "done: fixed"})
    _write(team / "result.json", {"exit_reason": "submitted", "patch": "diff --git a/t b/t\n"})
    _write(team / "commands.jsonl", "")
    _write(root / "predictions.jsonl", _prediction("demo__solo-1", ODD_PATCH)
           + _prediction("demo__team-2", "diff --git a/t b/t\n", strategy="team",
                         models={"lead": "scripted/lead", "worker": "scripted/worker"}))
    done = ok("export", "mixed", "--format", "trajectories", "--output", "out", cwd=tmp_path,
              env={"MY_SERVICE_API_KEY": secret})
    assert "3 trajectories of 2 task(s) (lead 1, solo 1, worker 1)" in done.stdout
    out = tmp_path / "out"
    saved = json.loads((out / "demo__solo-1" / "solo.traj.json").read_text())
    source = json.loads((solo / "trajectory.json").read_text())
    assert [m["role"] for m in saved["messages"]] == [m["role"] for m in source["messages"]]
    assert saved["info"]["exit_status"] == "step_limit"
    assert patchtext.to_bytes(saved["info"]["submission"]) == patchtext.to_bytes(ODD_PATCH)
    assert saved["info"]["model_stats"] == {"instance_cost": 0.5, "api_calls": 3}
    assert secret not in (out / "demo__solo-1" / "solo.traj.json").read_text()
    assert "echo [redacted]" in saved["messages"][4]["content"]

    lead = json.loads((out / "demo__team-2" / "lead.traj.json").read_text())
    assert [m["role"] for m in lead["messages"]] == ["system", "user", "assistant", "tool", "assistant", "tool",
                                                     "assistant"]
    assert lead["messages"][2]["tool_calls"][0]["function"]["name"] == "bash"
    assert lead["info"]["submission"] == "diff --git a/t b/t\n"  # the team's patch
    assert lead["info"]["config"]["model"] == {"model_name": "scripted/lead"}
    worker = json.loads((out / "demo__team-2" / "worker-1.traj.json").read_text())
    assert worker["info"]["submission"] == "done: fixed" and worker["info"]["config"]["model"]["model_name"] == \
        "scripted/worker"


@pytest.mark.parametrize("args, says", [
    (["export", "nope"], "unknown run 'nope'"),
    (["export", "odd", "--format", "csv"], "unknown --format 'csv'"),
    (["export", "odd", "--format", "trajectories"], "--format trajectories needs --output DIR"),
    (["export", "odd", "--format", "swebench", "--output", "p.txt"], "reads only .json"),
    (["export", "odd", "--prefix", "a/b"], "--prefix 'a/b'"),
])
def test_bad_input_exits_2_naming_it(odd_run, tmp_path, args, says):
    done = cli(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in " ".join(done.stderr.split()), done.stderr


def test_a_run_without_predictions_exits_2(tmp_path):
    done = cli("export", str(FIXTURES / "empty"), cwd=tmp_path)  # one unfinished task, no predictions.jsonl
    assert done.returncode == 2
    assert "has no predictions yet (1 task(s) unfinished): nothing to export" in " ".join(done.stderr.split())
    assert not (FIXTURES / "empty" / "export").exists()


def test_a_run_id_is_found_under_runs_even_beside_a_folder_of_that_name(odd_run, tmp_path):
    (tmp_path / "odd").mkdir()  # not a run: the run id names runs/odd
    done = ok("export", "odd", "--format", "swebench", cwd=tmp_path)
    assert f"wrote {Path('runs/odd/export/swebench.json')}" in done.stdout
    assert len(json.loads((odd_run / "export" / "swebench.json").read_text())) == 2
