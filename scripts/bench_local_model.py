"""The local model's reply latency through swepipe's front, this tree against an older one, measured in the same run.

Both fronts (``pipeline/models/gemma_server.py`` of this tree and of ``--old REF``) are started on the same GGUF,
one thread and one slot each, and sent the same chat request in turns (old, new, old, ...) over a kept-alive
connection, as litellm sends them; then once more on a new connection per request. Prints each one's median and
90th percentile and the ratio new / old of the medians (1.00: as fast; below 1: faster).

    python scripts/bench_local_model.py [--old main] [--requests 40] [--max-tokens 16]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline.models.local_server import _free_port, _server_env, local_model_path

ROOT = Path(__file__).resolve().parent.parent
REQUEST = {"model": "gemma-3-270m", "temperature": 0, "seed": 1,
           "messages": [{"role": "system", "content": "You fix bugs."},
                        {"role": "user", "content": "Name one way to find a bug in a Python function."}]}


def start(module_file: Path, port: int, log: Path) -> subprocess.Popen:
    command = [sys.executable, str(module_file), "--model", str(local_model_path()), "--alias", "gemma-3-270m",
               "--port", str(port), "--threads", "1", "--slots", "1", "--context", "2048"]
    return subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**_server_env(), "PYTHONPATH": str(ROOT)}, start_new_session=True)


def wait_ready(port: int, process: subprocess.Popen, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"a server exited at start (code {process.returncode})")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/v1/models")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("a server did not answer in time")


def ask(connection: http.client.HTTPConnection, body: bytes) -> float:
    began = time.perf_counter()
    connection.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    answer = json.loads(response.read())
    elapsed = time.perf_counter() - began
    if response.status != 200 or not answer.get("choices"):
        raise SystemExit(f"a request failed: {response.status} {answer}")
    return elapsed


def summary(name: str, seconds: list[float]) -> str:
    ordered = sorted(seconds)
    return (f"{name:<4} median {statistics.median(ordered) * 1000:8.1f} ms   p90 "
            f"{ordered[int(0.9 * (len(ordered) - 1))] * 1000:8.1f} ms   ({len(ordered)} requests)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", default="main", help="the git revision whose gemma_server.py is the old path")
    parser.add_argument("--requests", type=int, default=40, help="requests to each server, per connection mode")
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="swepipe-bench-local-"))
    old_file = work / "gemma_server_old.py"
    old_file.write_text(subprocess.run(["git", "show", f"{args.old}:pipeline/models/gemma_server.py"], cwd=ROOT,
                                       check=True, capture_output=True, text=True).stdout)
    ports = {"old": _free_port(), "new": _free_port()}
    files = {"old": old_file, "new": ROOT / "pipeline" / "models" / "gemma_server.py"}
    processes = {name: start(files[name], ports[name], work / f"{name}.log") for name in ports}
    try:
        for name in ports:
            wait_ready(ports[name], processes[name])
        body = json.dumps({**REQUEST, "max_tokens": args.max_tokens}).encode()
        for mode in ("kept-alive", "new connection each"):
            times: dict[str, list[float]] = {"old": [], "new": []}
            kept = {name: http.client.HTTPConnection("127.0.0.1", port, timeout=120) for name, port in ports.items()}
            for name in ports:
                ask(kept[name], body)  # warm: the prompt cached, the connection open
            for _ in range(args.requests):
                for name, port in ports.items():
                    connection = kept[name] if mode == "kept-alive" else http.client.HTTPConnection(
                        "127.0.0.1", port, timeout=120)
                    times[name].append(ask(connection, body))
                    if mode != "kept-alive":
                        connection.close()
            print(f"{mode}:")
            for name in ports:
                print("  " + summary(name, times[name]))
            print(f"  ratio new / old of the medians: "
                  f"{statistics.median(times['new']) / statistics.median(times['old']):.3f}")
    finally:
        for process in processes.values():
            process.terminate()
            process.wait(timeout=30)
    print(f"logs under {work}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    main()
