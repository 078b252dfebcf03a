"""A Ray driver killed outright mid-juniors loses no paid reply and pays none twice, as a user meets it: a two-node
cluster started with `ray start` on 127.0.0.1 (token authentication on, as the Ray setup installs it; the second node
through tests/ray_start_node.py, Ray's own `ray start` kept on loopback), a run of K=4 juniors on the scripted model,
the driver frozen for a few seconds while its nodes go on paying replies (so writes the driver has not applied are in
flight: held only by the queue actor and the nodes), then SIGKILLed between two model calls (Ray kills a dead
driver's workers within a moment: a reply still on its way to a worker then is lost as in a node's crash); the same
command run again. Every reply the provider gave is one ledger row, no rollout is lost, and the predictions are those
of a run nobody killed. The same for the run's write queue actor killed under a driver that lives on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import yaml
from live_runs import live_steps
from ray_cluster import listening, scratch_left
from test_ray_executor import _normal
from test_ray_start import STARTED, _env, _free_port, _group, _stop_group

from pipeline.models.ledger import Ledger
from pipeline.records.prediction import finished_predictions
from pipeline.run.ray.node import run_folder
from pipeline.rundir.layout import RunLayout
from pipeline.tasks import load_tasks

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
K = 4
TASKS = [t for t in load_tasks("bundled") if t.repo_language == "python"][:2]  # both run on leaky_repo's clone
USAGE = {"prompt_tokens": 1000, "completion_tokens": 100}
FIX = "sed -i 's/a - b/a + b/' calc.py"
BRIEF = {"analysis": "add() subtracts; calc.py line 2 must add.",
         "spans": [{"file": "calc.py", "start": 1, "end": 2, "reason": "add"}]}
PRINCIPAL_EDIT = "calc.py\n```\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n```\n"


def reply(content: str) -> dict:
    return {"content": content, "usage": USAGE}


def bash(command: str) -> dict:
    return reply(f"Next.\n```bash\n{command}\n```")


def junior(n: int) -> list[dict]:
    """Rollout n's replies: a few steps that take their time, the fix (or not), submit."""
    return [bash(f"echo rollout {n}"), bash("sleep 3 && echo looked"), bash(FIX if n % 2 == 0 else "git status"),
            bash("sleep 2 && git diff --stat"), bash("submit")]


