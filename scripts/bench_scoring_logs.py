"""How long saving a scoring log takes, and in how much memory, as the log grows: a test log read from a
container's archive stream, capped (head and tail, EvalSettings.log_limit) and redacted, as scoring does it.

Prints one row per log size: seconds, peak memory (tracemalloc), and both as a ratio to the smallest log's. With
the cap, the ratios stay near 1 however big the log is (before it, a 200 MiB log took 158 s and 400 MiB).

    python scripts/bench_scoring_logs.py [--sizes 10,50,200] [--limit-mb 4]
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.evaluation.files import extract_archive  # noqa: E402
from pipeline.rundir.storage import redact_file  # noqa: E402

MiB = 1 << 20
LINE = b"tests/test_calc.py::test_case PASSED [ 42%] https://proxy.golang.org/github.com/x/y/@v/v1.2.3.mod\n"


def archive(size: int):
    """A `get_archive` stream of workspace/stdout.log, ``size`` bytes of test log, made as it is read."""
    block = LINE * (MiB // len(LINE))
    blocks = -(-size // len(block))
    info = tarfile.TarInfo("workspace/stdout.log")
    info.size = blocks * len(block)
    yield info.tobuf(format=tarfile.GNU_FORMAT)
    for _ in range(blocks):
        yield block
    yield b"\0" * ((512 - info.size % 512) % 512) + b"\0" * 1024


def measure(size_mib: int, limit: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as folder:
        tracemalloc.start()
        started = time.monotonic()
        extract_archive(archive(size_mib * MiB), {"stdout.log"}, Path(folder), {"stdout.log": limit})
        redact_file(Path(folder) / "stdout.log")
        seconds = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1] / MiB
        tracemalloc.stop()
    return seconds, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,50,200", help="log sizes in MiB")
    parser.add_argument("--limit-mb", type=float, default=4.0, help="the cap (swepipe eval --eval-log-mb)")
    args = parser.parse_args()
    rows = [(size, *measure(size, int(args.limit_mb * 1e6))) for size in map(int, args.sizes.split(","))]
    base_seconds, base_peak = rows[0][1], rows[0][2]
    print(f"{'log MiB':>8} {'seconds':>8} {'peak MiB':>9} {'time ratio':>11} {'memory ratio':>13}")
    for size, seconds, peak in rows:
        print(f"{size:>8} {seconds:>8.2f} {peak:>9.1f} {seconds / base_seconds:>11.2f} {peak / base_peak:>13.2f}")


if __name__ == "__main__":
    main()
