"""Budgets that hold: a call's worst case is reserved before it is made and settled to its real cost after,
so no budget (rollout, task, run) is ever passed, with parallel rollouts and tasks, across a kill and a
rerun, and with part of the task's budget held back for the principal. The model calls go through
litellm with the scripted model; workspaces are local clones (tests/local_opener.py)."""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import demo_task

from pipeline.control import stopping
from pipeline.errors import SwepipeError
from pipeline.job import TaskJob
from pipeline.juniors.stage import run_juniors
from pipeline.models.budget import Budget, CostLimitExceeded
from pipeline.models.client import DEFAULT_MAX_TOKENS, ModelClient, count_input_tokens
from pipeline.models.ledger import Ledger
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout, TaskPaths
from pipeline.settings.config import Budgets, Containers, Juniors, RunConfig, load_config
from pipeline.settings.config_overlay import parse_set
from pipeline.settings.model_spec import ModelSpec, Prices

TESTS = Path(__file__).parent
LOCAL = Containers(impl="local_opener:open_local")


def bash(command, usage=None, delay=None):
    reply = {"content": f"Next.\n```bash\n{command}\n```"}
    if usage:
        reply["usage"] = usage
    if delay:
        reply["delay"] = delay
    return reply


def script_client(tmp_path, script, role="principal", **spec):
    path = tmp_path / f"{role}-{len(list(tmp_path.glob('*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(script))
    spec.setdefault("prices", Prices(input=1.0, output=2.0))
    return ModelClient(ModelSpec(model=f"scripted/{path}", **spec), role, Ledger(), task="t", scope=str(path),
                       backoff_base=0.01)


HI = [{"role": "user", "content": "Fix the bug."}]


# -- the budget tree ----------------------------------------------------------------------------


def test_reservations_from_many_threads_never_pass_any_limit():
    run = Budget("run", 6.0)
    tasks = [run.child(f"task {n}", 2.5) for n in range(3)]
    rollouts = [task.child(f"rollout {n}", 1.0) for task in tasks for n in range(4)]
    nodes = [run, *tasks, *rollouts]
    broken, refused, made = [], [0], [0]
    charged = {id(node): 0.0 for node in nodes}
    counts = threading.Lock()

    def invariant() -> None:
        with Budget._lock:
            for node in nodes:
                if node.limit is not None and node.spent + node.reserved > node.limit + 1e-9:
                    broken.append((node.scope, node.spent, node.reserved))

    def hammer(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(400):
            budget = rng.choice(rollouts)
            worst = rng.uniform(0.01, 0.3)
            try:
                reservation = budget.reserve(worst)
            except CostLimitExceeded:
                with counts:
                    refused[0] += 1
                continue
            invariant()
            time.sleep(rng.uniform(0, 0.001))
            cost = rng.uniform(0, worst) * rng.choice([0.0, 0.01, 1.0])  # a failed call, a cheap one, any
            reservation.settle(cost)
            reservation.settle(cost)  # settling twice changes nothing
            with counts:
                made[0] += 1
                node = budget
                while node is not None:
                    charged[id(node)] += cost
                    node = node.parent

    threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        invariant()
    for thread in threads:
        thread.join()
    invariant()
    assert broken == [] and made[0] > 100 and refused[0] > 100  # contended, and never over any limit
    for node in nodes:
        assert node.reserved == 0.0 and node.spent == pytest.approx(charged[id(node)])


def test_a_reservation_that_does_not_fit_is_refused_and_settling_releases_it():
    task = Budget("run", 10.0).child("task X", 1.0)
    rollout = task.child("rollout-00", 0.9)
    first = rollout.reserve(0.6)
    assert task.reserved == pytest.approx(0.6) and task.parent.reserved == pytest.approx(0.6)
    with pytest.raises(CostLimitExceeded, match="rollout-00 budget of \\$0.9000 cannot cover") as refused:
        rollout.reserve(0.31)
    assert refused.value.needed == pytest.approx(0.31) and rollout.reserved == pytest.approx(0.6)  # nothing held
    sibling = task.child("rollout-01", None)
    with pytest.raises(CostLimitExceeded, match="task X budget"):
        sibling.reserve(0.5)  # the rollout's reservation holds the task's budget too
    first.settle(0.2)
    assert (rollout.spent, rollout.reserved, task.spent, task.parent.spent) == (0.2, 0.0, 0.2, 0.2)
    second = sibling.reserve(0.8)  # released: it fits now
    assert sibling.reserve(0.0) is not None  # a free call reserves nothing and always fits
    second.release()
    assert task.spent == pytest.approx(0.2) and task.reserved == 0.0
    task.seed(0.5)  # an earlier session's spend: this budget only
    assert task.spent == pytest.approx(0.7) and task.parent.spent == pytest.approx(0.2)
    assert task.left == pytest.approx(0.3)


def test_principal_reserve_must_be_part_of_the_task_budget(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"budgets": {"per_task": 1.0, "principal_reserve": 1.5}}))
    with pytest.raises(SwepipeError, match="principal_reserve .* is more than per_task"):
        load_config(path)
    path.write_text(yaml.safe_dump({"budgets": {"per_task": 1.0, "principal_reserve": 0.3}}))
    assert load_config(path).budgets.principal_reserve == 0.3
    assert Budgets(principal_reserve=0.3).per_task is None  # no task limit: nothing to hold back from


