"""Cluster faults on a real local Ray cluster (tests/ray_cluster.py) are never results: the run's budget actor
timing out or dying is a ClusterFault and leaves no hold; a task whose last writes did not reach the driver is not
recorded as done; a fault stop on a node stops the whole run with its reason and code; an infrastructure fault a Ray
task raises reaches the driver as infrastructure. And a run's records are its own: another run's cleanup,
whose id starts the same, touches none of them."""

import json
import subprocess
import sys
import threading
import time

import pytest
import yaml
from leftovers import lasting_files
from live_runs import live_steps
from ray_cluster import no_containers_left, scratch_left
from scripted_pipeline import SUBMIT, edits_from_patch, reply, write_config
from test_outages_docker import FAULTS
from test_ray_executor import FIRST, SECOND, slow_script
from test_run_docker import pipeline_script, setup, swepipe

from pipeline.control import stopping
from pipeline.errors import ClusterFault
from pipeline.models.ledger import Ledger
from pipeline.records.prediction import finished_predictions
from pipeline.run.ray import driver as ray_driver
from pipeline.run.ray.actors import RemoteRunBudget, RunBudgetKeeper, ray_reason
from pipeline.run.ray.connect import RESOURCE
from pipeline.rundir.layout import RunLayout
from pipeline.settings.config_overlay import parse_set
from pipeline.tasks import load_tasks

TASKS = {t.repo.split("/")[-1]: t for t in load_tasks("bundled")}


# ---------------------------------------------------------------- the run's budget


def test_a_hold_released_by_its_caller_is_never_granted_later():
    keeper = RunBudgetKeeper(1.0, spent=0.0)
    keeper.release("late")  # the caller's reserve timed out before the keeper got to it
    assert keeper.reserve(0.5, "task#1", "late") == (False, None)
    assert keeper.left() == pytest.approx(1.0) and keeper.holds == {}
    assert keeper.reserve(0.5, "task#1", "granted") == (True, None)
    keeper.release("granted")  # timed out after the keeper granted it: the hold goes, nothing is spent
    assert keeper.left() == pytest.approx(1.0) and keeper.spent() == 0.0


def test_a_ray_error_keeps_why_the_worker_died_on_one_line():
    class ActorDiedError(Exception):
        pass

    error = ActorDiedError("The actor died unexpectedly before finishing this task.\n\tclass_name: Keeper\n"
                           "\tpid: 123\nThe actor is dead because its worker process has died. Worker exit type: "
                           "SYSTEM_ERROR Worker exit detail: killed by the OOM killer")
    reason = ray_reason(error)
    assert reason.startswith("ActorDiedError: The actor died unexpectedly") and "\n" not in reason
    assert reason.endswith("killed by the OOM killer")
    assert len(ray_reason(ActorDiedError("x" * 10_000))) < 700


@pytest.fixture
def on_cluster(cluster, monkeypatch):
    """This process as a driver of the local cluster; the stop state it may set is forgotten afterwards."""
    from ray._private import ray_constants

    from pipeline.run.ray.connect import connect

    # What RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 says, which Ray reads once, when this process (the cluster's
    # fixture) imported it: 127.0.0.1 stays loopback instead of becoming this machine's other address.
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    ray = connect(cluster.address)
    yield ray
    ray.shutdown()
    stopping.reset()


