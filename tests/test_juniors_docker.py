"""The junior stage in real containers on a bundled task, driven by the scripted model via litellm."""

import json
import threading
import time

import pytest
import yaml
from leftovers import run_containers

from pipeline.evaluation.runner import EvalSettings, evaluate
from pipeline.job import TaskJob
from pipeline.juniors.pool import build_pool
from pipeline.juniors.stage import run_juniors
from pipeline.models.budget import Budget
from pipeline.rundir.layout import TaskPaths
from pipeline.runtime import containers
from pipeline.settings.config import Budgets, Juniors, Limits, RunConfig
from pipeline.settings.model_spec import ModelSpec, Prices
from pipeline.tasks import load_tasks
from pipeline.tasks.datasets import BUNDLED, defaults_for

pytestmark = pytest.mark.docker
TASK = next(t for t in load_tasks(BUNDLED) if t.repo_language == "python")
USAGE = {"prompt_tokens": 100, "completion_tokens": 10}


def reply(content, usage=USAGE):
    return {"content": content, "usage": usage}


def bash(command):
    return reply(f"Next step.\n```bash\n{command}\n```")


SUBMIT = bash("submit")
APPLY_FIX = bash(f"cat > /tmp/fix.diff <<'SWEPIPE_PATCH'\n{TASK.patch}SWEPIPE_PATCH\n"
                 "git apply /tmp/fix.diff && git status --short")

SCRIPTS = [
    [APPLY_FIX, SUBMIT],                                              # 0: fixes and submits
    [bash("ls"), bash("grep -rn 'def ' --include=*.py . | head"), bash("git status"), SUBMIT],  # 1: step limit (3)
    [{"error": "rate_limit"}, {"error": "rate_limit"}, APPLY_FIX, SUBMIT],  # 2: rate limited, then recovers
    [reply("I believe the bug is in the tax code."), reply("Still thinking."), reply("No command again.")],  # 3
    [reply("```bash\nls\n```", {"prompt_tokens": 20_000, "completion_tokens": 10}), SUBMIT],  # 4: over budget
    [bash("sleep 60"), SUBMIT],                                       # 5: its container is killed
]


def junior_job(root, run_id, spec: ModelSpec, **config) -> TaskJob:
    """The junior stage's view of one bundled task, its records under ``root``."""
    return TaskJob(task=TASK, config=RunConfig(models={"junior": spec}, **config), paths=TaskPaths(root),
                   run_id=run_id, image_template=defaults_for(BUNDLED).image_template,
                   budget=Budget("run").child("task", None))


def kill_when_running(run_id, agent, stop):
    """Kill rollout ``agent``'s container while its `sleep 60` runs."""
    while not stop.is_set():
        found = containers.client().containers.list(filters={"label": [f"{containers.RUN_LABEL}={run_id}",
                                                                        f"swepipe.agent={agent}"]},
                                                    ignore_removed=True)  # one removed meanwhile is gone
        if found:
            time.sleep(3)
            found[0].kill()
            return
        time.sleep(0.2)