# -- the client: reserve, call, settle ------------------------------------------------------------


def test_a_call_whose_worst_case_does_not_fit_is_not_made(tmp_path):
    client = script_client(tmp_path, {"principal": [{"content": "first", "usage": {"prompt_tokens": 10,
                                                                                   "completion_tokens": 10}}]},
                           max_tokens=1000, prices=Prices(input=1.0, output=100.0))
    worst = client.worst_case(HI)
    assert worst == pytest.approx((count_input_tokens(client.spec.model, HI) * 1.0 + 1000 * 100.0) / 1e6)
    budget = Budget("task", worst * 0.99)  # the reply would cost far less, but might cost this much
    with pytest.raises(CostLimitExceeded, match="cannot cover the next call"):
        client.complete(HI, budget)
    assert client.ledger.rows == [] and budget.spent == 0 and budget.reserved == 0
    roomy = Budget("task", worst)
    assert client.complete(HI, roomy).content == "first"  # the script was not used up by the refused call
    assert roomy.spent == pytest.approx((10 * 1.0 + 10 * 100.0) / 1e6) and roomy.reserved == 0


def test_max_tokens_is_sent_so_the_worst_case_bounds_the_bill(tmp_path):
    greedy = {"content": "a very long answer", "usage": {"prompt_tokens": 10, "completion_tokens": 50_000}}
    configured = script_client(tmp_path, {"principal": [greedy]}, max_tokens=700)
    budget = Budget("task", 1.0)
    assert configured.complete(HI, budget).output_tokens == 700  # the provider held to what it was sent
    assert budget.spent <= configured.worst_case(HI)
    default = script_client(tmp_path, {"principal": [greedy]})
    assert default.max_tokens == DEFAULT_MAX_TOKENS  # litellm knows no limit for this model
    assert default.complete(HI, Budget("task")).output_tokens == DEFAULT_MAX_TOKENS
    free = script_client(tmp_path, {"principal": [greedy]}, prices=None, free=True)
    assert free.worst_case(HI) == 0 and free.sent_max_tokens is None  # nothing to bound, nothing reserved
    assert free.complete(HI, Budget("task", 0.0)).output_tokens == 50_000


def test_failed_calls_record_and_settle_what_the_provider_billed(tmp_path):
    billed = {"prompt_tokens": 400, "completion_tokens": 100}
    script = {"principal": [{"error": "server_error", "usage": billed}, {"error": "timeout"},
                            {"content": "done", "usage": {"prompt_tokens": 500, "completion_tokens": 50}},
                            {"error": "auth", "usage": billed}]}
    client = script_client(tmp_path, script)
    budget = Budget("task", 1.0)
    reply = client.complete(HI, budget)
    row = client.ledger.rows[0]
    assert (row.retries, row.input_tokens, row.output_tokens, row.error) == (2, 900, 150, None)
    assert row.cost == pytest.approx((900 * 1.0 + 150 * 2.0) / 1e6) == pytest.approx(reply.cost)
    with pytest.raises(stopping.Stopped, match="AuthenticationError"):  # a configuration error stops the run
        client.complete([*HI, {"role": "assistant", "content": "done"}, {"role": "user", "content": "go on"}], budget)
    row = client.ledger.rows[1]
    assert "AuthenticationError" in row.error and (row.input_tokens, row.output_tokens) == (400, 100)
    assert row.cost == pytest.approx(600 / 1e6)
    assert budget.spent == pytest.approx(sum(r.cost for r in client.ledger.rows)) and budget.reserved == 0