@pytest.mark.slow
def test_a_budget_actor_that_times_out_or_dies_is_a_cluster_fault_and_leaves_no_hold(on_cluster):
    ray = on_cluster
    from pipeline.run.ray.connect import head_affinity

    class SlowKeeper(RunBudgetKeeper):
        """The head busy past the caller's timeout: the grant comes after the caller gave up."""

        def reserve(self, amount, owner, hold):
            time.sleep(2)
            return super().reserve(amount, owner, hold)

    slow = ray.remote(SlowKeeper).options(**head_affinity()).remote(1.0, 0.0)
    remote = RemoteRunBudget(slow, "task#1", timeout=0.5)
    with pytest.raises(ClusterFault, match="did not answer within 0.5 s"):
        remote.reserve(0.4)
    time.sleep(3)  # the keeper has answered the late reserve, and the release queued after it
    assert ray.get(slow.left.remote()) == pytest.approx(1.0)  # no hold left for the rest of the run
    assert ray.get(slow.spent.remote()) == 0.0

    keeper = ray.remote(RunBudgetKeeper).options(**head_affinity()).remote(1.0, 0.0)
    remote = RemoteRunBudget(keeper, "task#2", timeout=10)
    hold = remote.reserve(0.3)
    ray.kill(keeper)
    with pytest.raises(ray.exceptions.RayActorError):  # ray.kill returns before the actor is gone
        for _ in range(300):
            ray.get(keeper.left.remote())
            time.sleep(0.1)
    with pytest.raises(ClusterFault, match=r"is gone \(ActorDiedError: .*killed by `ray.kill`"):  # Ray's why, kept
        remote.settle(hold, 0.3, 0.1)
    with pytest.raises(ClusterFault, match="is gone"):
        remote.reserve(0.1)
    # What a task budget under it makes of that: the fault, and nothing held locally.
    from pipeline.models.budget import Budget

    task = Budget("run", 1.0, remote=remote).child("task", 0.5)
    with pytest.raises(ClusterFault):
        task.reserve(0.2)
    assert task.reserved == 0 and task.parent.reserved == 0


# ---------------------------------------------------------------- what Ray tasks end with, at the driver


class Probe(ray_driver.RayDriver):
    """A RayDriver whose items are names and whose Ray task is ``body(item, key, queue)``."""

    def __init__(self, ray, root, body):
        self.lines, self.results, self.errors = [], {}, {}
        super().__init__(ray, root, "probe", 1, False, self.lines.append, has_work=True)
        self.body = ray.remote(body).options(num_cpus=0, resources={RESOURCE: 1}, max_retries=0,
                                             retry_exceptions=False)

    def item_id(self, item):
        return item

    def ship(self, item, key):
        return self.body.remote(item, key, self.queue)

    def completed(self, item, result):
        self.results[item] = result

    def give_up(self, item, error):
        self.errors[item] = error


@pytest.mark.slow
def test_an_infrastructure_fault_raised_in_a_ray_task_is_infra_and_the_worker_serves_on(on_cluster, tmp_path):
    def body(item, key, queue):
        import os

        from pipeline.errors import ClusterFault

        if item == "faulty":
            raise ClusterFault("the head went away")  # Ray hands it over as a task error
        return {"pid": os.getpid()}

    probe = Probe(on_cluster, tmp_path, body)
    assert probe.execute(["faulty", "fine"], total=2)
    assert "ClusterFault: the head went away" in probe.errors["faulty"]
    assert set(probe.results) == {"fine"}


@pytest.mark.slow
def test_a_fault_stop_on_a_node_stops_the_run_with_its_reason_and_code(on_cluster, tmp_path):
    def body(item, key, queue):
        from pipeline.control import stopping
        from pipeline.run.ray.node import stopped_here

        stopping.fault("the model endpoint scripted is down: a configuration error", 2)  # as the node's stage did
        ended = stopped_here("node")
        stopping.reset()
        return ended

    probe = Probe(on_cluster, tmp_path, body)
    assert not probe.execute(["one"], total=1)  # stopped
    assert stopping.reason() == "the model endpoint scripted is down: a configuration error"
    assert stopping.exit_code() == 2
    assert probe.results == {} and probe.errors == {}  # nothing recorded


