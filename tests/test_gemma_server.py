"""The local model's front: what any request body becomes (llama.cpp's completion request, or a RequestError the
caller reads as 400), what llama.cpp's answer becomes, what any request over HTTP gets (an answer or a closed
connection in bounded time, never a thread held); and, with the real model (marked slow), that the server's front is
its only listener."""

import contextlib
import http.client
import json
import os
import socket
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import LOCAL_EXTRA, import_promised
from fuzzing import fuzz
from hostile import hostile_number, hostile_text, json_scalar
from hypothesis import given
from hypothesis import strategies as st

from pipeline.agent.actions import BASH, EDITOR, tools_for
from pipeline.edits.editor import COMMANDS
from pipeline.models.gemma_chat import END, gemma_prompt
from pipeline.models.gemma_server import LlamaFront, RequestError, chat_response, completion_request, front_server
from pipeline.models.local_server import LocalModelServer

MESSAGES = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "The issue."}]
TOOLS = tools_for((BASH, EDITOR), COMMANDS)

json_values = st.recursive(json_scalar | hostile_number | hostile_text(),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile_text(12), inner,
                                                                                       max_size=4), max_leaves=12)
call = st.fixed_dictionaries({"function": st.fixed_dictionaries({}, optional={"name": json_values,
                                                                             "arguments": json_values})})
message = st.fixed_dictionaries({}, optional={"role": st.sampled_from(["system", "user", "assistant", "tool"])
                                              | hostile_text(10), "content": json_values,
                                              "tool_calls": st.lists(call, max_size=2) | json_values})


@fuzz
@given(body=st.dictionaries(st.sampled_from(["messages", "tools", "tool_choice", "grammar", "max_tokens", "stop",
                                             "stream", "temperature", "seed"]), json_values)
       | st.fixed_dictionaries({"messages": st.lists(message, max_size=5)},
                               optional={"tools": st.just(TOOLS) | json_values, "tool_choice": json_values,
                                         "max_tokens": json_values, "stop": json_values}))
def test_any_request_body_is_a_completion_request_or_a_clear_refusal(body):
    try:
        request, calling = completion_request(body)
    except RequestError as error:
        assert str(error)
        return
    assert isinstance(request["prompt"], str) and request["prompt"].endswith("<start_of_turn>model\n")
    assert request["n_predict"] == -1 or request["n_predict"] > 0
    assert calling == ("grammar" in request and bool(body.get("tools")) and body.get("tool_choice") != "none")
    json.dumps(request, allow_nan=True)  # it can be sent


def test_a_request_with_tools_is_held_to_one_call_and_answered_as_that_call():
    request, calling = completion_request({"messages": MESSAGES, "tools": TOOLS, "max_tokens": 300})
    assert calling and request["n_predict"] == 300 and '\\"name\\": \\"bash\\"' in request["grammar"]
    assert request["prompt"] == gemma_prompt(MESSAGES, TOOLS) and "stop" not in request
    completion = {"id": "c1", "choices": [{"text": '{"name": "bash", "arguments": {"command": "ls"}}',
                                           "finish_reason": "stop"}], "usage": {"prompt_tokens": 9}}
    answer = chat_response(completion, "gemma", calling)
    [call] = answer["choices"][0]["message"]["tool_calls"]
    assert call["function"] == {"name": "bash", "arguments": '{"command": "ls"}'}
    assert answer["choices"][0]["finish_reason"] == "tool_calls" and answer["usage"] == {"prompt_tokens": 9}


def test_a_named_tool_choice_holds_the_call_to_that_tool_and_none_to_text():
    named, _ = completion_request({"messages": MESSAGES, "tools": TOOLS,
                                   "tool_choice": {"type": "function", "function": {"name": EDITOR}}})
    assert EDITOR in named["grammar"] and '\\"bash\\"' not in named["grammar"]
    free, calling = completion_request({"messages": MESSAGES, "tools": TOOLS, "tool_choice": "none"})
    assert not calling and "grammar" not in free and free["stop"] == [END]
    assert free["prompt"] == gemma_prompt(MESSAGES)  # no tools offered in the prompt either


