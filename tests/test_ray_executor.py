"""`swepipe run --executor ray` on a real local Ray cluster (every node on 127.0.0.1), scripted models, bundled
tasks: the driver alone writes the run directory, the run's budget holds across nodes, a stop stops every
node, a lost node's task resumes elsewhere without paying a conversation position twice."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from live_runs import live_steps
from ray_cluster import cluster_pids as _cluster_pids
from ray_cluster import listening as _listening
from ray_cluster import no_containers_left as _no_containers_left
from ray_cluster import scratch_left
from scripted_pipeline import SUBMIT, apply_patch_command, bash, edits_from_patch, patch_per_file, reply
from test_run_docker import pipeline_script, setup, swepipe

from pipeline.models.budget import Budget, CostLimitExceeded
from pipeline.models.ledger import Ledger
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.rundir.storage import append_jsonl, apply_mirrored, clear_mirror, set_mirror, write_json_atomic
from pipeline.tasks import load_tasks

TASKS = {t.repo.split("/")[-1]: t for t in load_tasks("bundled")}
FIRST, SECOND = TASKS["tinyq"], TASKS["cursorly"]
IDS = f"{FIRST.instance_id},{SECOND.instance_id}"


# ---------------------------------------------------------------- without a cluster


def test_a_mirror_sends_every_write_under_its_root_in_order_and_rebuilds_the_same_files(tmp_path):
    scratch, driver = tmp_path / "scratch" / "run", tmp_path / "driver" / "run"
    sent = []
    set_mirror(scratch, lambda op, relative, data: sent.append((op, relative, data)))
    try:
        write_json_atomic(scratch / "tasks" / "a" / "junior" / "rollout-00.trajectory.json", {"steps": [1]})
        append_jsonl(scratch / "tasks" / "a" / "ledger.jsonl", {"cost": 0.5})
        write_json_atomic(scratch / "tasks" / "a" / "junior" / "rollout-00.trajectory.json", {"steps": [1, 2]})
        append_jsonl(scratch / "tasks" / "a" / "ledger.jsonl", {"cost": 0.25})
        write_json_atomic(tmp_path / "elsewhere.json", {"not": "mirrored"})
    finally:
        clear_mirror()
    write_json_atomic(scratch / "after.json", {})  # no mirror any more
    assert [(op, relative) for op, relative, _ in sent] == [
        ("write", "tasks/a/junior/rollout-00.trajectory.json"), ("append", "tasks/a/ledger.jsonl"),
        ("write", "tasks/a/junior/rollout-00.trajectory.json"), ("append", "tasks/a/ledger.jsonl")]
    for op, relative, data in sent:
        apply_mirrored(driver, op, relative, data)
    for relative in ("tasks/a/junior/rollout-00.trajectory.json", "tasks/a/ledger.jsonl"):
        assert (driver / relative).read_bytes() == (scratch / relative).read_bytes()
    apply_mirrored(driver, "unlink", "tasks/a/junior/rollout-00.trajectory.json", b"")
    assert not (driver / "tasks/a/junior/rollout-00.trajectory.json").exists()
    for bad in ("../outside.json", "/etc/passwd", "tasks/../../x"):  # a worker never writes outside the run
        with pytest.raises(ValueError):
            apply_mirrored(driver, "write", bad, b"x")
    assert not (tmp_path / "driver" / "outside.json").exists()


def test_many_threads_mirror_a_file_in_the_order_it_took_the_writes(tmp_path):
    scratch, driver = tmp_path / "scratch", tmp_path / "driver"
    sent = []
    set_mirror(scratch, lambda op, relative, data: (time.sleep(0.001), sent.append((op, relative, data))))
    try:
        threads = [threading.Thread(target=lambda n=n: [write_json_atomic(scratch / "same.json", {"n": n, "i": i})
                                                        for i in range(20)]) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        clear_mirror()
    for op, relative, data in sent:
        apply_mirrored(driver, op, relative, data)
    assert (driver / "same.json").read_bytes() == (scratch / "same.json").read_bytes()


class LocalKeeper:
    """RunBudgetKeeper called in-process, as the worker's proxy calls the actor."""

    def __init__(self, limit, spent=0.0):
        from pipeline.run.ray.actors import RunBudgetKeeper

        self.keeper, self.calls = RunBudgetKeeper(limit, spent), []

    def reserve(self, amount):
        self.calls.append("reserve")
        hold = f"hold-{len(self.calls)}"
        granted, refused = self.keeper.reserve(amount, "owner", hold)
        if refused:
            raise CostLimitExceeded(*refused)
        assert granted
        return hold

    def settle(self, token, amount, cost):
        self.calls.append("settle")
        self.keeper.settle(token, cost)

    def left(self):
        self.calls.append("left")
        return self.keeper.left()