@pytest.fixture(scope="module")
def two_nodes(leaky_repo):
    """`ray start --head` and `ray start --address` on 127.0.0.1 (tests/ray_start_node.py), each offering one task's
    K docker slots, in their own process groups (stopped by them, never by `ray stop`); workers see the tests' local
    opener and repository."""
    root = Path(tempfile.mkdtemp(prefix="raykill-"))
    home = root / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(uuid.uuid4().hex)  # what `ray get-auth-token --generate` writes
    port = _free_port()
    ray = str(Path(sys.executable).with_name("ray"))
    env = _env(home, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", SWEPIPE_TEST_REPO=str(leaky_repo["path"]),
               SWEPIPE_TEST_BASE=leaky_repo["base"],
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    slots = f'--resources={{"docker_slots": {K}}}'
    commands = [([ray, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", slots, "--num-cpus=1",
                  f"--temp-dir={root / 'ray'}", "--include-dashboard=false", "--disable-usage-stats", "--block"], env),
                ([sys.executable, str(ROOT / "tests" / "ray_start_node.py"), "start", f"--address=127.0.0.1:{port}",
                  "--node-ip-address=127.0.0.1", slots, "--num-cpus=1", "--block"],
                 {**env, "RAY_AUTH_MODE": "token"})]  # Ray turns it on by itself on the head only
    procs = []
    try:
        for number, (command, environment) in enumerate(commands):
            log = root / f"node-{number}.log"
            with open(log, "w") as out:
                procs.append(subprocess.Popen(command, env=environment, stdout=out, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True))
            deadline = time.monotonic() + 120
            while STARTED not in log.read_text() and procs[-1].poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
            assert STARTED in log.read_text(), log.read_text()[-3000:]
        assert "Token authentication is enabled" in (root / "node-0.log").read_text()
        pids = set().union(*(_group(proc.pid) for proc in procs))
        assert all(a.startswith(("127.", "[::ffff:127.0.0.1]:")) for a in listening(pids)), listening(pids)
        _GROUPS[:] = [proc.pid for proc in procs]
        yield f"127.0.0.1:{port}", home
    finally:
        for proc in reversed(procs):
            _stop_group(proc)


_GROUPS: list[int] = []  # the process groups of the cluster's nodes


def _cluster_pids() -> set[int]:
    """The cluster's processes: its nodes' process groups and every process they started since."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found = set().union(*(_group(pgid) for pgid in _GROUPS))
    while more := {pid for pid, parent in parents.items() if parent in found} - found:
        found |= more
    return found


def _setup(work: Path) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    served = work / "served.jsonl"
    (work / "script.yaml").write_text(yaml.safe_dump({
        "junior": [junior(n) for n in range(K)], "served": str(served),
        "senior": [bash("cat calc.py"), reply(f"```json\n{json.dumps(BRIEF)}\n```\n```bash\nsubmit\n```")],
        "principal": [reply(PRINCIPAL_EDIT)]}))
    spec = {"model": f"scripted/{work / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}}
    (work / "config.yaml").write_text(yaml.safe_dump({
        "models": {role: spec for role in ("junior", "senior", "principal")}, "juniors": {"k": K},
        "limits": {"max_steps": 8}, "containers": {"impl": "local_opener:open_local"}}))
    return served


def _command(address: str, run_id: str) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", "run", "--dataset", "bundled", "--instance-ids",
            ",".join(t.instance_id for t in TASKS), "--config", "config.yaml", "--run-id", run_id,
            "--executor", "ray", "--ray-address", address]


def _served(path: Path) -> list[tuple]:
    if not path.exists():
        return []
    return [tuple(row[k] for k in ("scope", "role", "agent", "position"))
            for row in map(json.loads, path.read_text().splitlines())]


def _settled(served: Path, quiet: float = 1.0, most: float = 30.0) -> None:
    """Until the provider gave no reply for ``quiet`` seconds: every agent sits in a command, none is in a call."""
    end, count, since = time.monotonic() + most, len(_served(served)), time.monotonic()
    while time.monotonic() < end and time.monotonic() - since < quiet:
        time.sleep(0.1)
        if len(_served(served)) != count:
            count, since = len(_served(served)), time.monotonic()


def _answered(layout: RunLayout) -> list:
    return [row for t in TASKS for row in Ledger.read(layout.task(t.instance_id).ledger) if row.error is None]


def _predictions(layout: RunLayout) -> dict:
    return {i: _normal(p) for i, p in finished_predictions(layout.predictions).items()}


@pytest.fixture(scope="module")
def unkilled(two_nodes, tmp_path_factory):
    """The run nobody killed, on the same cluster and script: its predictions are what every other run must give."""
    address, home = two_nodes
    work = tmp_path_factory.mktemp("runs")
    env = _env(home, COLUMNS="250", PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    served = _setup(work)
    whole = subprocess.run(_command(address, "whole"), cwd=work, env=env, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=600)
    assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-3000:]
    layout = RunLayout(work / "runs" / "whole")
    expected = _predictions(layout)
    assert set(expected) == {t.instance_id for t in TASKS}
    assert len(_served(served)) == len(_answered(layout))
    return work, env, served, expected


def _started(layout: RunLayout, log: Path) -> None:
    deadline = time.monotonic() + 180
    # A task's juniors under way, on the driver's disk: the kill then lands mid-juniors. Not both tasks at once: on a
    # loaded machine Ray may run them one after the other, and the first one's live steps fold away as it ends.
    while time.monotonic() < deadline:
        if any(sum(len(s) for s in live_steps(layout.task(t.instance_id).junior).values()) >= K for t in TASKS):
            return
        time.sleep(0.2)
    pytest.fail("the juniors never got going: " + log.read_text()[-3000:])


def _nothing_lost_or_paid_twice(layout: RunLayout, served: Path, before: int, expected: dict,
                                said: str = "") -> None:
    paid = _served(served)[before:]
    twice = [call for call, times in Counter(paid).items() if times > 1]
    assert not twice, f"paid twice: {twice}\n{said[-6000:]}"  # no reply paid twice
    assert len(_answered(layout)) == len(paid)  # every reply paid is a ledger row
    for task in TASKS:  # no rollout lost: each ran its whole script
        rollouts = layout.task(task.instance_id).junior_files.rollouts()
        assert sorted(rollouts) == list(range(K))
        for index, path in rollouts.items():
            record = json.loads(path.read_text())
            assert record["exit_reason"] == "submitted" and record["steps"] == len(junior(index)), record
    assert _predictions(layout) == expected


def test_a_driver_killed_mid_juniors_loses_no_paid_reply_and_the_rerun_pays_none_twice(two_nodes, unkilled):
    address, _ = two_nodes
    work, env, served, expected = unkilled
    before = len(_served(served))
    layout = RunLayout(work / "runs" / "killed")
    log_path = work / "killed.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(_command(address, "killed"), cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        try:
            _started(layout, log_path)
            proc.send_signal(signal.SIGSTOP)  # the driver stalls: nodes go on paying, their writes wait in the queue
            frozen = len(_served(served))
            deadline = time.monotonic() + 60
            while len(_served(served)) < frozen + 2 * K and time.monotonic() < deadline:
                time.sleep(0.2)
            _settled(served)  # between two calls: a call in flight when Ray kills the workers is a crash's loss
            paid_while_frozen = len(_served(served)) - frozen
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            proc.kill()
    assert paid_while_frozen >= 2 * K  # replies the killed driver never wrote down
    assert finished_predictions(layout.predictions) == {}
    kept = [path for path in run_folder("killed").glob("*/attempt-*") if path.is_dir()]

    again = subprocess.run(_command(address, "killed"), cwd=work, env=env, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=600)  # the same command again
    said = again.stdout + again.stderr
    assert again.returncode == 0, said[-3000:]
    _nothing_lost_or_paid_twice(layout, served, before, expected, said)
    assert kept, "the nodes kept nothing of what the killed driver had not applied"
    assert "took back" in said, said[-3000:]
    assert not scratch_left("killed") and not list(layout.root.glob("tasks/*/ray_attempt.json"))
    assert not run_folder("killed").exists()  # nothing of the run is left on its nodes


def _queue_actor(two_nodes_pids: set[int]) -> int:
    """The pid of the run's write queue actor among this cluster's processes."""
    for pid in two_nodes_pids:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::WriteQueueActor"):
                return pid
        except OSError:
            continue
    raise AssertionError("no write queue actor runs on the cluster")


def test_a_write_queue_killed_mid_juniors_loses_no_paid_reply_and_the_rerun_pays_none_twice(two_nodes, unkilled):
    address, _ = two_nodes
    work, env, served, expected = unkilled
    before = len(_served(served))
    layout = RunLayout(work / "runs" / "queue")
    log_path = work / "queue.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(_command(address, "queue"), cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        try:
            _started(layout, log_path)
            os.kill(_queue_actor(_cluster_pids()), signal.SIGKILL)
            proc.wait(timeout=300)
        finally:
            proc.kill()
    said = log_path.read_text()
    assert proc.returncode == 1, said[-3000:]  # tasks left unfinished, by a cluster fault: no result of any kind
    assert finished_predictions(layout.predictions) == {} and "write queue" in said, said[-3000:]
    again = subprocess.run(_command(address, "queue"), cwd=work, env=env, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=600)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    _nothing_lost_or_paid_twice(layout, served, before, expected,
                                said + "\n--- the rerun:\n" + again.stdout + again.stderr)
    assert not scratch_left("queue") and not list(layout.root.glob("tasks/*/ray_attempt.json"))
    assert not run_folder("queue").exists()
