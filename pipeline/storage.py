"""Writing results so that a crash never leaves half a file and no secret reaches the disk."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from pipeline.secrets import redact, redact_data


def write_json_atomic(path: Path, data) -> None:
    write_text_atomic(path, json.dumps(redact_data(data), indent=2) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (secrets redacted) in one step: readers see the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(redact(text))
    os.replace(tmp, path)


def append_jsonl(path: Path, record: dict) -> None:
    """One line, written with a single call so concurrent appenders never interleave."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = redact(json.dumps(record)) + "\n"
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line)