def test_task_budgets_in_two_processes_share_one_run_budget_held_remotely():
    keeper = LocalKeeper(1.0, spent=0.25)  # an earlier session spent 0.25
    nodes = [Budget("run", 1.0, remote=keeper) for _ in range(2)]  # one tree per worker process
    tasks = [node.child(f"task {n}", 0.6) for n, node in enumerate(nodes)]
    first = tasks[0].reserve(0.5)
    with pytest.raises(CostLimitExceeded, match="run budget"):
        tasks[1].reserve(0.3)  # 0.25 + 0.5 + 0.3 > 1.0, though this task's own budget has room
    assert tasks[1].left == pytest.approx(0.25)
    first.settle(0.1)
    tasks[1].reserve(0.6).settle(0.6)
    assert keeper.keeper.spent() == pytest.approx(0.25 + 0.1 + 0.6)
    with pytest.raises(CostLimitExceeded, match="task 1 budget"):  # local budgets still hold, before the remote
        tasks[1].reserve(0.01)
    assert tasks[1].reserved == 0 and nodes[1].reserved == 0  # a refused call holds nothing anywhere
    # A task that died with a call in flight: the call may have been paid, so it counts at its worst case.
    keeper.keeper.reserve(0.02, "dead#1", "its-hold")
    assert keeper.keeper.abandon("dead#1") == pytest.approx(0.02)
    assert keeper.keeper.spent() == pytest.approx(0.97)


def test_no_run_budget_means_no_remote_call():
    from pipeline.run.ray.actors import RunBudgetKeeper  # noqa: F401 - importable without Ray running

    task = Budget("run", None).child("task", 1.0)
    task.reserve(0.5).settle(0.4)
    assert task.spent == pytest.approx(0.4)


# ---------------------------------------------------------------- errors before anything runs


def test_ray_missing_is_a_clear_error(tmp_path):
    blocker = tmp_path / "noray" / "ray"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('No module named ray (blocked by the test)')\n")
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--executor", "ray", "--limit", "1",
                           "--run-id", "noray"], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tmp_path / "noray"), "COLUMNS": "250"},
                          stdin=subprocess.DEVNULL, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pip install 'swepipe[ray]'" in done.stderr
    assert not (tmp_path / "runs" / "noray").exists()  # said before anything was written


def test_unreachable_address_is_a_clear_error_within_seconds(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once closed
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--executor", "ray", "--ray-address",
                               address, "--limit", "1", "--run-id", "nocluster"], capture_output=True, text=True,
                              cwd=tmp_path, env={**os.environ, "COLUMNS": "250"}, stdin=subprocess.DEVNULL,
                              timeout=120)
        assert done.returncode == 2, done.stdout + done.stderr
        error = " ".join(done.stderr.split())
        assert f"no Ray cluster answers at {address}" in error and "ray start --head" in error
        assert "docker_slots" in error
        assert time.monotonic() - started < 90  # Ray itself would retry for minutes
    done = swepipe("run", "--executor", "dask", "--limit", "1", cwd=tmp_path, check=False)
    assert done.returncode == 2 and "--executor" in done.stderr


# ---------------------------------------------------------------- on a local cluster

def positional(script: list) -> list:
    """The replies with a distinct prompt size per conversation position, so a ledger row names its position."""
    return [{**r, "usage": {"prompt_tokens": 1000 + n, "completion_tokens": 100}} if isinstance(r, dict) else r
            for n, r in enumerate(script)]


def slow_script(task, sleep: float):
    script = pipeline_script(task, [reply(edits_from_patch(task.patch))])
    half = list(patch_per_file(task.patch).values())
    script["junior"] = [positional([bash(apply_patch_command(half[0])), bash(f"sleep {sleep} && echo checked"),
                                    SUBMIT]),
                        positional([bash(f"sleep {sleep} && echo looked"), bash(apply_patch_command(half[1])),
                                    SUBMIT])]
    return script