def test_a_free_reply_stops_at_the_end_of_turn_written_as_text_and_a_held_one_at_its_grammar():
    free, _ = completion_request({"messages": MESSAGES, "stop": "STOP", "temperature": 0.5, "seed": 3})
    assert free["stop"] == ["STOP", END] and free["temperature"] == 0.5 and free["seed"] == 3
    held, _ = completion_request({"messages": MESSAGES, "grammar": 'root ::= "ok"'})
    assert held["grammar"] == 'root ::= "ok"' and "stop" not in held


@pytest.mark.parametrize(("body", "named"), [
    ({"messages": "hi"}, "'messages'"), ({"messages": [1]}, "'messages'"),
    ({"messages": MESSAGES, "tools": [{"type": "function"}]}, "'tools'"),
    ({"messages": MESSAGES, "max_tokens": 1e309}, "'max_tokens'"),
    ({"messages": MESSAGES, "max_tokens": 0}, "'max_tokens'"),
    ({"messages": MESSAGES, "stream": True}, "streaming")])
def test_a_request_it_cannot_serve_is_refused_naming_the_field(body, named):
    with pytest.raises(RequestError, match=named):
        completion_request(body)


def test_a_reply_cut_short_under_tools_stays_text():
    completion = {"choices": [{"text": '{"name": "bash", "argu', "finish_reason": "length"}]}
    answer = chat_response(completion, "gemma", True)
    assert answer["choices"][0]["message"]["content"] == '{"name": "bash", "argu'
    assert answer["choices"][0]["finish_reason"] == "length" and answer["id"]


# The front over HTTP: malformed and hostile requests are answered 4xx or their connection closed within a bounded
# time, their threads end, and the front serves on. llama.cpp's completion is a canned one here (the HTTP handling
# is what is driven); the tests marked slow run the real model.