@pytest.mark.docker
@pytest.mark.slow
def test_a_task_whose_last_writes_did_not_reach_the_driver_is_not_done_and_reruns(cluster, on_cluster, tmp_path,
                                                                                   monkeypatch):
    from run_sessions import request

    from pipeline.run.lifecycle import Run
    from pipeline.run.ray.executor import RayRun
    from pipeline.run.setup import resolve_config
    from pipeline.rundir import storage

    task = FIRST
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"junior": [[SUBMIT]]}))
    write_config(tmp_path / "config.yaml", tmp_path / "script.yaml", juniors={"k": 1},
                 executor={"kind": "ray", "ray_address": "auto"})
    # The driver's write queue falls behind: the ledger row is not applied until the task has returned and the
    # driver waits for its last writes, and then takes 3 s, longer than a flush (and the node's wait for its
    # acknowledgement) may wait. Held until then, not merely slow: a slow machine's rollout outlasts any fixed delay.
    monkeypatch.setattr(ray_driver, "FLUSH_TIMEOUT", 1.0)
    apply, flush = storage.apply_mirrored, RayRun.flush
    finishing = threading.Event()

    def slow_ledger(root, op, relative, data):
        if relative.endswith("ledger.jsonl"):
            finishing.wait(120)
            time.sleep(3)
        apply(root, op, relative, data)

    def flush_at_the_end(self, timeout=None):
        finishing.set()
        return flush(self, timeout)

    monkeypatch.setattr(storage, "apply_mirrored", slow_ledger)
    monkeypatch.setattr(RayRun, "flush", flush_at_the_end)
    config = resolve_config(tmp_path / "config.yaml", [parse_set("strategy=vote")])
    lines = []
    with Run.open(request(config, "behind", tmp_path / "runs")) as run:
        settings = run.settings
        driver = RayRun(on_cluster, [task], settings, False, lines.append)
        summary = driver.execute()
        driver.drainer.join(timeout=30)
    layout = settings.layout
    assert finished_predictions(layout.predictions) == {} and not layout.predictions.exists(), lines
    infra = [json.loads(line) for line in (layout.root / "infra_errors.jsonl").read_text().splitlines()]
    assert [row["instance_id"] for row in infra] == [task.instance_id]
    assert "did not reach the driver" in infra[0]["error"] and task.instance_id in summary.infra_errors
    assert any("did not reach the driver in time" in line for line in lines)

    monkeypatch.undo()
    swepipe("run", "--strategy", "vote", "--instance-ids", task.instance_id, "--config", "config.yaml",
            "--run-id", "behind", "--executor", "ray", "--ray-address", cluster.address, cwd=tmp_path)
    assert set(finished_predictions(layout.predictions)) == {task.instance_id}
    answered = [row for row in Ledger.read(layout.task(task.instance_id).ledger) if row.error is None]
    assert len(answered) == 1  # the junior's one reply, paid once: the rerun resumed from what had arrived


# ---------------------------------------------------------------- a fault stop on a node, end to end


@pytest.mark.docker
@pytest.mark.slow
def test_an_outage_met_on_a_node_stops_the_whole_run_and_the_rerun_resumes(cluster, tmp_path):
    task, flag = TASKS["tinyq"], tmp_path / "provider-down"
    flag.write_text("down")
    script = pipeline_script(task, [reply(edits_from_patch(task.patch))])
    script["outage"] = {"error": "server_error", "after_calls": 2, "while_exists": str(flag)}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    write_config(tmp_path / "config.yaml", tmp_path / "script.yaml", faults=FAULTS)
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    for spec in config["models"].values():
        spec["max_retries"] = 1
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    command = ("run", "--instance-ids", task.instance_id, "--config", "config.yaml", "--run-id", "down",
               "--executor", "ray", "--ray-address", cluster.address)
    first = swepipe(*command, cwd=tmp_path, check=False)
    said = " ".join((first.stdout + first.stderr).split())
    assert first.returncode == 1, said[-3000:]
    assert "longer than the outage time" in said and "InternalServerError" in said and "--run-id down" in said
    layout = RunLayout(tmp_path / "runs" / "down")
    # no result of any kind
    assert finished_predictions(layout.predictions) == {} and not (layout.root / "infra_errors.jsonl").exists()
    assert not (layout.task(task.instance_id).principal / "result.json").exists()
    assert no_containers_left("down") and not scratch_left("down")

    flag.unlink()  # the provider is back
    swepipe(*command, cwd=tmp_path)
    assert finished_predictions(layout.predictions)[task.instance_id]["source"] == "principal"
    answered = [(r.stage, r.agent) for r in Ledger.read(layout.task(task.instance_id).ledger) if r.error is None]
    assert answered.count(("junior", "rollout-00")) == 2 and answered.count(("junior", "rollout-01")) == 2
    assert len(answered) == 2 + 2 + 2 + 1  # each conversation position paid once