def test_a_retry_that_no_longer_fits_is_not_made_and_the_failed_attempt_is_recorded(tmp_path):
    script = {"principal": [{"error": "rate_limit", "usage": {"prompt_tokens": 0, "completion_tokens": 600}},
                            "never paid for"]}
    client = script_client(tmp_path, script, max_tokens=1000, prices=Prices(input=0.0, output=1000.0))
    budget = Budget("task", 1.5)  # room for one worst case ($1), not for a second after $0.60 was billed
    with pytest.raises(CostLimitExceeded):
        client.complete(HI, budget)
    [row] = client.ledger.rows
    assert "RateLimitError" in row.error and "not retried" in row.error and row.cost == pytest.approx(0.6)
    assert budget.spent == pytest.approx(0.6) and budget.reserved == 0


# -- the real junior stage, K rollouts sharing a task budget -------------------------------------------


EXPENSIVE = {"prompt_tokens": 300, "completion_tokens": 900}  # $0.0003 + $0.27 at the prices below
PRICES = {"input": 1.0, "output": 300.0}  # with max_tokens 1000: a worst case of about $0.30 a call


def test_four_parallel_rollouts_never_spend_more_than_the_task_budget(tmp_path, local_repo, run_id):
    """K=4 rollouts making ~$0.27 calls (worst case ~$0.30) under a $1.00 task budget: before reservations,
    all four passed the check together and spent $1.08 and more."""
    scripts = [[bash("ls", EXPENSIVE, delay=1.0), bash("git status", EXPENSIVE, delay=1.0),
                bash("git log --oneline | head", EXPENSIVE), bash("submit", EXPENSIVE)] for _ in range(4)]
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"junior": scripts}))
    spec = ModelSpec(model=f"scripted/{tmp_path / 'script.yaml'}", prices=Prices(**PRICES), max_tokens=1000)
    task_budget = Budget("run").child("task demo__calc-1", 1.00)
    job = TaskJob(task=demo_task(local_repo), config=RunConfig(models={"junior": spec}, juniors=Juniors(k=4),
                                                               containers=LOCAL),
                  paths=TaskPaths(tmp_path / "task"), run_id=run_id, image_template="unused", budget=task_budget)
    records = run_juniors(job)
    rows = Ledger.read(job.paths.ledger)
    spent = sum(r.cost for r in rows)
    assert spent <= 1.00 and task_budget.spent == pytest.approx(spent) and task_budget.reserved == 0
    assert len(rows) == 3 and all(r.error is None for r in rows)  # a 4th call could cost more than what is left
    assert [r.exit_reason for r in records] == ["cost_limit"] * 4  # none got the 4 replies it needed
    assert all("cannot cover the next call" in r.error for r in records)
    assert sum(r.cost for r in records) == pytest.approx(spent)


def test_parallel_tasks_never_spend_more_than_the_run_budget(tmp_path, local_repo):
    from run_sessions import request

    from pipeline.run.lifecycle import Run
    from pipeline.run.setup import resolve_config
    from pipeline.run.thread_executor import run_tasks

    scripts = [[bash("ls", EXPENSIVE, delay=1.0), bash("git status", EXPENSIVE), bash("submit", EXPENSIVE)]]
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"junior": scripts}))
    spec = {"model": f"scripted/{tmp_path / 'script.yaml'}", "prices": PRICES, "max_tokens": 1000}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "models": {"junior": spec}, "juniors": {"k": 2}, "budgets": {"per_run": 1.00},
        "containers": {"impl": "local_opener:open_local"}}))
    config = resolve_config(tmp_path / "config.yaml", [parse_set("strategy=vote")])
    tasks = [demo_task(local_repo, n) for n in range(3)]
    with Run.open(request(config, "parallel", tmp_path / "runs")) as run:
        settings = run.settings
        summary = run_tasks(tasks, settings, workers=3, show_progress=False)
    assert len(summary.predictions) == 3
    rows = [row for task in tasks for row in Ledger.read(settings.layout.task(task.instance_id).ledger)]
    assert sum(r.cost for r in rows) <= 1.00 and len(rows) == 3  # six rollouts at once, three calls paid
    assert sum(p.cost["total"] for p in summary.predictions.values()) == pytest.approx(sum(r.cost for r in rows))


