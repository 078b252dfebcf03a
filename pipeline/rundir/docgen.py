"""The command line of a generated document (docs/run-directory.md, docs/run-layout.md): write it, or with
``--check`` say whether the file on disk is still what the code gives."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from pipeline.rundir.storage import write_text_atomic


def doc_main(argv: list[str] | None, *, module: str, doc: Path, render: Callable[[], str], source: str) -> int:
    """``python -m module [OUTPUT] [--check]``: 0 when written or current, 1 when ``--check`` finds it stale."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=f"write {doc.name} from {source}")
    parser.add_argument("output", nargs="?", type=Path, default=doc, help=f"where to write it (default {doc})")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the file is not current")
    options = parser.parse_args(argv)
    text = render()
    if options.check:
        current = options.output.read_text(encoding="utf-8") if options.output.is_file() else None
        if current != text:
            print(f"{options.output} is not what {source} gives: run python -m {module}", file=sys.stderr)
            return 1
        return 0
    write_text_atomic(options.output, text)
    print(f"wrote {options.output}")
    return 0
