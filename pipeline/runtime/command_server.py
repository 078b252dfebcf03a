"""A tiny command server that runs inside a task container (copied in and started with python3).

`docker exec` costs tens of milliseconds per command on a typical host, more than an agent step
should. This process is started once per container and runs every later command itself: it reads
one JSON request per line on stdin and answers on stdout with a JSON header line followed by the
kept output bytes. Timeouts and the head/tail bound are applied in here, so a command printing a
gigabyte never crosses the socket. Standard library only, Python 3.6+, no third-party code.
"""

import json
import os
import select
import signal
import subprocess
import sys
import time


def run(request):
    limit = request.get("limit")
    head_cap = None if limit is None else limit - limit // 2
    tail_cap = None if limit is None else limit // 2
    head, tail, total = bytearray(), bytearray(), 0
    env = dict(os.environ)
    env.update(request.get("env") or {})
    started = time.monotonic()
    try:
        proc = subprocess.Popen(["bash", "-c", request["command"]], cwd=request.get("cwd") or None, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
    except OSError as error:
        return {"exit_code": 127, "timed_out": False, "total": 0}, ("cannot start bash: %s\n" % error).encode(), b""
    fd, timed_out = proc.stdout.fileno(), False
    deadline = started + float(request.get("timeout", 60))
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        total += len(chunk)
        if head_cap is None:
            head += chunk
            continue
        room = head_cap - len(head)
        if room > 0:
            head += chunk[:room]
            chunk = chunk[room:]
        if chunk and tail_cap:
            tail += chunk[-tail_cap:]
            if len(tail) > 2 * tail_cap:
                del tail[: len(tail) - tail_cap]
    if timed_out:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    proc.stdout.close()
    exit_code = proc.wait()
    tail = bytes(tail[-tail_cap:]) if tail_cap else b""
    return {"exit_code": exit_code, "timed_out": timed_out, "total": total}, bytes(head), tail


def main():
    out = sys.stdout.buffer
    out.write(json.dumps({"ready": True, "pid": os.getpid()}).encode() + b"\n")
    out.flush()
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        header, head, tail = run(json.loads(line.decode("utf-8")))
        header.update(head_len=len(head), tail_len=len(tail))
        out.write(json.dumps(header).encode() + b"\n" + head + tail)
        out.flush()


if __name__ == "__main__":
    main()