# Container limits differ on purpose: the thread executor sizes them from this machine and --workers, a node from
# its own machine and docker_slots (tests/test_ray_eval.py checks those); ray records them in limits.json.
VOLATILE = re.compile(r"time|seconds|latency|duration|elapsed|started|finished|^node$|^call$|pid|^limits$", re.I)
LIMITS = ("cpus", "memory", "pids_limit", "tmp_size", "file_size", "disk")


def _normal(value):
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items() if not VOLATILE.search(k)}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"\d+\.\d+ ?s\b", "<t>", value)
    return value


def _canary_names(root: Path) -> list[str]:
    """The names of the canaries planted in the run's scorings: drawn afresh for each (pipeline.evaluation.canaries)."""
    names = []
    for result in root.rglob("result.json"):
        canaries = json.loads(result.read_text()).get("canaries") or {}
        names += [test["name"] for test in canaries.get("tests") or []]
    return names


def _contents(root: Path) -> dict[str, object]:
    """The run directory's files, timings taken out, the canaries' names and planting (random) as placeholders;
    ledger rows as a multiset (rollouts run side by side)."""
    found = {}
    canaries = _canary_names(root)
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if not path.is_file() or path.name in (".lock", "stdout.log", "stderr.log", "limits.json"):
            continue
        text = path.read_text(encoding="utf-8")
        if path.name == "entryscript.sh":
            text = re.sub(r"(?s)# plant the canaries\n.*?(?=# run test)", "<planting>\n", text)
        for number, name in enumerate(canaries):
            text = text.replace(name, f"<canary {number % 2}>")
        if path.suffix == ".jsonl":
            rows = [_normal(json.loads(line)) for line in text.splitlines()]
            found[relative] = sorted(json.dumps(r, sort_keys=True) for r in rows)
        elif path.suffix == ".json":
            found[relative] = _normal(json.loads(text))
        elif path.name == "entry.log":  # the scoring's stdout and stderr merged as they came: their order is the OS's
            found[relative] = sorted(text.splitlines())
        elif path.name == "config.yaml":
            config = yaml.safe_load(text)
            config.pop("executor", None)
            for name in LIMITS:
                config["containers"].pop(name, None)
            found[relative] = config
        else:
            found[relative] = text
    return found


@pytest.mark.docker
@pytest.mark.slow
def test_two_nodes_give_the_thread_executors_files_written_by_the_driver(cluster, tmp_path):
    assert all(a.startswith(("127.0.0.1:", "[::1]:", "[::ffff:127.0.0.1]:")) or a.startswith("127.")
               for a in _listening(_cluster_pids(cluster))), _listening(_cluster_pids(cluster))
    setup(tmp_path, pipeline_script(FIRST, [reply(edits_from_patch(FIRST.patch))]))
    done = swepipe("run", "--instance-ids", IDS, "--config", "config.yaml", "--run-id", "onray", "--evaluate",
                   "--workers", "2", "--executor", "ray", "--ray-address", cluster.address, cwd=tmp_path)
    assert "ray: 3 node(s), 4 docker_slots, 2 per task: up to 2 task(s) at once" in done.stdout
    swepipe("run", "--instance-ids", IDS, "--config", "config.yaml", "--run-id", "threads", "--evaluate",
            "--workers", "2", cwd=tmp_path)
    ray_run, threads = RunLayout(tmp_path / "runs" / "onray"), RunLayout(tmp_path / "runs" / "threads")
    predictions = finished_predictions(ray_run.predictions)
    assert predictions[FIRST.instance_id]["resolved"] is True and predictions[SECOND.instance_id]["resolved"] is False
    # One task per node (each holds both of a node's slots), named in the prediction with its wall time.
    assert {p["node"] for p in predictions.values()} == {"node-b", "node-c"}
    assert all(p["wall_seconds"] > 0 for p in predictions.values())
    assert {p["node"] for p in finished_predictions(threads.predictions).values()} == {socket.gethostname()}
    on_ray, on_threads = _contents(ray_run.root), _contents(threads.root)
    assert sorted(on_ray) == sorted(on_threads)
    for name in on_ray:
        assert on_ray[name] == on_threads[name], name
    # The workers ran in scratch copies: the driver alone wrote here, and no worker's scratch is left.
    assert len(ray_run.predictions.read_text().splitlines()) == 2
    assert not scratch_left("onray")
    assert _no_containers_left("onray")
    # The report's task table names the node of each task.
    swepipe("report", str(ray_run.root), cwd=tmp_path)
    report = (ray_run.root / "report.md").read_text()
    assert "| node |" in report.replace("node  ", "node ") or " node " in report
    assert "node-b" in report and "node-c" in report


