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
llama.cpp's status and message. A request that is not plain HTTP/1.1 with one exact ``Content-Length`` (none, a
negative, huge or non-numeric one, a body shorter than announced, a chunked one), a method or path it does not serve,
headers too long, or one that does not arrive in full within ``REQUEST_SECONDS`` (a slow or stalled client) is
answered 4xx or its connection closed, and its thread ends; every other connection is served as before.

The front is the model's only listener. llama.cpp is driven in this process through xllamacpp's Python API, but
xllamacpp always starts llama.cpp's own HTTP server as well, with every route (``/completion``, ``/slots``,
``/props``, ``/tokenize``, ...) and no key: ``sealed_llama`` binds it to a Unix socket in a private directory, under
a key nobody is told, and removes the socket's name once the model is loaded, so no process can connect to it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import re
import secrets
import socket
import tempfile
import time
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypedDict, cast

from pipeline.errors import InfrastructureFault
from pipeline.models.gemma_chat import END, as_tool_call, gemma_prompt
from pipeline.models.grammars import tool_call
from pipeline.records.chat import ChatCompletionReply

# OpenAI's sampling options that llama.cpp's completion takes under the same name.
PASSED_ON = ("temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty",
             "repeat_penalty")


MAX_BODY = 16 * 2**20  # bytes of a request body: a chat request filling a long context is a small part of it
REQUEST_SECONDS = 20.0  # to send a whole request, counted from the connection's last answer (or its opening): past
# it the connection is closed; litellm's clients drop an idle kept-alive connection after 5 s themselves


class ErrorDetail(TypedDict, total=False):
    message: str
    type: str
    code: int


class ErrorBody(TypedDict):
    """An error as OpenAI-compatible clients read it: the front's own refusals and llama.cpp's errors."""

    error: ErrorDetail


class ModelEntry(TypedDict):
    id: str
    object: str
    owned_by: str


class ModelList(TypedDict):
    """GET /v1/models: the one model this server answers as."""

    object: str
    data: list[ModelEntry]


class RequestError(ValueError):
    """A request the front cannot read; its text goes back to the caller with status 400."""


class Refusal(Exception):
    """A request answered with ``status`` and this text; with ``close``, its connection is closed after the answer
    (its body, if any, was not read in full, so the next request's start is unknown)."""

    def __init__(self, status: int, message: str, *, close: bool = True) -> None:
        super().__init__(message)
        self.status, self.close = status, close


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


def chat_response(completion: dict[str, Any], alias: str, calling: bool) -> ChatCompletionReply:
    """llama.cpp's completion answer as an OpenAI chat completion (its tool call, when ``calling``)."""
    choice = (completion.get("choices") or [{}])[0]
    response: ChatCompletionReply = {
        "id": completion.get("id") or f"chatcmpl-{time.time_ns()}", "object": "chat.completion",
        "created": completion.get("created") or int(time.time()), "model": alias,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": choice.get("text", "")},
                     "finish_reason": choice.get("finish_reason") or "stop"}],
        "usage": completion.get("usage") or {}}
    return as_tool_call(response) if calling else response


def sealed_llama(model: str, alias: str, *, context: int, threads: int, slots: int) -> Any:
    """llama.cpp with ``model`` loaded in this process (an ``xllamacpp.Server``, called through its Python API),
    its own HTTP server reachable by no process: bound to a Unix socket in a directory only this user may enter,
    under a key nobody is given, and the socket's name and directory removed once the model is loaded (xllamacpp
    has no way to start without it)."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = model
    params.model_alias = alias
    params.n_parallel = slots
    params.n_ctx = context * slots  # llama.cpp splits the context among its slots
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
    params.api_keys = [secrets.token_urlsafe(32)]  # while the socket has a name: every route but /health refused
    params.endpoint_slots = params.endpoint_props = params.endpoint_metrics = params.ui = False
    params.n_threads_http = 1  # it serves nobody
    hidden = tempfile.mkdtemp(prefix="swepipe-llama-", dir=_short_temp_dir())  # mode 0700
    path = os.path.join(hidden, "llama.sock")
    params.hostnames = [path]
    try:
        server = xllamacpp.Server(params)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a listening socket without a name: nothing can connect to it any more
        os.rmdir(hidden)
    if server.listening_address != f"unix://{path}":
        raise RuntimeError(f"llama.cpp's own HTTP server listens on {server.listening_address}, not on the "
                           f"private socket it was given; the local model is not served beside it")
    return server


def _short_temp_dir() -> str | None:
    """A temporary folder whose socket paths fit in a Unix socket's 107 bytes."""
    return None if len(tempfile.gettempdir()) <= 64 else "/tmp"