# -- the principal's reserve ------------------------------------------------------------------------


PRINCIPAL_EDIT = ("calc.py\n```\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n"
                  ">>>>>>> REPLACE\n```\n")


def _pipeline_run(tmp_path, leaky_repo, name, budgets):
    from run_sessions import request

    from pipeline.run.lifecycle import Run
    from pipeline.run.setup import resolve_config
    from pipeline.run.task import run_one_task, seeded_run_budget

    call = {"prompt_tokens": 300, "completion_tokens": 300}  # $0.0003 + $0.09; a worst case of ~$0.09
    script = {"junior": [[bash(f"ls # {n}", call) for n in range(12)]],
              "senior": [bash("ls", call), {"content": "no brief", "usage": call}],
              "principal": [{"content": PRINCIPAL_EDIT, "usage": call}]}
    directory = tmp_path / name
    directory.mkdir()
    (directory / "script.yaml").write_text(yaml.safe_dump(script))
    spec = {"model": f"scripted/{directory / 'script.yaml'}", "prices": PRICES, "max_tokens": 300}
    (directory / "config.yaml").write_text(yaml.safe_dump({
        "models": {role: spec for role in ("junior", "senior", "principal")}, "juniors": {"k": 2},
        "limits": {"max_steps": 12}, "budgets": budgets, "containers": {"impl": "local_opener:open_local"}}))
    config = resolve_config(directory / "config.yaml")
    task = demo_task(leaky_repo)
    with Run.open(request(config, name, directory / "runs")) as run:
        settings = run.settings
        prediction = run_one_task(task, settings, seeded_run_budget(settings))
    return prediction, Ledger.read(settings.layout.task(task.instance_id).ledger)


@pytest.mark.slow
def test_juniors_cannot_starve_the_principal_of_its_reserve(tmp_path, local_repo):
    prediction, rows = _pipeline_run(tmp_path, local_repo, "reserved",
                                     {"per_task": 1.00, "principal_reserve": 0.30})
    spend = {stage: sum(r.cost for r in rows if r.stage == stage) for stage in ("junior", "senior", "principal")}
    assert spend["junior"] + spend["senior"] <= 0.70 and sum(spend.values()) <= 1.00
    principal = [r for r in rows if r.stage == "principal"]
    assert len(principal) == 1 and principal[0].error is None  # the frontier call was made
    assert prediction.source == "principal" and "+    return a + b" in prediction.model_patch

    # Without the reserve, the same juniors spend the task's budget and the principal call is refused.
    prediction, rows = _pipeline_run(tmp_path, local_repo, "unreserved", {"per_task": 1.00})
    assert sum(r.cost for r in rows) <= 1.00 and [r for r in rows if r.stage == "principal"] == []
    assert prediction.source != "principal"


# -- a kill -9 and a rerun with what is left -------------------------------------------------------


