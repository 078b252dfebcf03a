"""A cluster started as docs/cluster.md says (`ray start --head --node-ip-address=127.0.0.1 ...`, in its own process,
with the Ray setup installs: token authentication on, since the head machine has a token in Ray's own file): the
driver joins it with that token and runs a task there; a driver without the head's token is told what to set."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from ray_cluster import listening, no_containers_left, scratch_left
from scripted_pipeline import edits_from_patch, reply
from test_ray_executor import FIRST
from test_run_docker import pipeline_script, setup

from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout

pytestmark = pytest.mark.slow
STARTED = "Ray runtime started"


@dataclass
class Head:
    address: str
    home: Path  # the head machine's home: ~/.ray/auth_token holds its token
    token: str
    pgid: int


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _env(home: Path, **extra: str) -> dict[str, str]:
    """This machine's environment with nothing of Ray's set, the home given (where Ray looks for its token)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, "HOME": str(home), "COLUMNS": "250", **extra}


@pytest.fixture(scope="module")
def head():
    """`ray start --head` on 127.0.0.1 with docker slots for one task, in its own process group (stopped by it,
    never by `ray stop`, which would stop every cluster of the machine) and its own temporary directory (short:
    Ray's socket paths must fit in 107 bytes)."""
    root = Path(tempfile.mkdtemp(prefix="rayhead-"))
    home = root / "home"
    (home / ".ray").mkdir(parents=True)
    token = uuid.uuid4().hex
    (home / ".ray" / "auth_token").write_text(token)  # what `ray get-auth-token --generate` writes
    port = _free_port()
    log = root / "head.log"
    command = [str(Path(sys.executable).with_name("ray")), "start", "--head", "--node-ip-address=127.0.0.1",
               f"--port={port}", '--resources={"docker_slots": 2}', f"--temp-dir={root / 'ray'}",
               "--include-dashboard=false", "--disable-usage-stats", "--block"]
    with open(log, "w") as out:
        proc = subprocess.Popen(command, env=_env(home, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0"), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while STARTED not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert STARTED in log.read_text(), log.read_text()[-3000:]
        assert "Token authentication is enabled" in log.read_text()  # as Ray 2.60 does with a token there
        yield Head(address=f"127.0.0.1:{port}", home=home, token=token, pgid=proc.pid)
    finally:
        _stop_group(proc)
        shutil.rmtree(root, ignore_errors=True)


def _stop_group(proc) -> None:
    for signum, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while _group(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.3)
        if not _group(proc.pid):
            break
    proc.wait(timeout=10)


def _group(pgid: int) -> set[int]:
    """The live processes of process group ``pgid``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.add(int(entry.name))
    return found


def _swepipe(*args, cwd, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, stdin=subprocess.DEVNULL, timeout=600)


@pytest.mark.docker
def test_a_task_runs_on_a_head_started_with_ray_start_and_token_authentication(head, tmp_path):
    assert all(a.startswith(("127.", "[::ffff:127.0.0.1]:")) for a in listening(_group(head.pgid))), \
        listening(_group(head.pgid))  # the head keeps to loopback, as docs/cluster.md's command says
    setup(tmp_path, pipeline_script(FIRST, [reply(edits_from_patch(FIRST.patch))]))
    done = _swepipe("run", "--instance-ids", FIRST.instance_id, "--config", "config.yaml", "--run-id", "started",
                    "--evaluate", "--executor", "ray", "--ray-address", head.address, cwd=tmp_path,
                    env=_env(head.home))  # the driver's machine is the head's: its token is in ~/.ray/auth_token
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "InvalidAuthToken" not in done.stdout + done.stderr
    prediction = finished_predictions(RunLayout(tmp_path / "runs" / "started").predictions)[FIRST.instance_id]
    assert prediction["resolved"] is True and prediction["node"]
    assert no_containers_left("started") and not scratch_left("started")


def test_a_driver_without_the_head_s_token_is_told_what_to_set(head, tmp_path):
    elsewhere = tmp_path / "home"  # another machine's home: no token there
    elsewhere.mkdir()
    join = ("run", "--executor", "ray", "--ray-address", head.address, "--limit", "1", "--run-id", "token")
    started = time.monotonic()
    none = _swepipe(*join, cwd=tmp_path, env=_env(elsewhere))
    wrong = _swepipe(*join, cwd=tmp_path, env=_env(elsewhere, RAY_AUTH_TOKEN="not-the-head-s-token"))
    assert time.monotonic() - started < 60  # said at once, not after Ray's own retries
    for done in (none, wrong):
        assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
        said = " ".join(done.stderr.split())
        assert f"the Ray cluster at {head.address} requires token authentication" in said, said
        assert "~/.ray/auth_token" in said and "RAY_AUTH_TOKEN" in said and "ray get-auth-token" in said
        assert "start a cluster first" not in said  # the cluster is there: it is the token that is missing
    assert "this machine has no token" in " ".join(none.stderr.split())
    assert "refused this machine's token (from RAY_AUTH_TOKEN)" in " ".join(wrong.stderr.split())
    assert not (tmp_path / "runs" / "token").exists()  # said before anything was written
    # The head's token in RAY_AUTH_TOKEN (what `ray get-auth-token` prints there): the driver joins.
    cleanup = _swepipe("cleanup", "token", "--executor", "ray", "--ray-address", head.address,
                       cwd=tmp_path, env=_env(elsewhere, RAY_AUTH_TOKEN=head.token))
    assert cleanup.returncode == 0, cleanup.stdout[-3000:] + cleanup.stderr[-3000:]
    assert "removed 0 container(s)" in cleanup.stdout