class LlamaFront:
    """The model, loaded once, and the answers to the front's routes. ``engine`` answers llama.cpp's completion
    requests (``handle_completions``): ``sealed_llama``'s server."""

    def __init__(self, engine: Any, alias: str) -> None:
        self.engine, self.alias = engine, alias

    @classmethod
    def load(cls, model: str, alias: str, *, context: int, threads: int, slots: int) -> LlamaFront:
        return cls(sealed_llama(model, alias, context=context, threads=threads, slots=slots), alias)

    def chat(self, body: dict[str, Any]) -> tuple[int, ChatCompletionReply | ErrorBody]:
        request, calling = completion_request(body)
        completion = self.engine.handle_completions(request)
        if "error" in completion:
            return _llama_error(completion)
        return 200, chat_response(completion, self.alias, calling)

    def complete(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | ErrorBody]:  # llama.cpp's own answer
        if not isinstance(body.get("prompt"), str):
            raise RequestError("'prompt' must be a string")
        request = {"prompt": body["prompt"], "n_predict": body.get("max_tokens") or 16,
                   **{key: body[key] for key in PASSED_ON if body.get(key) is not None}}
        completion = self.engine.handle_completions(request)
        return _llama_error(completion) if "error" in completion else (200, completion)

    def models(self) -> ModelList:
        return {"object": "list", "data": [{"id": self.alias, "object": "model", "owned_by": "swepipe"}]}


def _llama_error(completion: dict[str, Any]) -> tuple[int, ErrorBody]:
    raw = completion["error"]
    error = cast(ErrorDetail, raw) if isinstance(raw, dict) else ErrorDetail(message=str(raw))  # passed on as it came
    code = error.get("code")
    return (code if isinstance(code, int) and 400 <= code < 600 else 500), {"error": error}


class _ReadBefore(io.RawIOBase):
    """A connection's bytes, each read failing as a timeout once ``handler.deadline`` has passed, however slowly
    they trickle in (a socket timeout alone bounds only the wait for each one)."""

    def __init__(self, connection: socket.socket, handler: Any) -> None:
        self.connection, self.handler = connection, handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.handler.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time")
        self.connection.settimeout(left)
        return self.connection.recv_into(buffer)


_LENGTH = re.compile(r"[0-9]{1,18}")


