"""Prompt caching through the real litellm path, against a loopback server that speaks the provider's API: what
is sent (cache markers where the provider needs them, the same prefix for every rollout and step) and how what
the provider reports as cached is priced (litellm's price map)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipeline.agent.agent import Agent, prompt
from pipeline.config import Limits
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.models.ledger import Ledger
from pipeline.models.spec import ModelSpec
from pipeline.runtime.local import LocalRuntime

ANTHROPIC = "anthropic/claude-sonnet-4-5-20250929"  # litellm's map: $3 in, $0.30 cache read, $3.75 cache write, $15 out
OPENAI = "openai/gpt-4o-mini"  # $0.15 in, $0.075 cached, $0.60 out
STEPS = ["I look first.\n```bash\nls\n```", "Done.\n```bash\nsubmit\n```"]


class Provider:
    """A loopback HTTP server answering Anthropic's /v1/messages and OpenAI's /chat/completions with replies in
    turn (by the number of assistant turns in the conversation) and the usage given; it keeps every request."""

    def __init__(self, usage: dict):
        self.requests: list[dict] = []
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                provider.requests.append(body)
                turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
                text = STEPS[min(turn, len(STEPS) - 1)]
                if self.path.endswith("/v1/messages"):
                    answer = {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                              "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
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


def rollouts(model, provider, leaky_repo, count=2, **spec):
    """``count`` junior-style agents on one task, each to its submission; the ledger of their calls."""
    ledger = Ledger()
    client = ModelClient(ModelSpec(model=model, api_base=provider.url, max_retries=0, **spec), "junior", ledger)
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime:  # one workdir, as /app in containers
        for index in range(count):
            messages = prompt("agent_system.md.j2", "agent_instance.md.j2", workdir=str(runtime.workdir),
                              task_text="add() subtracts", command_timeout=60, max_steps=5)
            run = Agent(f"rollout-{index:02d}", client, runtime, Budget("r"), Limits(), messages=messages,
                        agent_index=index, temperature=0.3 * index).run()
            assert run.exit_reason == "submitted"
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
