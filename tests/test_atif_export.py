"""`swepipe export --format atif`: scripted pipeline, solo and team runs in local clones (tests/local_opener.py),
exported and checked against the atif package's models and the runs' ledgers."""

from __future__ import annotations

import json
from pathlib import Path

import atif
import pytest
import yaml
from conftest import demo_task
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.records import read_trajectory
from pipeline.records.ledger import read_ledger
from pipeline.rundir.layout import RunLayout

pytestmark = pytest.mark.slow  # three whole runs in local clones, about 30 s

USAGE = {"prompt_tokens": 1000, "completion_tokens": 100}
FIX = "sed -i 's/a - b/a + b/' calc.py"
BRIEF = {"analysis": "add() subtracts", "spans": [{"file": "calc.py", "start": 1, "end": 2, "reason": "add"}]}
PRINCIPAL_EDIT = "calc.py\n```\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n```\n"


def reply(content: str, usage: dict = USAGE) -> dict:
    return {"content": content, "usage": usage}


def bash(command: str) -> dict:
    return reply(f"Next.\n```bash\n{command}\n```")


# Costs differ per reply (a cached prompt, other token counts), so a step's metrics can only equal its own row's.
SCRIPT = {
    "junior": [[bash("cat calc.py"), reply("No block at all."), bash(FIX), bash("submit")],
               [reply(f"Fix.\n```bash\n{FIX}\n```", {"prompt_tokens": 1500, "completion_tokens": 70,
                                                     "cached_tokens": 1200}),
                bash("submit")]],
    "senior": [reply(f"```json\n{json.dumps(BRIEF)}\n```\n```bash\nsubmit\n```")],
    "principal": [reply(PRINCIPAL_EDIT, {"prompt_tokens": 2222, "completion_tokens": 333})],
    "solo": [[bash("cat calc.py"), bash(FIX), reply("Done?"), bash("submit")]],
    "lead": [reply("Team action.\n```delegate\n- stage: implementation\n  task: Fix add.\n  writable: [calc.py]\n```"),
             bash("git diff --stat"), bash("submit")],
    "worker": [[bash(FIX), reply("Finished.\n```report\nfixed\n```\n```bash\nsubmit\n```")]],
}


