"""A stand-in for the local model server that lists its model and dies on the first completion, as a build
with CPU instructions the machine does not grant does (SIGILL): ``python dying_model_server.py PORT``."""

import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from pipeline.models.local_server import LOCAL_ALIAS


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        body = json.dumps({"data": [{"id": LOCAL_ALIAS}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # noqa: N802
        print("ggml_compute_forward: invalid opcode in libggml-cpu.so", flush=True)
        os.kill(os.getpid(), signal.SIGILL)


if __name__ == "__main__":
    signal.signal(signal.SIGILL, signal.SIG_DFL)
    HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
