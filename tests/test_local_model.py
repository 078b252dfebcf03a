"""The whole pipeline with a real local model (Gemma 3 270M served by llama.cpp), scored.

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
from conftest import LOCAL_EXTRA, import_promised

from pipeline.agent.actions import BASH, EDIT, EDITOR, VIEW, parse_action, parse_tool_action, tools_for
from pipeline.agent.agent import prompt
from pipeline.agent.edit_actions import editor_calls
from pipeline.edits.blocks import parse_edits
from pipeline.edits.editor import COMMANDS
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.models.gemma_chat import gemma_prompt
from pipeline.models.ledger import Ledger
from pipeline.models.local_server import LOCAL_ALIAS, THREADS_VARIABLE, LocalModelServer
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.settings.config import RunConfig
from pipeline.tasks import load_tasks
from pipeline.text.prompts import render_task_prompt

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TASK = next(t for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))


def test_local_model_runs_every_stage_and_records_it(tmp_path):
    import_promised("xllamacpp", LOCAL_EXTRA)
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
    prediction = finished_predictions(layout.predictions)[TASK.instance_id]
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
    assert rollout["exit_reason"] and rollout["exit_reason"] != "format_errors"  # it ended for a recorded reason
    steps = rollout["trajectory"]["steps"]
    assert steps and not any(step["format_error"] for step in steps)  # every reply was an action it took
    brief = json.loads((paths.senior / "brief.json").read_text())
    assert brief["source"] in ("senior", "expansion")
    result = json.loads((paths.principal / "result.json").read_text())
    assert result["source"] in ("principal", "fallback:junior_top", "none")
    replies = json.loads((paths.principal / "replies.json").read_text())
    assert replies and all(parse_edits(reply["content"]) for reply in replies)  # edits, whether or not they apply
    evaluation = json.loads((paths.eval / "result.json").read_text())
    assert evaluation["category"] in ("resolved", "tests_failed", "patch_failed")
    assert prediction["resolved"] == evaluation["resolved"]


def test_the_server_ends_when_the_process_that_started_it_is_killed(tmp_path):
    """kill -9 gives swepipe no chance to stop the server it started; the server ends by itself."""
    import_promised("xllamacpp", LOCAL_EXTRA)
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
    assert "could not answer a one-token completion" in said and "SIGILL" in said and "portable wheel" in said
    assert "invalid opcode in libggml-cpu.so" in said  # the tail of the server's own log
    layout = RunLayout(tmp_path / "runs" / "dying")
    assert not (layout.root / "tasks").exists() and finished_predictions(layout.predictions) == {}


# The server itself: Gemma's chat format, and replies held to what the roles parse.

@pytest.fixture(scope="module")
def server():
    import_promised("xllamacpp", LOCAL_EXTRA)
    with LocalModelServer() as started:
        yield started


def _post(server: LocalModelServer, path: str, body: dict) -> dict:
    import urllib.request

    request = urllib.request.Request(server.api_base.removesuffix("/v1") + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def test_the_server_prompts_in_gemmas_chat_format(server):
    """The GGUF has no chat template: a server's fallback would wrap these in another model's turns (llama-2's
    [INST] and <<SYS>>), which the model then echoes. The server's prompt is exactly Gemma's turns, the system text
    in the first one: the chat request's prompt is as many tokens as that text sent raw."""
    messages = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Say OK."},
                {"role": "assistant", "content": "OK."}, {"role": "user", "content": "Again."}]
    answer = _post(server, "/v1/chat/completions", {"model": LOCAL_ALIAS, "messages": messages, "max_tokens": 1})
    expected = gemma_prompt(messages)
    assert expected.startswith("<start_of_turn>user\nYou fix bugs.\n\nSay OK.<end_of_turn>\n")
    assert "[INST]" not in expected and "<<SYS>>" not in expected
    raw = _post(server, "/v1/completions", {"prompt": expected, "max_tokens": 1})
    assert answer["usage"]["prompt_tokens"] == raw["usage"]["prompt_tokens"]
    longer = _post(server, "/v1/completions", {"prompt": expected + "Once more.", "max_tokens": 1})
    assert longer["usage"]["prompt_tokens"] > raw["usage"]["prompt_tokens"]  # the count is the prompt's own


def _task_messages(tools: bool) -> list[dict]:
    return prompt("agent_system_tools.md.j2" if tools else "agent_system.md.j2", "agent_instance.md.j2",
                  workdir="/app", command_timeout=60, max_steps=4, task_text=render_task_prompt(TASK), tools=tools,
                  editor=True)


def _client(server: LocalModelServer, role: str, config: RunConfig) -> ModelClient:
    return ModelClient(server.spec(role, config), role, Ledger())


def test_a_text_format_reply_is_one_action_the_agent_takes(server):
    """A junior's first step on a real task, as the agent sends it, at a temperature where the unheld model
    rambles: whatever it writes is one action (the whole-pipeline test above covers the rollouts' own
    temperatures)."""
    completion = _client(server, "junior", RunConfig()).complete(_task_messages(tools=False), Budget("test"),
                                                                 temperature=1.5, seed=7)
    action = parse_action(completion.content, (BASH, EDIT, VIEW))
    if action.kind in (EDIT, VIEW):
        assert editor_calls(action, COMMANDS)


def test_a_tool_format_reply_is_one_tool_call_the_agent_takes(server):
    config = RunConfig.model_validate({"limits": {"action_format": "tools"}})
    allowed = (BASH, EDITOR)
    completion = _client(server, "junior", config).complete(_task_messages(tools=True), Budget("test"),
                                                            temperature=1.0, seed=7, tools=tools_for(allowed, COMMANDS))
    action = parse_tool_action(completion.tool_calls, completion.content, allowed)
    if action.kind == EDITOR:
        assert editor_calls(action, COMMANDS)


def test_a_request_the_server_cannot_serve_is_refused_with_what_is_wrong_and_it_serves_on(server):
    import urllib.error

    for body, status, said in (({"messages": "hi"}, 400, "'messages'"), ({"messages": [], "grammar": "root ::= ("},
                                                                          400, "grammar")):
        with pytest.raises(urllib.error.HTTPError) as refused:
            _post(server, "/v1/chat/completions", body)
        assert refused.value.code == status and said in json.loads(refused.value.read())["error"]["message"]
    answer = _post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi."}], "max_tokens": 2})
    assert answer["choices"][0]["message"]["role"] == "assistant" and answer["usage"]["completion_tokens"] >= 1
