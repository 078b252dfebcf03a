"""Which test runner a task's run_script.sh runs its selected tests with, read from the script's text: what the
canaries (pipeline.evaluation.canaries) and the runner-summary check (pipeline.evaluation.summaries) need to know
about it.

The official run scripts are laid out alike: a ``run_selected_tests`` function, called with the selected tests, and
a ``run_all_tests`` one. What the selected tests go through is read from ``run_selected_tests`` and the functions it
calls (the whole script when it has no such function). A script is data: any text is read without raising, and a
runner that cannot be told apart is ``None`` with the reason, never a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class Runner(str, Enum):
    PYTEST = "pytest"  # pytest, or ansible-test units (pytest underneath)
    GO = "go test"
    NODE_TEST = "node --test"
    MOCHA = "mocha"
    JEST = "jest"
    PACKAGE = "npm test"  # the package's own test script: jest, mocha or node --test, named only in package.json

    @property
    def javascript(self) -> bool:
        return self in (Runner.NODE_TEST, Runner.MOCHA, Runner.JEST, Runner.PACKAGE)


# (runner, the command that names it); the first of these found in the selected tests' path is the runner
_COMMANDS = (
    (Runner.GO, re.compile(r"\bgo\s+test\b")),
    (Runner.PYTEST, re.compile(r"\b(?:py\.test|pytest)\b|\bansible-test\s+units\b")),
    (Runner.NODE_TEST, re.compile(r"\bnode\b[^\n|;&]*\s--test\b")),
    (Runner.MOCHA, re.compile(r"\bmocha\b")),
    (Runner.JEST, re.compile(r"\bjest\b")),
    (Runner.PACKAGE, re.compile(r"\b(?:npm|yarn|pnpm)\b[^\n;&|]*?\s(?:run\s+)?test\b")),
)
_OTHER_RUNNERS = re.compile(r"\b(?:vitest|karma|ava|tap|ospec|cypress|playwright|unittest|nose2?|tox)\b")
# Options that pick tests by name, so a test swepipe adds to a file would not be run
_NAME_FILTERS = {
    Runner.PYTEST: re.compile(r"(?:^|\s)-k[\s=]*+(?:[\"'](?!not\b)|(?![\"']|not\b))"),  # -k "not x" keeps them
    Runner.JEST: re.compile(r"(?:^|\s)(?:-t\b|--testNamePattern\b)"),
    Runner.MOCHA: re.compile(r"(?:^|\s)(?:-g\b|--grep\b|--fgrep\b|-f\b)"),
    Runner.NODE_TEST: re.compile(r"--test-name-pattern\b|--test-only\b"),
    Runner.GO: re.compile(r"-run[\s=]+(?:\"[^\"$]*\"|'[^']*'|[^\s\"'$]+)(?=\s|$)"),  # not built from the arguments
}
_PACKAGE_RUNNERS = (Runner.JEST, Runner.MOCHA, Runner.NODE_TEST)  # what `npm test` may run


def _any_of(table: dict[Runner, re.Pattern[str]], runners: tuple[Runner, ...]) -> re.Pattern[str]:
    return re.compile("|".join(table[runner].pattern for runner in runners))


_NAME_FILTERS[Runner.PACKAGE] = _any_of(_NAME_FILTERS, _PACKAGE_RUNNERS)
# Options that end a run at the first failure, so a test that must fail could stop the required ones
_FAIL_FAST = {
    Runner.PYTEST: re.compile(r"(?:^|\s)(?:-x\b|--exitfirst\b|--maxfail[= ]+[1-9]\b(?!\d))"),
    Runner.JEST: re.compile(r"--bail\b(?!=false)"),
    Runner.MOCHA: re.compile(r"(?:^|\s)(?:-b\b|--bail\b(?!=false))"),
    Runner.NODE_TEST: re.compile(r"--test-fail-fast\b"),
    Runner.GO: re.compile(r"-failfast\b"),
}
_FAIL_FAST[Runner.PACKAGE] = _any_of(_FAIL_FAST, _PACKAGE_RUNNERS)
# Options that leave out the runner's end-of-run summary
_NO_SUMMARY = {
    Runner.PYTEST: re.compile(r"(?:^|\s)(?:-qq|-q\s+-q|--quiet\s+--quiet)\b|-p\s*no:terminal\b"),
    Runner.MOCHA: re.compile(r"(?:--reporter|-R)[=\s]+[\"']?(?!(?:spec|json|tap|dot|min|list|nyan)\b)"),
    Runner.JEST: re.compile(r"--reporters[=\s]"),
    Runner.NODE_TEST: re.compile(r"--test-reporter[=\s]+[\"']?(?!(?:tap|spec|dot)\b)"),
}
_FUNCTION = re.compile(r"(?m)^\s*(?:function\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*\(\)\s*\{?\s*$")
_ASSIGNMENT = re.compile(r"^\s*(?:local\s+|export\s+|readonly\s+)?([A-Za-z_][A-Za-z0-9_]*)=")
_COMMENT = re.compile(r"(?m)(?:^|(?<=\s))#.*$")  # a comment, at a line's start or after a space


@dataclass
class RunScript:
    """What a run script does with its selected tests."""

    runner: Runner | None  # None: not one swepipe knows (``unknown`` says why)
    unknown: str = ""
    name_filter: bool = False  # it picks tests by name (a -k, -t, --grep, a fixed -run)
    fail_fast: bool = False  # it stops at the first failing test
    summary: bool = True  # the runner prints its end-of-run summary (pytest -qq and some reporters print none)


def read_run_script(text: str) -> RunScript:
    """The runner ``text`` (a run_script.sh) runs its selected tests with."""
    path = _selected_path(_COMMENT.sub("", text))
    for runner, command in _COMMANDS:
        if command.search(path):
            lines = _command_lines(path, command)
            quiet = _NO_SUMMARY.get(runner)
            return RunScript(runner, name_filter=bool(_NAME_FILTERS[runner].search(lines)),
                             fail_fast=bool(_FAIL_FAST[runner].search(lines)),
                             summary=not (quiet and quiet.search(lines)))
    other = _OTHER_RUNNERS.search(path)
    if other:
        return RunScript(None, f"run_script.sh runs {other.group(0)}, a runner swepipe does not plant tests for")
    return RunScript(None, "run_script.sh runs no test runner swepipe knows (pytest, go test, node --test, mocha, "
                           "jest)")


def _command_lines(path: str, command: re.Pattern[str]) -> str:
    """The lines of ``path`` that run ``command``: those that name it, and those that use a variable set to it
    (``GO_TEST=(go test -v)`` ... ``"${GO_TEST[@]}" -run "$pattern"``); a line continued with a backslash is one."""
    lines = path.replace("\\\n", " ").split("\n")
    variables = {match.group(1) for line in lines if command.search(line)
                 for match in [_ASSIGNMENT.match(line)] if match}
    uses = re.compile(r"\$\{?(?:" + "|".join(map(re.escape, variables)) + r")\b") if variables else None
    return "\n".join(line for line in lines if command.search(line) or (uses and uses.search(line)))


def _selected_path(text: str) -> str:
    """The part of a run script the selected tests go through: ``run_selected_tests``, the functions it calls (one
    level down) and what the script does outside its functions (where it sets the variables they use); the whole
    script when it has no such function."""
    outside, bodies = _function_bodies(text)
    selected = bodies.get("run_selected_tests")
    if selected is None:
        return text
    called = [body for name, body in bodies.items()
              if name != "run_selected_tests" and re.search(rf"(?<![\w-]){re.escape(name)}\b", selected)]
    return "\n".join([selected, *called, outside])


def _function_bodies(text: str) -> tuple[str, dict[str, str]]:
    """The script's lines outside its functions, and name -> body of each shell function written ``name() {``
    ... ``}`` (a line of its own)."""
    bodies: dict[str, str] = {}
    outside = []
    lines = text.split("\n")
    at = 0
    while at < len(lines):
        match = _FUNCTION.match(lines[at])
        if not match:
            outside.append(lines[at])
            at += 1
            continue
        end = at + 1
        while end < len(lines) and lines[end].strip() != "}":
            end += 1
        bodies.setdefault(match.group(1), "\n".join(lines[at + 1: end]))
        at = end + 1
    return "\n".join(outside), bodies