# One task's calls fit (about $0.011 with every reply capped at 100 tokens), two tasks' do not.
RUN_BUDGET = 0.012


def setup_run_budget(tmp_path) -> float:
    """The pipeline resolving FIRST, every model capped at 100 tokens a reply, budgets.per_run RUN_BUDGET."""
    setup(tmp_path, pipeline_script(FIRST, [reply(edits_from_patch(FIRST.patch))]))
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    for spec in config["models"].values():
        spec["max_tokens"] = 100
    config["budgets"] = {"per_run": RUN_BUDGET}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    return RUN_BUDGET


@pytest.mark.docker
@pytest.mark.slow
def test_the_run_budget_holds_across_nodes(cluster, tmp_path):
    limit = setup_run_budget(tmp_path)
    swepipe("run", "--instance-ids", IDS, "--config", "config.yaml", "--run-id", "budget", "--executor", "ray",
            "--ray-address", cluster.address, cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / "budget")
    predictions = finished_predictions(layout.predictions)
    assert {p["node"] for p in predictions.values()} == {"node-b", "node-c"}  # the two tasks ran side by side
    spent = [sum(r.cost for r in Ledger.read(layout.task(i).ledger)) for i in (FIRST.instance_id, SECOND.instance_id)]
    assert all(s > 0 for s in spent) and sum(spent) <= limit + 1e-9, spent
    refused = [p for p in layout.root.rglob("*.json") if "run budget of $0.0120" in p.read_text()]
    assert refused, "no call was refused by the run's budget"


def _paid_positions(rows) -> dict[str, list[int]]:
    paid = {}
    for row in rows:
        if row.stage == "junior":
            paid.setdefault(row.agent, []).append(row.input_tokens - 1000)
    return paid


@pytest.mark.docker
@pytest.mark.slow
def test_sigterm_to_the_driver_stops_every_node_and_the_run_resumes(cluster, tmp_path):
    setup(tmp_path, slow_script(FIRST, 8))
    command = [sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", IDS, "--config", "config.yaml",
               "--run-id", "stopped", "--executor", "ray", "--ray-address", cluster.address]
    layout = RunLayout(tmp_path / "runs" / "stopped")
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # both tasks' juniors have paid replies (on the driver's disk)
            if all(any(live_steps(layout.task(t.instance_id).junior).values()) for t in (FIRST, SECOND)):
                break
            time.sleep(0.3)
        else:
            pytest.fail("the juniors never got going")
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, output[-3000:]
    assert "run the same command again" in " ".join(output.split())
    assert _no_containers_left("stopped")  # every node's (one Docker engine serves the local cluster)
    assert not scratch_left("stopped")
    # After a crash, `swepipe cleanup --executor ray` removes what a run left on every node.
    from pipeline.runtime import containers
    from pipeline.runtime.images.debian_base import BASE_IMAGE

    left = containers.client().containers.create(BASE_IMAGE, "sleep 60", labels=containers.labels("stopped"))
    cleaned = swepipe("cleanup", "stopped", "--executor", "ray", "--ray-address", cluster.address,
                      cwd=tmp_path)
    assert left.name in cleaned.stdout and {"head:", "node-b:", "node-c:"} <= set(cleaned.stdout.split())
    assert _no_containers_left("stopped")
    assert finished_predictions(layout.predictions) == {}
    paid_before = {t.instance_id: _paid_positions(Ledger.read(layout.task(t.instance_id).ledger))
                   for t in (FIRST, SECOND)}
    assert any(paid_before.values())

    done = swepipe(*command[3:], cwd=tmp_path)
    assert set(finished_predictions(layout.predictions)) == {FIRST.instance_id, SECOND.instance_id}, done.stdout[-2000:]
    for task in (FIRST, SECOND):
        paid = _paid_positions(Ledger.read(layout.task(task.instance_id).ledger))
        assert {agent: sorted(positions) for agent, positions in paid.items()} == \
            {"rollout-00": [0, 1, 2], "rollout-01": [0, 1, 2]}, paid  # no position paid twice
    assert _no_containers_left("stopped")


