"""Prompt caching through the real litellm path, against a loopback server that speaks the provider's API: what
is sent (cache markers where the provider needs them, the same prefix for every rollout and step) and how what
the provider reports as cached is priced (litellm's price map)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipeline.agent.agent import Agent, prompt
from pipeline.agent.settings import AgentSettings
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.models.ledger import Ledger
from pipeline.models.prompt_cache import marked_indices, with_cache_markers
from pipeline.runtime.local import LocalRuntime
from pipeline.settings.config import Limits
from pipeline.settings.model_spec import ModelSpec

ANTHROPIC = "anthropic/claude-sonnet-4-5-20250929"  # litellm's map: $3 in, $0.30 cache read, $3.75 cache write, $15 out
OPENAI = "openai/gpt-4o-mini"  # $0.15 in, $0.075 cached, $0.60 out
STEPS = ["I look first.\n```bash\nls\n```", "Done.\n```bash\nsubmit\n```"]


class Provider:
    """A loopback HTTP server answering Anthropic's /v1/messages and OpenAI's /chat/completions with replies in
    turn (by the number of assistant turns in the conversation) and the usage given; it keeps every request."""

    def __init__(self, usage: dict, tool_calls: list[list[dict]] | None = None):
        """``tool_calls``: Anthropic's replies are these tool_use blocks in turn (the tool-call format)."""
        self.requests: list[dict] = []
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                provider.requests.append(body)
                turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
                text = STEPS[min(turn, len(STEPS) - 1)]
                if self.path.endswith("/v1/messages"):
                    content = [{"type": "text", "text": text}]
                    if tool_calls:
                        content = [{"type": "tool_use", "id": f"toolu_{turn}_{n}", "name": name, "input": arguments}
                                   for n, (name, arguments) in enumerate(tool_calls[min(turn, len(tool_calls) - 1)])]
                    answer = {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                              "content": content, "stop_reason": "tool_use" if tool_calls else "end_turn",
                              "stop_sequence": None, "usage": usage}
                else:
                    answer = {"id": "c1", "object": "chat.completion", "created": 0, "model": body["model"],
                              "choices": [{"index": 0, "finish_reason": "stop",
                                           "message": {"role": "assistant", "content": text}}], "usage": usage}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-for-a-loopback-server")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key-for-a-loopback-server")


def rollouts(model, provider, leaky_repo, count=2, limits: Limits | None = None, **spec):
    """``count`` junior-style agents on one task, each to its submission; the ledger of their calls (and the last
    rollout's record)."""
    limits = limits or Limits()
    ledger = Ledger()
    client = ModelClient(ModelSpec(model=model, api_base=provider.url, max_retries=0, **spec), "junior", ledger)
    tools = limits.action_format == "tools"
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime:  # one workdir, as /app in containers
        for index in range(count):
            messages = prompt("agent_system_tools.md.j2" if tools else "agent_system.md.j2", "agent_instance.md.j2",
                              workdir=str(runtime.workdir), task_text="add() subtracts", command_timeout=60,
                              max_steps=limits.max_steps, tools=tools, editor=limits.editor)
            run = Agent(AgentSettings(f"rollout-{index:02d}", client, runtime, Budget("r"), limits,
                                      messages=messages, agent_index=index, temperature=0.3 * index)).run()
            assert run.exit_reason == "submitted"
    ledger.last_run = run
    return ledger


def marks(request) -> int:
    blocks = [*(request.get("system") or [])] + [block for m in request["messages"] if isinstance(m["content"], list)
                                                 for block in m["content"]]
    return sum(1 for block in blocks if isinstance(block, dict) and "cache_control" in block)


def test_anthropic_calls_mark_the_shared_prefix_and_cached_input_is_priced_as_cached(keys, leaky_repo):
    usage = {"input_tokens": 100, "cache_read_input_tokens": 900, "cache_creation_input_tokens": 50,
             "output_tokens": 20}
    provider = Provider(usage)
    try:
        ledger = rollouts(ANTHROPIC, provider, leaky_repo)
    finally:
        provider.close()
    first, second, other_first, _ = provider.requests
    # The system prompt (every rollout's) and the latest user messages carry a marker; never over Anthropic's 4.
    assert first["system"] == [{"type": "text", "text": first["system"][0]["text"],
                                "cache_control": {"type": "ephemeral"}}]
    assert [m["content"][-1].get("cache_control") for m in second["messages"] if m["role"] == "user"] == \
        [{"type": "ephemeral"}] * 2
    assert all(marks(request) <= 4 for request in provider.requests)
    # Every rollout of the task sends the same start, and each step resends the step before it unchanged.
    assert other_first["system"] == first["system"] and other_first["messages"] == first["messages"]
    assert second["messages"][0]["content"][0]["text"] == first["messages"][0]["content"][0]["text"]
    # Read from the cache at $0.30/M, written at $3.75/M, the rest at $3/M, output at $15/M (litellm's map).
    row = ledger.rows[0]
    assert (row.input_tokens, row.cached_tokens, row.cache_write_tokens, row.output_tokens) == (1050, 900, 50, 20)
    assert row.cost == pytest.approx((100 * 3 + 900 * 0.30 + 50 * 3.75 + 20 * 15) / 1e6)