def handler_for(front: LlamaFront, *, request_seconds: float = REQUEST_SECONDS) -> type[BaseHTTPRequestHandler]:
    """The front's HTTP handler: one connection, one thread; a request must arrive in full within
    ``request_seconds`` and an answer be taken within as long, or the connection is closed."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = default_request_version = "HTTP/1.1"  # every answer has a status line
        timeout = request_seconds  # for writing an answer: a client that does not read it is let go
        # an answer goes out in one write, without Nagle's wait: a status line and headers written apart from the
        # body wait for the client's delayed ACK of them (40 ms on Linux) before the body leaves
        wbufsize, disable_nagle_algorithm = -1, True
        deadline = 0.0

        def setup(self) -> None:
            super().setup()
            self.rfile.close()  # the socket's own reader: replaced by one with a deadline
            self.rfile = io.BufferedReader(_ReadBefore(self.connection, self))

        def handle(self) -> None:
            try:
                super().handle()
            except OSError:  # the client reset the connection or stopped reading: its thread ends here
                self.close_connection = True

        def handle_one_request(self) -> None:
            self.deadline = time.monotonic() + request_seconds
            super().handle_one_request()

        def parse_request(self) -> bool:
            self.request_version = self.default_request_version
            if len(str(self.raw_requestline, "iso-8859-1").split()) == 2:
                self.send_error(400, "an HTTP/0.9 request line; send METHOD PATH HTTP/1.1")
                return False
            if not super().parse_request():
                return False
            if self.request_version.split("/", 1)[1].split(".")[0].lstrip("0") == "":  # HTTP/0.x
                self.send_error(400, f"{self.request_version[:20]} is not served; send HTTP/1.1")
                return False
            return True

        def handle_expect_100(self) -> bool:
            super().handle_expect_100()
            self.wfile.flush()  # the client waits for it before it sends the body
            return True

        def __getattr__(self, name: str) -> Any:
            if name.startswith("do_"):  # any other method: 405, not http.server's 501
                return self._not_allowed
            raise AttributeError(name)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self._has_body():
                self.close_connection = True  # a GET's body is not read: where the next request starts is unknown
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._send(200, front.models())
            elif self.path == "/health":
                self._send(200, {"status": "ok"})
            else:
                self._send(404, _error(f"no route GET {self.path[:200]}"))

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            routes = {"/v1/chat/completions": front.chat, "/chat/completions": front.chat,
                      "/v1/completions": front.complete, "/completions": front.complete}
            route = routes.get(self.path.rstrip("/"))
            try:
                if route is None:
                    raise Refusal(404, f"no route POST {self.path[:200]}")
                body = self._body()
            except Refusal as refusal:
                self._send(refusal.status, _error(str(refusal)), close=refusal.close)
                return
            try:
                answer = route(body)
            except (RequestError, ValueError) as error:
                answer = 400, _error(f"bad request: {error}")
            except InfrastructureFault:
                raise
            except Exception as error:  # noqa: BLE001 - the caller gets the fault, the server serves on
                answer = 500, {"error": {"message": f"{type(error).__name__}: {error}", "type": "server_error"}}
            self._send(*answer)

        def _not_allowed(self) -> None:
            self._send(405, _error(f"method {self.command[:40]} is not served: GET and POST only"), close=True)

        def _has_body(self) -> bool:
            return bool(self.headers.get("Transfer-Encoding")) or \
                any(length.strip() != "0" for length in self.headers.get_all("Content-Length") or [])

        def _body(self) -> dict[str, Any]:
            """The request's JSON object, read exactly as long as its one Content-Length says."""
            if self.headers.get("Transfer-Encoding") is not None:
                raise Refusal(411, "send the body with a Content-Length, not a Transfer-Encoding")
            lengths = {length.strip() for length in self.headers.get_all("Content-Length") or []}
            if not lengths:
                raise Refusal(411, "a POST needs a Content-Length")
            if len(lengths) > 1 or not _LENGTH.fullmatch(next(iter(lengths))):
                shown = ", ".join(sorted(repr(length) for length in lengths))[:200]
                raise Refusal(400, f"Content-Length must be one whole number of bytes, not {shown}")
            length = int(lengths.pop())
            if length > MAX_BODY:
                raise Refusal(413, f"a body may have up to {MAX_BODY} bytes, not {length}")
            try:
                data = self.rfile.read(length)
            except TimeoutError:
                raise Refusal(408, f"the body did not arrive within {request_seconds:g} s") from None
            if len(data) < length:
                raise Refusal(400, f"the body ended after {len(data)} of the {length} bytes announced")
            try:
                body = json.loads(data or b"null")
            except (ValueError, RecursionError) as error:  # a decode error is a ValueError
                raise Refusal(400, f"bad request: the body is not JSON: {error}", close=False) from None
            if not isinstance(body, dict):
                raise Refusal(400, "bad request: the request body must be a JSON object", close=False)
            return body

        def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
            """http.server's own refusals (a bad request line, headers too long), as JSON; all are the client's
            fault, so a 5xx of its (HTTP/2 asked for) is sent as 400."""
            status = code if code < 500 else 400
            self._send(status, _error(message or HTTPStatus(code).phrase), close=True)

        def _send(self, status: int, payload: Mapping[str, object], *, close: bool = False) -> None:  # any JSON object
            if self.request_version == "HTTP/0.9":  # http.server writes no status line for it: answer in 1.1
                self.request_version, close = self.default_request_version, True
            data = json.dumps(payload).encode()
            self.connection.settimeout(request_seconds)  # the answer is taken within this, or the thread ends
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if close or self.close_connection:
                self.close_connection = True
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            pass  # llama.cpp logs each completion already

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
            pass

    return Handler


def _error(message: str) -> ErrorBody:
    return {"error": {"message": message, "type": "invalid_request_error"}}


def front_server(front: LlamaFront, port: int, *, request_seconds: float = REQUEST_SECONDS) -> ThreadingHTTPServer:
    """The front on 127.0.0.1:``port`` (0: a free one), a thread per connection; it serves once serve_forever runs."""
    http = ThreadingHTTPServer(("127.0.0.1", port), handler_for(front, request_seconds=request_seconds))
    http.daemon_threads = True
    return http


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the GGUF file")
    parser.add_argument("--alias", required=True, help="the model's name in requests")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--context", type=int, default=16384, help="tokens of context per slot")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--slots", type=int, default=1, help="requests served at once")
    args = parser.parse_args(argv)
    front = LlamaFront.load(args.model, args.alias, context=args.context, threads=args.threads, slots=args.slots)
    front_server(front, args.port).serve_forever()


if __name__ == "__main__":
    main()