SECONDS = 1.0  # the front's request_seconds in these tests
ANSWER = {"id": "c1", "choices": [{"text": "ok", "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
GOOD = json.dumps({"messages": MESSAGES, "max_tokens": 4}).encode()


class CannedLlama:
    """llama.cpp's answer to any completion request, as xllamacpp's handle_completions gives it."""

    def handle_completions(self, request: dict) -> dict:
        return ANSWER


@contextmanager
def serving(request_seconds: float = SECONDS):
    server = front_server(LlamaFront(CannedLlama(), "gemma"), 0, request_seconds=request_seconds)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def port():
    with serving() as bound:
        yield bound


def post(path: str, body: bytes, *headers: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\n" + "".join(f"{h}\r\n" for h in headers) + "\r\n").encode() + body


def with_length(length: str, body: bytes = GOOD) -> bytes:
    return post("/v1/chat/completions", body, "Content-Type: application/json", f"Content-Length: {length}")


def exchange(port: int, raw: bytes, *, hold_open: bool = True, trickle: float = 0.0,
             seconds: float = SECONDS + 3) -> int | None:
    """Sends ``raw`` (a byte every ``trickle`` seconds, if given; then, unless ``hold_open``, no more) and returns
    the answer's status, or None when the front closes the connection without one. Neither within ``seconds``
    fails the test."""
    deadline = time.monotonic() + seconds
    with socket.create_connection(("127.0.0.1", port), timeout=seconds) as connection:
        try:
            for piece in ([raw[i:i + 1] for i in range(len(raw))] if trickle else [raw]):
                connection.sendall(piece)
                time.sleep(trickle)
                if time.monotonic() > deadline:
                    pytest.fail(f"the front still reads a request sent a byte every {trickle} s after {seconds} s")
            if not hold_open:
                connection.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            return None  # closed while the request was being sent
        except TimeoutError:
            pytest.fail(f"the front neither read the request nor closed the connection within {seconds} s")
        received = b""
        while b"\r\n" not in received:
            connection.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = connection.recv(4096)
            except ConnectionResetError:
                return None
            except TimeoutError:
                pytest.fail(f"neither an answer nor a closed connection within {seconds} s")
            if not chunk:
                assert not received, f"an answer cut short: {received!r}"
                return None
            received += chunk
    status_line = received.split(b"\r\n", 1)[0].split()
    assert status_line[0] == b"HTTP/1.1" and status_line[1].isdigit(), f"not an HTTP answer: {received[:200]!r}"
    return int(status_line[1])


def threads_back_to(count: int, seconds: float = SECONDS + 3) -> int:
    deadline = time.monotonic() + seconds
    while threading.active_count() > count and time.monotonic() < deadline:
        time.sleep(0.05)
    return threading.active_count()


def assert_serves_on(port: int, threads: int) -> None:
    """A good request is answered, and no thread is left beyond those there were before the bad one."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=SECONDS + 3)
    connection.request("POST", "/v1/chat/completions", body=GOOD, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200 and json.loads(response.read())["choices"][0]["message"]["content"] == "ok"
    connection.close()
    assert threads_back_to(threads) == threads, "a connection's thread outlived its request"


LONG_HEADER = "X-Long: " + "a" * 70_000
MALFORMED = {
    "negative Content-Length": (with_length("-1"), {400}),
    "negative Content-Length, no body": (with_length("-5", b""), {400}),
    "huge Content-Length": (with_length(str(10**12)), {413}),
    "absurd Content-Length": (with_length("9" * 40), {400}),
    "non-numeric Content-Length": (with_length("abc"), {400}),
    "Content-Length in exponent form": (with_length("1e3"), {400}),
    "Content-Length with a sign": (with_length("+" + str(len(GOOD)), b""), {400}),
    "Content-Length in other digits": (with_length("\u00b2"), {400}),
    "two Content-Lengths that disagree": (post("/v1/chat/completions", GOOD, f"Content-Length: {len(GOOD)}",
                                               "Content-Length: 3"), {400}),
    "no Content-Length": (post("/v1/chat/completions", GOOD), {400, 411}),
    "a chunked body": (post("/v1/chat/completions", b"5\r\nhello\r\n0\r\n\r\n", "Transfer-Encoding: chunked"),
                       {400, 411}),
    "a body shorter than announced, the client waiting": (with_length(str(len(GOOD) + 50)), {408, None}),
    "bad JSON": (with_length(str(len(b"{'messages': ")), b"{'messages': "), {400}),
    "JSON nested past the parser's depth": (with_length(str(200_000), b"[" * 100_000 + b"]" * 100_000), {400}),
    "JSON that is no object": (with_length("7", b"[1,2,3]"), {400}),
    "a body that is not UTF-8": (with_length("4", b"\xff\xfe\xfa\x00"), {400}),
    "PUT": (b"PUT /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", {405}),
    "DELETE": (b"DELETE /v1/models HTTP/1.1\r\n\r\n", {405}),
    "an unknown method": (b"BREW /v1/models HTTP/1.1\r\n\r\n", {405}),
    "llama.cpp's /completion": (post("/completion", b"{}", "Content-Length: 2"), {404}),
    "llama.cpp's /tokenize": (post("/tokenize", b'{"content": "x"}', "Content-Length: 16"), {404}),
    "llama.cpp's /slots": (b"GET /slots HTTP/1.1\r\n\r\n", {404}),
    "llama.cpp's /props": (b"GET /props HTTP/1.1\r\n\r\n", {404}),
    "a header line too long": (post("/v1/chat/completions", b"", LONG_HEADER), {431}),
    "too many headers": (post("/v1/chat/completions", b"", *[f"X-{i}: {i}" for i in range(120)]), {431}),
    "a request line too long": (f"GET /{'a' * 70_000} HTTP/1.1\r\n\r\n".encode(), {414}),
    "an HTTP/0.9 request line": (b"GET /v1/models\r\n\r\n", {400}),
    "HTTP/2 asked for": (b"GET /v1/models HTTP/2.0\r\n\r\n", {400}),
    "HTTP/0.9 named on a request line of three words": (b"GET /v1/models HTTP/0.9\r\n\r\n", {400}),
    "HTTP/0.9 named, headers too long": (f"GET /v1/models HTTP/0.9\r\n{LONG_HEADER}\r\n\r\n".encode(), {431}),
    "bytes that are no request line": (b"\x00\xff\x16\x03\x01 \r\n\r\n", {400}),
    "a request line but no headers' end, the client waiting": (b"POST /v1/chat/completions HTTP/1.1\r\n", {None}),
    "a connection that sends nothing": (b"", {None}),
}


@pytest.mark.parametrize("raw, statuses", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_request_is_refused_4xx_or_closed_in_bounded_time_and_the_front_serves_on(port, raw, statuses):
    threads = threading.active_count()
    began = time.monotonic()
    status = exchange(port, raw)
    assert status in statuses, f"answered {status}, expected one of {statuses}"
    assert time.monotonic() - began < SECONDS + 3
    assert_serves_on(port, threads)


def test_a_client_that_sends_a_byte_at_a_time_is_let_go_at_the_deadline(port):
    """Each byte arrives well within a socket timeout; the request as a whole does not arrive within the time."""
    threads = threading.active_count()
    status = exchange(port, with_length(str(len(GOOD))), trickle=0.2, seconds=SECONDS + 3)
    assert status in (408, None)
    assert_serves_on(port, threads)


def test_a_body_shorter_than_announced_then_the_end_of_the_stream_is_refused_at_once(port):
    threads = threading.active_count()
    began = time.monotonic()
    assert exchange(port, with_length(str(len(GOOD) + 50)), hold_open=False) == 400
    assert time.monotonic() - began < SECONDS  # the end of the stream, not the deadline
    assert_serves_on(port, threads)


def test_kept_alive_requests_are_each_answered_and_a_bad_json_body_keeps_the_connection(port):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=SECONDS + 3)
    for body, status in ((GOOD, 200), (b"{not json", 400), (GOOD, 200)):
        connection.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == status and json.loads(response.read())
        assert not response.will_close  # the body was read: the connection serves the next request
    connection.close()


def test_a_client_that_waits_for_100_continue_gets_it_and_then_its_answer(port):
    with socket.create_connection(("127.0.0.1", port), timeout=SECONDS + 3) as connection:
        connection.sendall(post("/v1/chat/completions", b"", f"Content-Length: {len(GOOD)}", "Expect: 100-continue"))
        received = b""
        while b"\r\n\r\n" not in received:
            received += connection.recv(4096)
        assert received.startswith(b"HTTP/1.1 100 ")
        connection.sendall(GOOD)
        assert connection.recv(4096).startswith(b"HTTP/1.1 200 ")


def test_a_refusal_names_what_is_wrong(port):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=SECONDS + 3)
    connection.putrequest("POST", "/v1/chat/completions")
    connection.putheader("Content-Length", "-1")
    connection.endheaders()
    response = connection.getresponse()
    message = json.loads(response.read())["error"]["message"]
    assert response.status == 400 and "Content-Length" in message and "'-1'" in message and response.will_close


TOKEN, PRINTABLE = st.characters(min_codepoint=0x21, max_codepoint=0x7e), st.characters(min_codepoint=0x20,
                                                                                           max_codepoint=0x7e)
LATIN_1 = st.characters(min_codepoint=0x20, max_codepoint=0xff)
request_lines = st.tuples(
    st.sampled_from(["GET", "POST", "PUT", "HEAD", "OPTIONS", ""]) | st.text(TOKEN, max_size=8),
    st.sampled_from(["/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/slots", "/completion",
                     "*", ""]) | st.text(TOKEN, max_size=20),
    st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/0.9", "HTTP/1.1 x", ""])
    | st.text(PRINTABLE, max_size=10))
header_values = st.sampled_from(["0", "-1", "2", str(len(GOOD)), str(10**12), "9" * 40, " 5", "5 ", "0x10", "chunked",
                                 "close", "keep-alive", "100-continue"]) \
    | st.integers(-10**20, 10**20).map(str) | st.text(LATIN_1, max_size=20)
header_names = st.sampled_from(["Content-Length", "Transfer-Encoding", "Connection", "Expect", "Content-Type",
                                 "Host"]) | st.text(TOKEN, max_size=12)
header_lines = st.lists(st.tuples(header_names, header_values), max_size=5)
bodies = st.sampled_from([GOOD, b"", b"{}", b"null", b"[]"]) | st.binary(max_size=120) \
    | json_values.map(lambda value: json.dumps({"messages": [{"role": "user", "content": value}]}).encode())
line_ends = st.sampled_from(["\r\n", "\n", "\r"])


@fuzz
@given(line=request_lines, headers=header_lines, body=bodies, end=line_ends, hold_open=st.booleans())
def test_any_request_is_answered_without_a_server_error_or_closed_in_bounded_time_and_the_front_serves_on(
        line, headers, body, end, hold_open):
    raw = (" ".join(part for part in line if part) + end + "".join(f"{name}: {value}{end}" for name, value in headers)
           + end).encode("latin-1") + body
    with serving(request_seconds=0.5) as bound:
        threads = threading.active_count()
        status = exchange(bound, raw, hold_open=hold_open, seconds=3.5)
        assert status is None or 200 <= status < 500, f"answered {status} to {raw[:300]!r}"
        assert_serves_on(bound, threads)


# The real local model's server (Gemma 3 270M in llama.cpp): one process, one listener.

@pytest.fixture(scope="module")
def local_server():
    import_promised("xllamacpp", LOCAL_EXTRA)
    with LocalModelServer(threads=1, context=2048) as started:
        yield started


def listeners(pid: int) -> tuple[set[int], set[str]]:
    """The TCP ports (IPv4 and IPv6) and the Unix socket addresses process ``pid`` listens on, read from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed since the listing
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    addresses = set()
    for row in Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]:
        fields = row.split()  # Num RefCount Protocol Flags Type St Inode Path
        if fields[6] in inodes and int(fields[3], 16) & 0x10000:  # __SO_ACCEPTCON: a listening socket
            addresses.add(fields[7] if len(fields) > 7 else "")
    return ports, addresses


def thread_count(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


def settled_thread_count(pid: int) -> int:
    """The process's threads once the last connection's thread has ended (no change for half a second)."""
    counts = [thread_count(pid)]
    while (len(counts) < 10 or len(set(counts[-10:])) > 1) and len(counts) < 200:
        time.sleep(0.05)
        counts.append(thread_count(pid))
    return counts[-1]


def ask(server: LocalModelServer) -> None:
    request = urllib.request.Request(server.api_base + "/chat/completions", data=GOOD,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.status == 200 and json.loads(response.read())["choices"]


@pytest.mark.slow
def test_the_local_model_server_listens_on_swepipes_port_only(local_server):
    """llama.cpp's own HTTP server (every route, no key) is reachable by no process: no TCP port but the front's,
    and any Unix socket it listens on has no name left to connect to."""
    pid, port = local_server.process.pid, int(local_server.api_base.rsplit(":", 1)[1].split("/")[0])
    ports, addresses = listeners(pid)
    assert ports == {port}, f"the server listens on ports {sorted(ports)}, not only on its front's {port}"
    for address in addresses:
        assert address and not address.startswith("@"), f"a listener anyone may reach by name: {address!r}"
        with socket.socket(socket.AF_UNIX) as probe, pytest.raises(OSError):
            probe.connect(address)
    for raw in (b"GET /slots HTTP/1.1\r\n\r\n", b"GET /props HTTP/1.1\r\n\r\n",
                post("/completion", b'{"prompt": "x"}', "Content-Length: 15"),
                post("/tokenize", b'{"content": "x"}', "Content-Length: 16")):
        assert exchange(port, raw) == 404  # llama.cpp's routes are not the front's


@pytest.mark.slow
def test_the_local_model_server_refuses_malformed_requests_and_serves_on(local_server):
    """The malformed requests that need no waiting, sent to the real server: each refused 4xx at once, the server
    answers a good request after each, and its threads are as many as before."""
    pid, port = local_server.process.pid, int(local_server.api_base.rsplit(":", 1)[1].split("/")[0])
    ask(local_server)
    threads = settled_thread_count(pid)
    for name, (raw, statuses) in MALFORMED.items():
        if None in statuses or 408 in statuses:
            continue  # these wait for the front's time to send a request in (the tests above, with a short one)
        status = exchange(port, raw, seconds=5)
        assert status in statuses, f"{name}: answered {status}, expected one of {statuses}"
        ask(local_server)
        deadline = time.monotonic() + 5
        while thread_count(pid) > threads and time.monotonic() < deadline:
            time.sleep(0.05)
        assert thread_count(pid) <= threads, f"{name}: the server has {thread_count(pid)} threads, not {threads}"
