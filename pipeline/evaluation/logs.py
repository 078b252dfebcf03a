"""Scoring logs kept bounded: a test run's stdout.log, stderr.log and entry.log are saved whole up to a limit
(``EvalSettings.log_limit``); past it, their head and their tail, with a note of how much was cut between them.

The verdict never depends on the cut: the parser read the whole logs. The cut falls at a line's
end when there is one near, so that a secret on a line is kept or dropped whole, and the redactor finds it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pipeline.runtime.output import BoundedOutput

LOG_LIMIT = 4_000_000  # bytes kept of one scoring log, by default
_NEAR = 65_536  # how far from the cut a line's end is looked for


def save_capped(chunks: Iterable[bytes], path: Path, limit: int) -> int:
    """Write ``chunks`` to ``path``, keeping at most ``limit`` bytes of them (holding no more than about that
    many in memory); returns how many bytes were cut."""
    kept = BoundedOutput(limit)
    for chunk in chunks:
        kept.feed(chunk)
    head, tail = kept.kept()
    cut = kept.cut
    if cut:
        end = head.rfind(b"\n", max(0, len(head) - _NEAR))
        if end >= 0:
            cut, head = cut + len(head) - end - 1, head[: end + 1]
        start = tail.find(b"\n", 0, _NEAR)
        if start >= 0:
            cut, tail = cut + start + 1, tail[start + 1:]
    with open(path, "wb") as out:
        out.write(head)
        if cut:
            out.write(f"\n[swepipe: {cut:,} bytes of this log cut here, to keep it under {limit:,} bytes (swepipe "
                      "eval --eval-log-mb); the tests' parser read it whole]\n\n".encode())
        out.write(tail)
    return cut