def test_parallel_rollouts_each_end_their_own_way(tmp_path, run_id):
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"junior": SCRIPTS}))
    spec = ModelSpec(model=f"scripted/{script}", prices=Prices(input=1.0, output=1.0))
    job = junior_job(tmp_path, run_id, spec, limits=Limits(max_steps=3, command_timeout=120),
                     juniors=Juniors(k=len(SCRIPTS), temperatures=[0.0, 0.7]), budgets=Budgets(per_rollout=0.01))
    ledger = job.ledger
    stop = threading.Event()
    killer = threading.Thread(target=kill_when_running, args=(run_id, "rollout-05", stop), daemon=True)
    killer.start()
    try:
        records = run_juniors(job)
    finally:
        stop.set()
    reasons = [r.exit_reason for r in records]
    assert reasons == ["submitted", "step_limit", "submitted", "format_errors", "cost_limit", "runtime_error"]
    assert records[2].trajectory["steps"] and ledger.rows[0] is not None
    assert max(r.retries for r in ledger.rows if r.agent == "rollout-02") == 2
    assert "container" in records[5].error
    assert records[0].temperature == 0.0 and records[1].temperature == 0.7

    # Every rollout leaves a record and its candidate, whatever ended it.
    for index in range(len(SCRIPTS)):
        saved = json.loads((tmp_path / "junior" / f"rollout-{index:02d}.json").read_text())
        assert saved["exit_reason"] == reasons[index]
    assert records[0].patch and records[0].patch == records[2].patch

    # Ledger: exactly the scripted tokens times the prices.
    successful = [r for r in ledger.rows if r.error is None]
    assert len(successful) == 2 + 3 + 2 + 3 + 1 + 1
    assert sum(r.cost for r in ledger.rows) == pytest.approx((11 * 110 + 20_010) / 1e6)
    assert sum(r.cost for r in records) == pytest.approx(sum(r.cost for r in ledger.rows))

    # The two fixing rollouts agree; the pool counts their votes.
    pool = build_pool(TASK.instance_id, records)
    assert pool.candidates[0].votes == 2 and pool.candidates[0].rollouts == [0, 2]
    assert set(pool.candidates[0].files) == {p.split(" b/")[-1] for p in TASK.patch.splitlines()
                                             if p.startswith("diff --git")}

    # The candidate is a real fix: the hidden tests pass with it.
    result = evaluate(TASK, records[0].patch, tmp_path / "eval",
                      EvalSettings(image_template=defaults_for(BUNDLED).image_template,
                                   run_scripts=defaults_for(BUNDLED).run_scripts, run_id=run_id)).to_dict()
    assert result["resolved"], result.get("category")
    assert run_containers(run_id) == []


def test_rollouts_already_on_disk_are_reused(tmp_path, run_id):
    directory = tmp_path / "junior"
    directory.mkdir()
    (directory / "rollout-00.json").write_text(json.dumps({"index": 0, "exit_reason": "submitted", "patch": "x",
                                                           "cost": 1.0}))
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"junior": [[SUBMIT], [SUBMIT]]}))
    job = junior_job(tmp_path, run_id, ModelSpec(model=f"scripted/{script}", free=True),
                     juniors=Juniors(k=2, temperatures=[0.0]))
    records = run_juniors(job)
    assert records[0].patch == "x"  # not rerun
    assert records[1].exit_reason == "submitted" and records[1].index == 1


def test_rollouts_command_prints_the_pool(tmp_path, run_id):
    import subprocess
    import sys

    script = tmp_path / "script.yaml"
    scratch = bash("printf 'print(1)\\n' > reproduce_bug.py")  # a rollout's scratch script, left in the tree
    script.write_text(yaml.safe_dump({"junior": [[APPLY_FIX, SUBMIT], [scratch, SUBMIT]]}))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"models": {"junior": {"model": f"scripted/{script}",
                                                            "prices": {"input": 1, "output": 1}}}}))
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "rollouts", "--task", TASK.instance_id, "-k", "2",
                           "--config", str(config), "--runs-dir", str(tmp_path / "out"), "--run-id", run_id],
                          capture_output=True, text=True, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "1 distinct patch(es) from 2 rollouts" in done.stdout
    assert "no source edit from rollout(s) 1" in done.stdout
    assert "dropped from rollout 1: reproduce_bug.py (" in done.stdout  # and why
    task_dir = tmp_path / "out" / run_id / "tasks" / TASK.instance_id
    pool = json.loads((task_dir / "junior" / "pool.json").read_text())
    assert pool["candidates"][0]["rollouts"] == [0]
    assert len((task_dir / "ledger.jsonl").read_text().splitlines()) == 4
    assert (tmp_path / "out" / run_id / "config.yaml").exists()  # prepared as `swepipe run` prepares a run
