"""A Docker registry (the v2 HTTP API a pull uses) on 127.0.0.1, for tests: the real engine pulls from it as from
any registry (Docker trusts 127.0.0.0/8 over plain HTTP by default), and it can answer with a rate limit (429),
require the credentials of `docker login`, and log every request."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG = "application/vnd.docker.container.image.v1+json"
LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class FakeRegistry:
    def __init__(self, credentials: tuple[str, str] | None = None):
        self.manifests: dict[tuple[str, str], bytes] = {}  # (repository, tag) -> manifest
        self.blobs: dict[str, bytes | tuple[Path, int, int]] = {}  # digest -> content, or (file, offset, size)
        self.rate_limited: dict[tuple[str, str], int] = {}  # (repository, tag) -> pulls to refuse (-1: all)
        self.credentials = credentials
        self.requests: list[dict] = []  # every request: method, path, authorization, status, time
        registry = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                registry._answer(self)

            def do_HEAD(self):
                registry._answer(self, body=False)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    # ------------------------------------------------------------ content

    def add_image(self, repository: str, tag: str, config: bytes, layers: list) -> None:
        """An image: its config (JSON bytes: the image id is its digest) and its layers, each a tar (gzip or not)
        as bytes or as (digest, file, offset, size): a part of a file (a layer inside a `docker save` archive)."""
        entries = []
        for layer in layers:
            if isinstance(layer, bytes):
                key, size = digest(layer), len(layer)
                self.blobs[key] = layer
            else:
                key, path, offset, size = layer
                self.blobs[key] = (path, offset, size)
            entries.append({"mediaType": LAYER, "size": size, "digest": key})
        self.blobs[digest(config)] = config
        manifest = {"schemaVersion": 2, "mediaType": MANIFEST,
                    "config": {"mediaType": CONFIG, "size": len(config), "digest": digest(config)},
                    "layers": entries}
        self.manifests[(repository, tag)] = json.dumps(manifest).encode()

    def add_tiny_image(self, repository: str, tag: str, label: str) -> str:
        """A one-layer image (one small file) whose id is new for each ``label``; its image id."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            payload = f"swepipe test image {label}\n".encode()
            info = tarfile.TarInfo("swepipe-test.txt")
            info.size, info.mtime = len(payload), 0
            archive.addfile(info, io.BytesIO(payload))
        layer = buffer.getvalue()
        config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": {"swepipe.test": label}},
                             "rootfs": {"type": "layers", "diff_ids": [digest(layer)]},
                             "history": [{"created_by": "swepipe test"}]}).encode()
        self.add_image(repository, tag, config, [gzip.compress(layer, mtime=0)])
        return digest(config)

    # ------------------------------------------------------------ what was asked

    def manifest_requests(self, repository: str, tag: str, method: str = "GET") -> list[dict]:
        return [r for r in self.requests if r["method"] == method and r["path"] == f"/v2/{repository}/manifests/{tag}"]

    # ------------------------------------------------------------ answers

    def _answer(self, handler: BaseHTTPRequestHandler, body: bool = True) -> None:
        path = handler.path.split("?")[0]
        auth = handler.headers.get("Authorization")
        row = {"method": handler.command, "path": path, "authorization": auth, "time": time.time()}
        self.requests.append(row)
        if self.credentials is not None:
            expected = "Basic " + base64.b64encode(":".join(self.credentials).encode()).decode()
            if auth != expected:
                return self._send(handler, row, 401, _errors("UNAUTHORIZED", "authentication required"), body,
                                  {"WWW-Authenticate": 'Basic realm="swepipe-test"'})
        if path == "/v2/":
            return self._send(handler, row, 200, b"{}", body)
        parts = path[len("/v2/"):].rsplit("/", 2)
        if len(parts) != 3 or not path.startswith("/v2/"):
            return self._send(handler, row, 404, _errors("NAME_UNKNOWN", "no such path"), body)
        repository, kind, reference = parts
        if kind == "manifests":
            key = (repository, reference)
            left = self.rate_limited.get(key, 0)
            if left:  # the engine asks HEAD, then GET: a pull refused is one GET refused
                if handler.command == "GET" and left > 0:
                    self.rate_limited[key] = left - 1
                return self._send(handler, row, 429, _errors(
                    "TOOMANYREQUESTS", "You have reached your pull rate limit. You may increase the limit by "
                    "authenticating and upgrading"), body)
            manifest = self.manifests.get(key) or next(
                (m for (r, _), m in self.manifests.items() if r == repository and digest(m) == reference), None)
            if manifest is None:
                return self._send(handler, row, 404, _errors("MANIFEST_UNKNOWN", "manifest unknown"), body)
            return self._send(handler, row, 200, manifest, body, {"Content-Type": MANIFEST,
                                                                  "Docker-Content-Digest": digest(manifest)})
        if kind == "blobs" and reference in self.blobs:
            blob = self.blobs[reference]
            return self._send(handler, row, 200, blob, body, {"Content-Type": "application/octet-stream",
                                                              "Docker-Content-Digest": reference})
        return self._send(handler, row, 404, _errors("BLOB_UNKNOWN", "blob unknown"), body)

    @staticmethod
    def _send(handler, row, status: int, content, body: bool, headers: dict | None = None) -> None:
        row["status"] = status
        size = content[2] if isinstance(content, tuple) else len(content)
        handler.send_response(status)
        handler.send_header("Docker-Distribution-Api-Version", "registry/2.0")
        handler.send_header("Content-Length", str(size))
        for name, value in (headers or {"Content-Type": "application/json"}).items():
            handler.send_header(name, value)
        handler.end_headers()
        if not body:
            return
        try:
            if isinstance(content, tuple):
                path, offset, left = content
                with path.open("rb") as stream:
                    stream.seek(offset)
                    while left and (chunk := stream.read(min(left, 1 << 20))):
                        handler.wfile.write(chunk)
                        left -= len(chunk)
            else:
                handler.wfile.write(content)
        except (BrokenPipeError, ConnectionResetError):
            pass


def _errors(code: str, message: str) -> bytes:
    return json.dumps({"errors": [{"code": code, "message": message}]}).encode()


def from_docker_save(archive: Path) -> dict[str, tuple[dict, list]]:
    """The images of a `docker save` archive: name -> (config, layers as (digest, archive, offset, size)), served
    from the archive as it is (a saved layer is the image's diff as it was built, so its digest is its diff id)."""
    found = {}
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}

        def data(name: str) -> tarfile.TarInfo:
            member = members[name]
            while member.issym():  # a layer saved once, linked from the other images' folders
                name = _normal(str(Path(name).parent / member.linkname))
                member = members[name]
            return member

        for entry in json.loads(tar.extractfile("manifest.json").read()):
            config = json.loads(tar.extractfile(entry["Config"]).read())
            layers = [(diff_id, archive, data(layer).offset_data, data(layer).size)
                      for diff_id, layer in zip(config["rootfs"]["diff_ids"], entry["Layers"], strict=True)]
            for tag in entry.get("RepoTags") or []:
                found[tag] = (config, layers)
    return found


def _normal(name: str) -> str:
    parts: list[str] = []
    for part in Path(name).parts:
        if part == "..":
            parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts)