def _node_of_pid(cluster, pid: int):
    """The cluster node whose raylet started the worker ``pid``."""
    parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    for node in cluster.list_all_nodes():
        raylets = [info.process.pid for info in node.all_processes.get("raylet", [])]
        if parent in raylets:
            return node
    return None


@pytest.mark.docker
@pytest.mark.slow
def test_a_lost_node_s_task_resumes_on_another_without_paying_twice(cluster, tmp_path):
    from pipeline.runtime import containers

    task = FIRST
    setup(tmp_path, slow_script(task, 6))
    command = [sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", task.instance_id, "--config",
               "config.yaml", "--run-id", "lost", "--executor", "ray", "--ray-address", cluster.address]
    layout = RunLayout(tmp_path / "runs" / "lost")
    paths = layout.task(task.instance_id)
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        deadline, victim = time.monotonic() + 120, None
        while time.monotonic() < deadline:  # juniors have paid replies; their containers say which worker runs them
            steps = [len(steps) for steps in live_steps(paths.junior).values()]
            found = containers.client().containers.list(filters={"label": f"{containers.RUN_LABEL}=lost"},
                                                        ignore_removed=True)  # one removed meanwhile is gone
            if len(steps) == 2 and min(steps) >= 1 and found:
                victim = _node_of_pid(cluster, int(found[0].labels["swepipe.owner_pid"]))
                break
            time.sleep(0.2)
        assert victim is not None, "the juniors never got going"
        saved = {name: len(steps) for name, steps in live_steps(paths.junior).items()}
        cluster.remove_node(victim, allow_graceful=False)
        output, _ = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0, output[-3000:]
    assert "was lost" in output and "attempt 2 of 3" in output
    prediction = finished_predictions(layout.predictions)[task.instance_id]
    assert prediction["source"] == "principal" and prediction["model_patch"]
    assert prediction["node"] in ("node-b", "node-c") and prediction["node"] != victim._ray_params.node_name
    paid = _paid_positions(Ledger.read(paths.ledger))
    assert set(paid) == {"rollout-00", "rollout-01"}
    for agent, positions in paid.items():
        twice = {n for n in positions if positions.count(n) > 1}
        # Only a reply in flight when the node died (paid, not yet in the saved trajectory) may be paid again.
        steps_saved = saved.get(f"{agent}.trajectory.jsonl", 0)
        assert all(n >= steps_saved for n in twice) and len(twice) <= 1, (agent, positions, steps_saved)
        assert set(positions) == {0, 1, 2}
    assert _no_containers_left("lost")
    assert not scratch_left("lost")  # the dead worker's scratch too


@pytest.mark.docker
@pytest.mark.slow
def test_repeats_on_the_cluster_share_one_run_budget(cluster, tmp_path):
    """`run --repeats 2` through the cluster: two sibling runs with their seeds on record, and budgets.per_run
    bounding both together (the second repeat gets what the first left)."""
    limit = setup_run_budget(tmp_path)  # one repeat's calls of one task fit, two repeats' do not
    swepipe("run", "--instance-ids", FIRST.instance_id, "--config", "config.yaml", "--run-id", "rep", "--repeats", "2",
            "--executor", "ray", "--ray-address", cluster.address, cwd=tmp_path)
    spent = {}
    for number, offset in ((1, 0), (2, 1000)):
        layout = RunLayout(tmp_path / "runs" / f"rep-r{number}")
        record = json.loads((layout.root / "repeat.json").read_text())
        assert (record["repeat"], record["repeats"], record["seed_offset"]) == (number, 2, offset)
        assert finished_predictions(layout.predictions)[FIRST.instance_id]["node"] in ("node-b", "node-c")
        spent[number] = sum(r.cost for r in Ledger.read(layout.task(FIRST.instance_id).ledger))
    assert spent[1] > 0 and sum(spent.values()) <= limit + 1e-9, spent