# ---------------------------------------------------------------- a run's records are its own


@pytest.mark.docker
@pytest.mark.slow
def test_cleaning_up_run_exp_touches_nothing_of_run_exp_2_running_beside_it(cluster, tmp_path):
    setup(tmp_path, slow_script(SECOND, 50))  # exp-2's juniors take their time
    (tmp_path / "fast.yaml").write_text(yaml.safe_dump(pipeline_script(FIRST, [reply(edits_from_patch(FIRST.patch))])))
    write_config(tmp_path / "fast-config.yaml", tmp_path / "fast.yaml")
    on_cluster = ("--executor", "ray", "--ray-address", cluster.address)
    other = RunLayout(tmp_path / "runs" / "exp-2")
    paths = other.task(SECOND.instance_id)
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", SECOND.instance_id,
                             "--config", "config.yaml", "--run-id", "exp-2", *on_cluster], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (
                scratch_left("exp-2") and any(live_steps(paths.junior).values())):
            time.sleep(0.3)
        assert scratch_left("exp-2"), "exp-2 never got going"
        before = lasting_files(other.root)
        # Run exp beside it, to its end (its driver cleans up the nodes), then clean exp up by hand as after a crash.
        swepipe("run", "--instance-ids", FIRST.instance_id, "--config", "fast-config.yaml", "--run-id", "exp",
                *on_cluster, cwd=tmp_path)
        swepipe("cleanup", "exp", *on_cluster, cwd=tmp_path)
        assert proc.poll() is None, "exp-2 should still be running"
        assert scratch_left("exp-2")  # its scratch is where it was
        after = lasting_files(other.root)
        lost = {name: (size, after.get(name)) for name, size in before.items()
                if after.get(name, -1) < size and not _folded_into_its_record(name, after)}
        assert not lost, f"exp's cleanup removed or cut files of exp-2 (size before, after): {lost}"
        output, _ = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 0, output[-3000:]
    prediction = finished_predictions(other.predictions)[SECOND.instance_id]
    assert prediction["source"] == "principal" and prediction["model_patch"], prediction
    rows = Ledger.read(paths.ledger)
    assert sum(1 for r in rows if r.stage == "junior" and r.error is None) == 6  # three replies per junior
    assert sorted(p.name for p in paths.junior.glob("rollout-0?.json")) == ["rollout-00.json", "rollout-01.json"]
    assert all(json.loads((paths.junior / name).read_text())["exit_reason"] == "submitted"
               for name in ("rollout-00.json", "rollout-01.json"))
    assert no_containers_left("exp") and no_containers_left("exp-2") and not scratch_left("exp-2")


def _folded_into_its_record(name: str, after: dict[str, int]) -> bool:
    """A session's trajectory journal (X.jsonl, rollout-NN.trajectory.jsonl) goes when its whole record is written
    (X.json, rollout-NN.json): exp-2's juniors may finish while exp runs and is cleaned up."""
    if not name.endswith(".jsonl"):
        return False
    return name.removesuffix("l") in after or name.replace(".trajectory.jsonl", ".json") in after


def test_the_cluster_scratch_of_a_run_is_named_by_its_whole_id(tmp_path):
    from pipeline.run.ray.node import run_folder, session_folder

    assert run_folder("exp") != run_folder("exp-2") and run_folder("exp-2").parent == run_folder("exp").parent
    for odd in ("..", ".", "a/b"):  # one path component, never a way out of the scratch root
        assert run_folder(odd).parent == run_folder("exp").parent and "/" not in run_folder(odd).name
    assert session_folder("exp", "abc").parent == run_folder("exp")