@pytest.fixture(scope="module")
def runs(leaky_repo, tmp_path_factory):
    """runs/pipeline, runs/solo and runs/team of one task on leaky_repo, each exported as ATIF."""
    where = tmp_path_factory.mktemp("atif-runs")
    task = demo_task(leaky_repo)
    (where / "tasks.jsonl").write_text(task.model_dump_json() + "\n")
    (where / "script.yaml").write_text(yaml.safe_dump(SCRIPT))
    spec = {"model": f"scripted/{where / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}}
    (where / "config.yaml").write_text(yaml.safe_dump({
        "models": {role: spec for role in SCRIPT}, "juniors": {"k": 2}, "limits": {"max_steps": 6},
        "containers": {"impl": "local_opener:open_local"}, "team": {"mode": "blocking"}}))
    runner = CliRunner()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SWEPIPE_TEST_REPO", str(leaky_repo["path"]))
        patch.setenv("SWEPIPE_TEST_BASE", leaky_repo["base"])
        for strategy in ("pipeline", "solo", "team"):
            ran = runner.invoke(app, ["run", "--strategy", strategy, "--dataset", str(where / "tasks.jsonl"),
                                      "--config", str(where / "config.yaml"), "--run-id", strategy,
                                      "--runs-dir", str(where / "runs")])
            assert ran.exit_code == 0, ran.output
            exported = runner.invoke(app, ["export", str(where / "runs" / strategy), "--format", "atif"])
            assert exported.exit_code == 0, exported.output
    return where, task


def exported(where: Path, run: str, instance_id: str) -> dict[str, dict]:
    folder = where / "runs" / run / "export" / "atif" / instance_id
    return {path.name.removesuffix(".atif.json"): json.loads(path.read_text()) for path in folder.iterdir()}


def every_trajectory(trajectory: dict) -> list[dict]:
    return [trajectory] + [sub for embedded in trajectory.get("subagent_trajectories") or []
                           for sub in every_trajectory(embedded)]


@pytest.mark.parametrize("run, agents", [
    ("pipeline", {"junior-rollout-00", "junior-rollout-01", "senior", "principal"}),
    ("solo", {"solo"}),
    ("team", {"lead"}),
])
def test_every_agent_validates_and_the_final_metrics_add_up_to_the_ledger(runs, run, agents):
    where, task = runs
    files = exported(where, run, task.instance_id)
    assert set(files) == agents
    rows = read_ledger(RunLayout(where / "runs" / run).task(task.instance_id).ledger)
    assert rows and len({row.cost for row in rows}) > 1 or run != "pipeline"  # the costs tell rows apart
    trajectories = [t for data in files.values() for t in every_trajectory(data)]
    for trajectory in trajectories:
        atif.Trajectory.model_validate(trajectory)  # raises on anything the specification's models refuse
        assert trajectory["schema_version"] == "ATIF-v1.8"
        assert trajectory["extra"]["swepipe"]["instance_id"] == task.instance_id
    totals = [t["final_metrics"] for t in trajectories]
    assert round(sum(m["total_cost_usd"] for m in totals), 2) == round(sum(row.cost for row in rows), 2)
    assert sum(m["total_cost_usd"] for m in totals) == pytest.approx(sum(row.cost for row in rows), abs=1e-12)
    assert sum(m["total_prompt_tokens"] for m in totals) == sum(row.input_tokens for row in rows)
    assert sum(m["total_completion_tokens"] for m in totals) == sum(row.output_tokens for row in rows)
    assert sum(m["total_cached_tokens"] for m in totals) == sum(row.cached_tokens for row in rows)
    # Each agent step's metrics are its own ledger row's, in order.
    step_costs = sorted(s["metrics"]["cost_usd"] for t in trajectories for s in t["steps"] if s["source"] == "agent")
    assert step_costs == sorted(row.cost for row in rows)


def test_a_junior_s_steps_keep_reply_action_observation_and_its_format_error(runs):
    where, task = runs
    paths = RunLayout(where / "runs" / "pipeline").task(task.instance_id)
    saved = json.loads((paths.junior / "rollout-00.json").read_text())["trajectory"]
    trajectory = exported(where, "pipeline", task.instance_id)["junior-rollout-00"]
    agent = [step for step in trajectory["steps"] if step["source"] == "agent"]
    assert [step["source"] for step in trajectory["steps"][:2]] == ["system", "user"]
    assert [step["message"] for step in agent] == [step["reply"] for step in saved["steps"]]
    assert [(step.get("tool_calls") or [{}])[0].get("function_name") for step in agent] == \
        ["bash", None, "bash", "submit"]
    assert agent[0]["tool_calls"][0]["arguments"] == {"command": "cat calc.py"}
    assert "return a - b" in agent[0]["observation"]["results"][0]["content"]
    assert agent[0]["observation"]["results"][0]["extra"]["exit_code"] == 0
    assert agent[1]["extra"]["format_error"] == saved["steps"][1]["format_error"]
    assert saved["steps"][1]["format_error"] in agent[1]["observation"]["results"][0]["content"]
    assert all(step["timestamp"].endswith("Z") for step in trajectory["steps"])
    rows = [row for row in read_ledger(paths.ledger) if row.agent == "rollout-01"]
    other = exported(where, "pipeline", task.instance_id)["junior-rollout-01"]
    first = next(step for step in other["steps"] if step["source"] == "agent")
    assert (first["metrics"]["prompt_tokens"], first["metrics"]["cached_tokens"],
            first["metrics"]["completion_tokens"], first["metrics"]["cost_usd"]) == \
        (rows[0].input_tokens, rows[0].cached_tokens, rows[0].output_tokens, rows[0].cost) == \
        (1500, 1200, 70, rows[0].cost)
    assert trajectory["extra"]["swepipe"]["submission"] == saved_patch(paths)
    assert trajectory["extra"]["swepipe"]["models"]["principal"].startswith("scripted/")


def saved_patch(paths) -> str:
    return json.loads((paths.junior / "rollout-00.json").read_text())["patch"]


def test_the_principal_s_call_and_the_team_s_workers_linked_from_the_lead(runs):
    where, task = runs
    principal = exported(where, "pipeline", task.instance_id)["principal"]
    assert [step["source"] for step in principal["steps"]] == ["system", "user", "agent"]
    assert principal["steps"][2]["message"] == PRINCIPAL_EDIT
    assert principal["steps"][2]["metrics"]["prompt_tokens"] == 2222
    assert "return a + b" in principal["extra"]["swepipe"]["submission"]

    lead = exported(where, "team", task.instance_id)["lead"]
    workers = lead["subagent_trajectories"]
    assert [worker["trajectory_id"] for worker in workers] == ["worker-0"]
    delegating = lead["steps"][2]
    assert delegating["tool_calls"][0]["function_name"] == "delegate"
    assert delegating["observation"]["results"][0]["subagent_trajectory_ref"] == [{"trajectory_id": "worker-0"}]
    saved = read_trajectory(RunLayout(where / "runs" / "team").task(task.instance_id).team_files.root
                            / "worker-0.trajectory.json").data
    assert [s["message"] for s in workers[0]["steps"] if s["source"] == "agent"] == \
        [step["reply"] for step in saved["steps"]]
    assert workers[0]["extra"]["swepipe"]["role"] == "worker"
