"""The parser run on this machine's Python instead of in a container of the task's image, when it is a plain text
program: the same output.json from the same logs, without a container's creation, start and removal, which cost
as much as the bundled tasks' tests themselves.

Every official parser (scaleapi/SWE-bench_Pro-os's run_scripts) is such a program: it imports only the standard
library's text modules (json, re, dataclasses, enum, pathlib, typing), reads the two logs named on its command line
and writes output.json. One that imports anything else, names an absolute path, or reaches for the interpreter's
insides (eval, exec, __import__, getattr, dunder attributes) might depend on the image or do more than read text, so
it runs in the image as the official harness runs it (pipeline.evaluation.parsing); so does one that fails here
(its exit status not 0, or no output.json), in case the image's Python or files were what it needed.

Here it runs as `python -I -S -X utf8 parser.py STDOUT STDERR OUTPUT`: no site-packages, no environment but a
PATH and a UTF-8 locale, standard input closed, in a folder of its own, with the scoring's time left, its memory
bounded (the scoring container's limit) and output.json bounded on disk.
"""

from __future__ import annotations

import ast
import hashlib
import os
import resource
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pipeline.evaluation.protocol import OUTPUT, PARSER, TEST_LOGS
from pipeline.runtime.output import BoundedOutput

# The modules a parser may import to run here: the standard library's text processing, nothing that reaches files,
# processes or the network beyond what `open` and pathlib do with the paths it is given.
TEXT_MODULES = frozenset({
    "__future__", "collections", "collections.abc", "csv", "dataclasses", "datetime", "enum", "functools", "html",
    "itertools", "json", "math", "operator", "pathlib", "re", "string", "sys", "textwrap", "typing", "unicodedata",
    "xml.etree.ElementTree"})
_REACHING = frozenset({"eval", "exec", "compile", "__import__", "globals", "locals", "vars", "getattr", "setattr",
                       "delattr", "breakpoint", "input", "memoryview", "open_code"})
_READING = threading.Lock()
_READ: dict[str, str | None] = {}  # a parser's digest -> unfit's answer
_OUTPUT_BOUND = 2  # output.json may take this many times OUTPUT_LIMIT on disk before the parser is stopped


@dataclass
class Parsed:
    """What the parser did here."""

    exit_code: int | None  # None: it ran out of time
    timed_out: bool
    printed: BoundedOutput
    output_size: int | None  # bytes of output.json; None: it wrote none


def unfit(source: bytes) -> str | None:
    """Why the parser ``source`` must run in the task's image (None: it may run here); read once per parser."""
    digest = hashlib.sha256(source).hexdigest()
    with _READING:  # CPython 3.11's ast is not safe to build from several threads at once
        if digest not in _READ:
            _READ[digest] = _unfit(source)
        return _READ[digest]


def _unfit(source: bytes) -> str | None:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        return f"this machine's Python cannot read it ({type(error).__name__})"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""] if node.level == 0 else ["a relative import"]
        else:
            modules = []
        for module in modules:
            if module not in TEXT_MODULES:
                return f"it imports {module[:60]}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _REACHING:
            return f"it calls {node.func.id}"
        if isinstance(node, ast.Attribute) and node.attr.startswith("__") and node.attr.endswith("__"):
            return f"it reaches for {node.attr}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("/"):
            return "it names an absolute path"
    return None


def parse_here(parser: bytes, spool: Path, out_dir: Path, time_left: float, log_limit: int, output_limit: int,
               memory: int | None) -> Parsed:
    """Run ``parser`` on ``spool``/stdout.log and stderr.log; output.json saved in ``out_dir`` when it is no
    larger than ``output_limit``."""
    printed = BoundedOutput(log_limit)
    spool = spool.absolute()  # the parser runs in a folder of its own: a run directory given as runs/x is not there
    with tempfile.TemporaryDirectory(prefix=".parser-", dir=spool) as folder:
        work = Path(folder)
        (work / PARSER).write_bytes(parser)
        output = work / OUTPUT
        command = [sys.executable, "-I", "-S", "-X", "utf8", PARSER, *(str(spool / name) for name in TEST_LOGS),
                   str(output)]
        process = subprocess.Popen(command, cwd=work, env={"PATH": os.defpath, "LANG": "C.UTF-8"},
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   preexec_fn=_bounded(memory, output_limit * _OUTPUT_BOUND))
        assert process.stdout is not None  # piped
        reader = threading.Thread(target=_read_into, args=(process.stdout, printed), daemon=True)
        reader.start()
        try:
            exit_code: int | None = process.wait(timeout=time_left)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            exit_code = None
        reader.join()
        size = output.stat().st_size if output.is_file() and not output.is_symlink() else None
        if size is not None and size <= output_limit:
            output.replace(out_dir / OUTPUT)
    return Parsed(exit_code, exit_code is None, printed, size)


def _read_into(stream: IO[bytes], printed: BoundedOutput) -> None:
    for chunk in iter(lambda: stream.read(1 << 16), b""):
        printed.feed(chunk)


def _bounded(memory: int | None, file_size: int) -> Callable[[], None]:
    """The parser process's limits, set in the child before it runs: its address space, the size of any file it
    writes."""

    def limit() -> None:
        if memory:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))

    return limit
