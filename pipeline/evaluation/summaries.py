"""What test runners' own summaries say failed, read from a test run's logs as the runners printed them, whatever the
task's parser makes of those logs: pytest's last line ("==== 1 failed, 2 passed in 0.12s ===="), jest's
"Tests: 1 failed, 5 passed, 6 total", TAP's "# fail 1" (node --test), mocha's "1 failing", and go test's
"--- FAIL: TestName (0.00s)" lines, which name the test; and whether each runner's end-of-run summary is there at
all (``ended``): pytest's closing line, go test's "ok"/"FAIL" line for a package (or its -json "pass"/"fail" event
for one), jest's "Tests:" line (or --json's "numTotalTests"), mocha's "N passing" (or its JSON reporter's "stats"),
node --test's "# tests N" (or its spec reporter's "ℹ tests N"). A pytest session that printed its start banner and
no closing line ended before its tests were done (``started``).

A log is untrusted text: it is read in pieces of at most ``PIECE`` bytes, bytes that are not UTF-8 are replaced,
and a count of more than nine digits is no count, so any log is read without raising (but OSError).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PIECE = 65_536  # bytes of a line read at once: a longer line is read as several pieces
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_COUNT = r"\d{1,9}"
_PYTEST = re.compile(rf"^=* ?((?:{_COUNT} [a-z]+)(?:, {_COUNT} [a-z]+)*) in \d+(?:\.\d+)? ?s(?:econds)?"
                     r"(?: \([^)]*\))? ?=*$")
_JEST = re.compile(r"^Tests:\s+(.*\btotal)$")
_TAP = re.compile(rf"^# fail\s+({_COUNT})$")
_MOCHA = re.compile(rf"^({_COUNT}) failing$")
_GO = re.compile(r"^--- FAIL: (\S+) \(")
_FAILED = re.compile(rf"\b({_COUNT}) failed\b")
# (runner, a summary line of its): the runners' ends, whatever they counted
_ENDS = (
    ("pytest", re.compile(rf"^=* ?(?:no tests ran|(?:{_COUNT}/)?{_COUNT} tests? collected.*) in \d")),
    ("go test", re.compile(r"^(?:ok|FAIL)\s+\S+\s+(?:\d+(?:\.\d+)?s|\(cached\)|\[[a-z ]+\])")),
    ("go test", re.compile(r'^\{(?!.*"Test":).*"Action":\s*"(?:pass|fail)".*"Package":|'
                           r'^\{(?!.*"Test":).*"Package":.*"Action":\s*"(?:pass|fail)"')),
    ("jest", re.compile(r'"numTotalTests":\s*\d')),
    ("mocha", re.compile(rf"^{_COUNT} passing \(")),
    ("mocha", re.compile(r'^"stats":\s*\{')),
    ("node --test", re.compile(rf"^(?:# |ℹ )tests {_COUNT}$")),
)
_PYTEST_START = re.compile(r"^=+ test session starts =+$")
# Bytes one of the lines read here holds; a line with none of them is skipped unread
_WORDS = (b"fail", b"FAIL", b"passed", b"passing", b"Tests:", b"ok", b"tests", b"stats", b"Action", b"session",
          b"no tests ran", b"error", b"skipped", b"deselected")


@dataclass
class RunnerSummaries:
    """The failures the runners' summaries in a test run's logs count."""

    failed: dict[str, int] = field(default_factory=dict)  # runner -> failed tests its summaries count, over its runs
    failed_names: set[str] = field(default_factory=set)  # tests a runner named as failed (go test's FAIL lines)
    ended: dict[str, int] = field(default_factory=dict)  # runner -> end-of-run summaries it printed
    started: int = 0  # pytest sessions that printed their start banner

    @property
    def counted(self) -> int:
        return sum(self.failed.values())

    def add(self, runner: str, count: int) -> None:
        self.failed[runner] = self.failed.get(runner, 0) + count
        self.end(runner)

    def end(self, runner: str) -> None:
        self.ended[runner] = self.ended.get(runner, 0) + 1


def read_summaries(*logs: Path) -> RunnerSummaries:
    """The runners' summaries in ``logs`` (files that do not exist are skipped)."""
    found = RunnerSummaries()
    for log in logs:
        if log.is_file():
            for line in _summary_lines(log):
                read_line(line, found)
    return found


def read_line(line: str, found: RunnerSummaries) -> None:
    """Add what one line of a log says (colours taken out) to ``found``."""
    line = _ANSI.sub("", line).strip()
    if match := _PYTEST.match(line):
        found.add("pytest", _failed(match.group(1)))
    elif match := _JEST.match(line):
        found.add("jest", _failed(match.group(1)))
    elif match := _TAP.match(line):
        found.add("tap", int(match.group(1)))
    elif match := _MOCHA.match(line):
        found.add("mocha", int(match.group(1)))
    elif match := _GO.match(line):
        found.failed_names.add(match.group(1))
    elif _PYTEST_START.match(line):
        found.started += 1
    else:
        for runner, end in _ENDS:
            if end.search(line):
                found.end(runner)
                break


def _failed(counts: str) -> int:
    match = _FAILED.search(counts)
    return int(match.group(1)) if match else 0


def _summary_lines(path: Path) -> Iterator[str]:
    """The lines of ``path`` (pieces of long ones) that could be a summary's: those holding one of its words."""
    with open(path, "rb") as log:
        while piece := log.readline(PIECE):
            if any(word in piece for word in _WORDS):  # a carriage return redraws the line: its last part shows
                yield piece.decode("utf-8", errors="replace").rstrip("\r\n").rsplit("\r", 1)[-1]
