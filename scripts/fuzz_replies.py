"""Run every property-based test of hostile input (the ``fuzz`` marker: replies through the parsers, the editor,
the principal and the agent loop; test output through the scoring reader; text through every renderer) with many
examples, random ones, and print how many ran and what they found.

    .venv/bin/python scripts/fuzz_replies.py --examples 5000

The default test run runs the same properties with a few derandomized examples each (tests/fuzzing.py). A failure
prints Hypothesis's smallest failing example; the exit status is 1 when any property broke.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# "tests/test_x.py::test_y:" then, per phase, "- 5000 passing, 0 failing, and 81 invalid test cases" (older
# Hypothesis: "97 passing examples, 0 failing examples, 3 invalid examples").
_TEST = re.compile(r"^(tests/\S+::\S+?):\s*$")
_COUNTS = re.compile(r"(\d+) passing(?: examples?)?, (\d+) failing(?: examples?)?, (?:and )?(\d+) invalid")
_DONE = re.compile(r"^(tests/\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED)")  # pytest -v, one line a property


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1000, help="examples per property (default 1000)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments, e.g. -k editor")
    options = parser.parse_args()
    if options.examples < 1:
        parser.error("--examples must be at least 1")
    command = [sys.executable, "-m", "pytest", "-m", "fuzz", "-n", "0", "-p", "no:cacheprovider", "-v",
               "--hypothesis-show-statistics", "--timeout", "0", *options.pytest_args]
    started = time.monotonic()
    output = []
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace", env={**os.environ, "SWEPIPE_FUZZ_EXAMPLES": str(options.examples)}) as done:
        for line in done.stdout:  # each property as it ends, so a long run shows where it is
            output.append(line)
            finished = _DONE.match(line)
            if finished:
                print(f"{time.monotonic() - started:6.0f} s  {finished.group(2):<7} {finished.group(1)}", flush=True)
    stdout = "".join(output)
    seconds = time.monotonic() - started
    counts = tally(stdout)
    for name, (passing, failing, invalid) in sorted(counts.items()):
        print(f"{passing:>7} passing {failing:>3} failing {invalid:>6} invalid  {name}")
    passing = sum(c[0] for c in counts.values())
    failing = sum(c[1] for c in counts.values())
    print(f"{len(counts)} properties, {passing} examples passed, {failing} failed, in {seconds:.0f} s "
          f"(--examples {options.examples}); pytest exit status {done.returncode}")
    if done.returncode != 0:  # every failure whole, with its smallest failing example
        failures = stdout.find("= FAILURES =")
        print(stdout[failures if failures >= 0 else -20000:])
    elif not counts:
        print("no property ran: is hypothesis installed, and are the tests marked fuzz?", stdout[-3000:])
        return 1
    return 0 if done.returncode == 0 else 1


def tally(output: str) -> dict[str, tuple[int, int, int]]:
    """Per property, the examples Hypothesis reports in its statistics, summed over its phases."""
    counts: dict[str, tuple[int, int, int]] = {}
    current = None
    for line in output.splitlines():
        test = _TEST.match(line.strip())
        if test:
            current = test.group(1)
            counts.setdefault(current, (0, 0, 0))
            continue
        found = _COUNTS.search(line)
        if found and current is not None:
            counts[current] = tuple(a + int(b) for a, b in zip(counts[current], found.groups(), strict=True))
    return counts


if __name__ == "__main__":
    sys.exit(main())
