"""The whole pipeline with a real local model (Gemma 3 270M served by llama-cpp-python), scored.

The model is tiny: the test checks that everything runs and records what happened, not that the
task resolves.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pipeline.models.ledger import Ledger
from pipeline.models.local_server import THREADS_VARIABLE
from pipeline.layout import RunLayout
from pipeline.tasks import load_tasks

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TASK = next(t for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))


def test_local_model_runs_every_stage_and_records_it(tmp_path):
    pytest.importorskip("llama_cpp", reason="the local extra is not installed (pip install 'swepipe[local]')")
    # Four calls (two junior steps, the senior's one, the principal's): each is up to 384 tokens from the CPU.
    config = {"juniors": {"k": 1}, "limits": {"max_steps": 2, "command_timeout": 60, "observation_limit": 2000},
              "senior": {"max_steps": 1, "context_tokens": 2000, "expansion_tokens": 1000}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--instance-ids", TASK.instance_id,
                           "--config", "config.yaml", "--run-id", "local", "--evaluate"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=1500,
                          # one thread: on parallel test workers, two would mostly wait on each other
                          env={**os.environ, "COLUMNS": "200", THREADS_VARIABLE: "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "starting the local model" in done.stdout

    layout = RunLayout(tmp_path / "runs" / "local")
    prediction = layout.finished()[TASK.instance_id]
    assert prediction["models"]["principal"] == "openai/gemma-3-270m"
    paths = layout.task(TASK.instance_id)
    rows = Ledger.read(paths.ledger)
    answered = [r for r in rows if r.error is None]
    # Real token counts from the server. A reply may be empty (the model stops at once: 0 output tokens, as at
    # a rollout's temperature 1.0 on its last step), so output is checked over the whole run.
    assert answered and all(r.input_tokens > 0 for r in answered) and sum(r.output_tokens for r in answered) > 0
    assert all(r.cost == 0 for r in rows)  # declared free
    assert {r.stage for r in rows} >= {"junior", "principal"}

    rollout = json.loads((paths.junior / "rollout-00.json").read_text())
    assert rollout["exit_reason"]  # it ended for a recorded reason
    brief = json.loads((paths.senior / "brief.json").read_text())
    assert brief["source"] in ("senior", "expansion")
    result = json.loads((paths.principal / "result.json").read_text())
    assert result["source"] in ("principal", "fallback:junior_top", "none")
    evaluation = json.loads((paths.eval / "result.json").read_text())
    assert evaluation["category"] in ("resolved", "tests_failed", "patch_failed")
    assert prediction["resolved"] == evaluation["resolved"]


def test_the_server_ends_when_the_process_that_started_it_is_killed(tmp_path):
    """kill -9 gives swepipe no chance to stop the server it started; the server ends by itself."""
    pytest.importorskip("llama_cpp", reason="the local extra is not installed (pip install 'swepipe[local]')")
    starter = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom pipeline.models.local_server import LocalModelServer\n"
         "server = LocalModelServer(threads=1)\nserver.start()\nprint(server.process.pid, flush=True)\n"
         "time.sleep(600)"], stdout=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)})
    server_pid = 0
    try:
        server_pid = int(starter.stdout.readline())
        assert _alive(server_pid)
        starter.kill()
        starter.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(server_pid), "the local model server outlived the process that started it"
    finally:
        starter.kill()
        if server_pid and _alive(server_pid):  # what this test found must not outlive it either
            os.kill(server_pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper (the orphaned server's parent is whoever adopted it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_a_server_that_cannot_complete_stops_the_run_before_its_first_task(tmp_path):
    """The server lists its model, then dies of SIGILL on the first completion: the run names that, shows the
    server's log and starts no task, instead of failing every call and reporting "resolved 0 of N"."""
    tests = Path(__file__).parent
    server = str(tests / "dying_model_server.py")
    launcher = ("import sys\nfrom pipeline.models.local_server import LocalModelServer\n"
                f"LocalModelServer.command = lambda self, port: [sys.executable, {server!r}, str(port)]\n"
                "from pipeline.cli import main\nsys.argv[0] = 'swepipe'\nmain()\n")
    done = subprocess.run([sys.executable, "-c", launcher, "run", "--instance-ids", TASK.instance_id, "--run-id",
                           "dying", "--evaluate"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200", "PYTHONPATH": str(tests.parent)},
                          stdin=subprocess.DEVNULL, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode == 2, said[-3000:]
    assert "could not answer a one-token completion" in said and "SIGILL" in said and "GGML_NATIVE=OFF" in said
    assert "invalid opcode in libggml-cpu.so" in said  # the tail of the server's own log
    layout = RunLayout(tmp_path / "runs" / "dying")
    assert not (layout.root / "tasks").exists() and layout.finished() == {}
