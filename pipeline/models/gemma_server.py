"""The local model's server: llama.cpp (the prebuilt, portable ``xllamacpp`` wheel) behind a small OpenAI-compatible
front on 127.0.0.1.

``python -m pipeline.models.gemma_server --model GGUF --alias NAME --port N [--context N] [--threads N] [--slots N]``

llama.cpp runs ``--slots`` requests at once in one batch (continuous batching), so the K juniors of a task share the
model instead of queueing for it. The GGUF carries no chat template, so the front writes the prompt itself in Gemma
3's format (``pipeline.models.gemma_chat``) and asks llama.cpp for a plain completion of it:

- ``POST /v1/chat/completions``: a request with tools is answered with one call of them, held by a grammar
  (``pipeline.models.grammars.tool_call``) and returned as an OpenAI tool call; otherwise the request's own
  ``grammar`` (llama.cpp's GBNF) holds the reply, and without one the reply ends at ``<end_of_turn>``.
- ``POST /v1/completions``: a raw prompt, passed through (the tests compare prompts by their token counts).
- ``GET /v1/models`` and ``GET /health``.

A request it cannot read is answered 400 with what is wrong; llama.cpp's own refusals (a grammar it cannot parse) keep
llama.cpp's status and message.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pipeline.models.gemma_chat import END, as_tool_call, gemma_prompt
from pipeline.models.grammars import tool_call

# OpenAI's sampling options that llama.cpp's completion takes under the same name.
PASSED_ON = ("temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty",
             "repeat_penalty")


class RequestError(ValueError):
    """A request the front cannot read; its text goes back to the caller with status 400."""


def completion_request(body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """llama.cpp's completion request for an OpenAI chat ``body``, and whether the reply is a tool call."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(_is_message(message) for message in messages):
        raise RequestError("'messages' must be a list of message objects, any tool_calls a list of function calls")
    tools, choice = body.get("tools") or [], body.get("tool_choice")
    if not (isinstance(tools, list) and all(_is_function_tool(tool) for tool in tools)):
        raise RequestError("'tools' must be a list of function tools, each with a name and its parameters object")
    if body.get("stream"):
        raise RequestError("streaming is not served; send the request without 'stream'")
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    if max_tokens is not None and not (type(max_tokens) is int and max_tokens > 0):
        raise RequestError(f"'max_tokens' must be a positive whole number, not {max_tokens!r}")
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not (isinstance(stop, list) and all(isinstance(text, str) for text in stop)):
        raise RequestError("'stop' must be a string or a list of strings")
    grammar = body.get("grammar")
    if grammar is not None and not isinstance(grammar, str):
        raise RequestError("'grammar' must be a GBNF grammar as a string")
    sampling = {key: body[key] for key in PASSED_ON if body.get(key) is not None}
    for key, value in sampling.items():
        if type(value) not in (int, float) or not math.isfinite(value) or (key == "seed" and type(value) is not int):
            raise RequestError(f"'{key}' must be a finite number{' (whole)' if key == 'seed' else ''}, not {value!r}")
    calling = bool(tools) and choice != "none"
    if calling and isinstance(choice, dict) and isinstance(choice.get("function"), dict):  # one named tool
        named = choice["function"].get("name")
        tools = [tool for tool in tools if tool["function"]["name"] == named] or tools
    if calling:
        grammar = tool_call(tools, max_tokens).text
    prompt = gemma_prompt(messages, tools if calling else None)
    # llama.cpp reads UTF-8: a lone surrogate (JSON may carry one) is sent as its escape, not dropped
    request: dict[str, Any] = {"prompt": prompt.encode("utf-8", "backslashreplace").decode(),
                               "n_predict": max_tokens or -1, **sampling}
    if grammar:
        request["grammar"] = grammar  # <end_of_turn> is an end-of-generation token: llama.cpp stops at it
    else:
        stop = [*stop, END]  # a free reply may spell it out as text
    if stop:
        request["stop"] = [text.encode("utf-8", "backslashreplace").decode() for text in stop]
    return request, calling