@pytest.mark.slow
def test_a_rerun_after_kill_9_goes_on_with_what_is_left_and_never_above(tmp_path, leaky_repo):
    """Session 1 (no task limit) is killed in the senior's first command, after four paid junior calls (one of
    them a failed attempt the provider billed) and one senior call. Session 2 runs with a per_task budget
    $0.15 above what session 1 spent: one more ~$0.10 call fits, the next does not. Before, the rerun's task
    budget started from the senior's trajectory alone and paid for the rest of the task."""
    call = {"prompt_tokens": 500, "completion_tokens": 1000}  # $0.0005 + $0.10; a worst case of ~$0.10
    fix = "sed -i 's/a - b/a + b/' calc.py"
    script = {"junior": [[bash(fix, call), bash("submit", call)],
                         [{"error": "server_error", "usage": {"prompt_tokens": 500, "completion_tokens": 200}},
                          bash(fix, call), bash("submit", call)]],
              "senior": [bash("sleep 8 && echo looked", call), bash("echo again", call),
                         {"content": "still looking", "usage": call}],
              "principal": [{"content": PRINCIPAL_EDIT, "usage": call}]}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    spec = {"model": f"scripted/{tmp_path / 'script.yaml'}", "prices": {"input": 1.0, "output": 100.0},
            "max_tokens": 1000}

    def write_config(budgets):
        (tmp_path / "config.yaml").write_text(yaml.safe_dump({
            "models": {role: spec for role in ("junior", "senior", "principal")}, "juniors": {"k": 2},
            "budgets": budgets, "containers": {"impl": "local_opener:open_local"}}))

    from pipeline.tasks import load_tasks

    task = next(t for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))  # the opener gives the demo repo
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "SWEPIPE_TEST_REPO": str(leaky_repo["path"]), "SWEPIPE_TEST_BASE": leaky_repo["base"],
           "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)]), "TMPDIR": str(tmp_path / "tmp")}
    command = [sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", task.instance_id, "--config",
               "config.yaml", "--run-id", "budget-killed"]
    paths = RunLayout(tmp_path / "runs" / "budget-killed").task(task.instance_id)
    write_config({})
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # kill in the senior's `sleep 8`, its first reply paid
            if sum(1 for r in Ledger.read(paths.ledger) if r.stage == "senior"):
                time.sleep(1.0)
                break
            time.sleep(0.2)
        else:
            pytest.fail("the run never got to the senior")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    before = Ledger.read(paths.ledger)
    assert [r.stage for r in before].count("junior") == 4 and [r.stage for r in before].count("senior") == 1
    assert any(r.retries == 1 and r.input_tokens == 1000 for r in before)  # the billed failed attempt
    spent_before = sum(r.cost for r in before)
    killed = RunLayout(tmp_path / "runs" / "budget-killed")
    assert 0.45 < spent_before < 0.55 and not finished_predictions(killed.predictions)

    limit = round(spent_before + 0.15, 6)
    write_config({"per_task": limit})
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = Ledger.read(paths.ledger)
    total = sum(r.cost for r in rows)
    assert total <= limit  # both sessions together
    assert len(rows) == len(before) + 1 and rows[-1].stage == "senior"  # what was left paid for one more call
    prediction = finished_predictions(RunLayout(tmp_path / "runs" / "budget-killed").predictions)[task.instance_id]
    assert prediction["cost"]["total"] == pytest.approx(total)
    brief = json.loads((paths.senior / "brief.json").read_text())
    assert brief["senior_exit"] == "cost_limit"
    result = json.loads((paths.principal / "result.json").read_text())
    assert "budget" in (result["error"] or "") and result["calls"] == 0  # the principal call was not made


def test_no_reserve_is_held_for_a_principal_switched_off(tmp_path, local_repo):
    """With --principal-model none nothing would ever spend the reserve: juniors and the senior get all of per_task."""
    from run_sessions import session

    from pipeline.run.setup import resolve_config
    from pipeline.run.task import seeded_run_budget, task_job

    spec = {"model": f"scripted/{tmp_path / 'script.yaml'}", "prices": PRICES}
    jobs = {}
    for principal in ("scripted", "none"):
        directory = tmp_path / principal
        directory.mkdir()
        models = {"junior": spec, "senior": spec, "principal": spec if principal == "scripted" else {"model": "none"}}
        (directory / "config.yaml").write_text(yaml.safe_dump({
            "models": models, "juniors": {"k": 1}, "budgets": {"per_task": 1.0, "principal_reserve": 0.3},
            "containers": {"impl": "local_opener:open_local"}}))
        settings = session(resolve_config(directory / "config.yaml"), principal, directory / "runs")
        jobs[principal] = task_job(demo_task(local_repo), settings, seeded_run_budget(settings))
    assert jobs["scripted"].stage_budget is not None and jobs["scripted"].stage_budget.limit == pytest.approx(0.7)
    assert jobs["none"].stage_budget is None