def test_automatic_caching_providers_get_plain_messages_and_their_cached_tokens_priced(keys, leaky_repo):
    usage = {"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020,
             "prompt_tokens_details": {"cached_tokens": 800}}
    provider = Provider(usage)
    try:
        ledger = rollouts(OPENAI, provider, leaky_repo, count=1)
    finally:
        provider.close()
    assert all(isinstance(m["content"], str) for r in provider.requests for m in r["messages"])
    row = ledger.rows[0]
    assert (row.cached_tokens, row.cache_write_tokens) == (800, 0)
    assert row.cost == pytest.approx((200 * 0.15 + 800 * 0.075 + 20 * 0.60) / 1e6)


@pytest.mark.parametrize(("model", "setting", "marked"), [(ANTHROPIC, "off", False), (OPENAI, "on", True)])
def test_the_prompt_cache_setting_overrides_the_provider_default(keys, leaky_repo, model, setting, marked):
    provider = Provider({"input_tokens": 10, "output_tokens": 5, "prompt_tokens": 10, "completion_tokens": 5})
    try:
        rollouts(model, provider, leaky_repo, count=1, prompt_cache=setting)
    finally:
        provider.close()
    assert all((marks(request) > 0) == marked for request in provider.requests)


def test_the_tool_call_format_marks_its_latest_tool_results_and_they_reach_anthropic(keys, leaky_repo):
    """Observations are tool messages in the tool-call format: the markers go on the last message of each of the
    two latest turns (tool results, a note after them), and litellm puts them on Anthropic's tool_result blocks,
    so the history is read back from the cache on the next step, not only the system prompt and the task."""
    bash = ("bash", {"command": "ls"})
    replies = [[bash], [bash], [bash, ("bash", {"command": "pwd"})], [bash], [bash], [("submit", {})]]
    provider = Provider({"input_tokens": 10, "output_tokens": 5}, tool_calls=replies)
    try:
        ledger = rollouts(ANTHROPIC, provider, leaky_repo, count=1,
                          limits=Limits(action_format="tools", max_steps=7))
    finally:
        provider.close()
    messages = ledger.last_run.messages
    last_prompt = messages[:-1]  # what the submitting call was sent
    # system, task, 5 turns: one (two calls: a format error) answered by two tool results, one followed by the
    # note that 3 replies are left
    assert [m["role"] for m in last_prompt] == ["system", "user", *["assistant", "tool"] * 2, "assistant", "tool",
                                                "tool", "assistant", "tool", "user", "assistant", "tool"]
    assert marked_indices(last_prompt) == [0, 11, 13]
    sent = with_cache_markers(last_prompt)
    assert [i for i, m in enumerate(sent) if _marked(m)] == [0, 11, 13]
    assert sent[13]["cache_control"] == {"type": "ephemeral"} and sent[13]["content"] == last_prompt[13]["content"]
    # What reached the provider: the system prompt, the note that ends the turn before last (litellm merges it
    # with that turn's tool result into one user message) and the tool_result block of the latest turn
    request = provider.requests[-1]
    assert request["system"][-1]["cache_control"] == {"type": "ephemeral"}
    turns = [m for m in request["messages"] if m["role"] == "user"]
    assert [block["type"] for block in turns[-2]["content"]] == ["tool_result", "text"]
    assert turns[-2]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert turns[-1]["content"][-1]["type"] == "tool_result" and \
        turns[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert marks(request) == 3
    # the third call: its two turns' tool results both carry one
    tool_turns = [m for m in provider.requests[2]["messages"] if m["role"] == "user"][1:]
    assert [t["content"][-1]["type"] for t in tool_turns] == ["tool_result"] * 2
    assert [t["content"][-1].get("cache_control") for t in tool_turns] == [{"type": "ephemeral"}] * 2
    assert all(marks(r) <= 4 for r in provider.requests)


def _marked(message: dict) -> bool:
    content = message.get("content")
    return "cache_control" in message or (isinstance(content, list) and "cache_control" in content[-1])