def _is_message(message: Any) -> bool:
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    return isinstance(message, dict) and (calls is None or isinstance(calls, list) and all(
        isinstance(call, dict) and isinstance(call.get("function"), dict) for call in calls))


def _is_function_tool(tool: Any) -> bool:
    function = tool.get("function") if isinstance(tool, dict) else None
    return isinstance(function, dict) and isinstance(function.get("name"), str) and \
        isinstance(function.get("parameters", {}), dict)


def chat_response(completion: dict[str, Any], alias: str, calling: bool) -> dict[str, Any]:
    """llama.cpp's completion answer as an OpenAI chat completion (its tool call, when ``calling``)."""
    choice = (completion.get("choices") or [{}])[0]
    response = {
        "id": completion.get("id") or f"chatcmpl-{time.time_ns()}", "object": "chat.completion",
        "created": completion.get("created") or int(time.time()), "model": alias,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": choice.get("text", "")},
                     "finish_reason": choice.get("finish_reason") or "stop"}],
        "usage": completion.get("usage") or {}}
    return as_tool_call(response) if calling else response


class LlamaFront:
    """The model, loaded once, and the answers to the front's routes."""

    def __init__(self, model: str, alias: str, *, context: int, threads: int, slots: int) -> None:
        import xllamacpp

        params = xllamacpp.CommonParams()
        params.model.path = model
        params.model_alias = alias
        params.n_parallel = slots
        params.n_ctx = context * slots  # llama.cpp splits the context among its slots
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
        self.alias, self.server = alias, xllamacpp.Server(params)

    def chat(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        request, calling = completion_request(body)
        completion = self.server.handle_completions(request)
        if "error" in completion:
            return _llama_error(completion)
        return 200, chat_response(completion, self.alias, calling)

    def complete(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if not isinstance(body.get("prompt"), str):
            raise RequestError("'prompt' must be a string")
        request = {"prompt": body["prompt"], "n_predict": body.get("max_tokens") or 16,
                   **{key: body[key] for key in PASSED_ON if body.get(key) is not None}}
        completion = self.server.handle_completions(request)
        return _llama_error(completion) if "error" in completion else (200, completion)

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.alias, "object": "model", "owned_by": "swepipe"}]}


def _llama_error(completion: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    error = completion["error"] if isinstance(completion["error"], dict) else {"message": str(completion["error"])}
    code = error.get("code")
    return (code if isinstance(code, int) and 400 <= code < 600 else 500), {"error": error}


def handler_for(front: LlamaFront) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._send(200, front.models())
            elif self.path == "/health":
                self._send(200, {"status": "ok"})
            else:
                self._send(404, _error(f"no route GET {self.path}"))

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            routes = {"/v1/chat/completions": front.chat, "/chat/completions": front.chat,
                      "/v1/completions": front.complete, "/completions": front.complete}
            route = routes.get(self.path.rstrip("/"))
            if route is None:
                self._send(404, _error(f"no route POST {self.path}"))
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                if not isinstance(body, dict):
                    raise RequestError("the request body must be a JSON object")
                self._send(*route(body))
            except (RequestError, ValueError) as error:  # a JSON decode error is a ValueError
                self._send(400, _error(f"bad request: {error}"))
            except Exception as error:  # noqa: BLE001 - the caller gets the fault, the server serves on
                self._send(500, {"error": {"message": f"{type(error).__name__}: {error}", "type": "server_error"}})

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
            pass  # llama.cpp logs each request already

    return Handler


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error"}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the GGUF file")
    parser.add_argument("--alias", required=True, help="the model's name in requests")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--context", type=int, default=16384, help="tokens of context per slot")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--slots", type=int, default=1, help="requests served at once")
    args = parser.parse_args(argv)
    front = LlamaFront(args.model, args.alias, context=args.context, threads=args.threads, slots=args.slots)
    http = ThreadingHTTPServer(("127.0.0.1", args.port), handler_for(front))
    http.daemon_threads = True
    http.serve_forever()


if __name__ == "__main__":
    main()
