"""Canaries: planted tests whose outcome swepipe knows in advance, run beside the required tests by the same runner,
in the same file (or Go package) and process, so that a verdict is vouched for by more than the test process's own
reporting.

Each scoring plants two: one that must pass and one that must fail, with names and values drawn afresh from the
operating system's randomness, so no patch can know them when it is written. They are written into the last
selected test file (pytest, jest, mocha, node --test) or, for go test, a new ``_test.go`` file beside the last
required test, after the patch is applied and the hidden tests restored, inside the tests' container only: the
agents and the patch never see them, and they are gone with the container. A run that reports the one that must
fail as PASSED (every failure turned into a pass: a rewritten report, an assertion made harmless, forged PASSED
lines), the one that must pass as anything else or not at all while the required tests passed (the tests never
ran) is an integrity finding (``canary``). The one that must fail may go unreported (many parsers keep only passes).
They take the shape of the required tests in that file (pytest: functions of a class where those are methods), so
a parser that reads those reads them.

What they guard against, and what not: tampering that treats every test alike, which is what a patch can do
without knowing swepipe's names. A patch written to spare these two tests in particular (the last ones of the file,
their shape) could still forge the rest; the other integrity checks and the runner's own summary
(pipeline.evaluation.summaries) stand beside them.

The official verdict is untouched: it is judged on the required names only, and the canaries' entries are taken
out of the recorded statuses. The one that must fail is placed to run last (the end of the last file; a file of its
own sorting last in its Go package), and none is planted where a runner stops at its first failure or picks tests
by name (pipeline.evaluation.runners), so that no required test runs differently. Where swepipe cannot plant them,
the result says why instead of guessing.
"""

from __future__ import annotations

import random
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pipeline.evaluation.runners import Runner, RunScript, read_run_script
from pipeline.tasks import Task
from pipeline.text import patchtext

CANARY = "canary"  # the integrity finding's kind
PLANTED = "planted"  # the word the entry script prints when the canaries were written
_WORDS = ("value", "order", "entry", "config", "parse", "handle", "empty", "default", "limit", "update", "merge",
          "range", "format", "state", "cache", "error", "retry", "round", "split", "match", "index", "count",
          "window", "batch", "filter", "group", "offset", "prefix", "suffix", "token", "record", "result", "field",
          "source", "target", "option", "schema", "buffer", "stream", "report")
_SUFFIX = "abcdefghijklmnopqrstuvwxyz0123456789"
_PYTHON_FILE = re.compile(r"\.py$")
_JS_FILE = re.compile(r"\.(?:[cm]?js|jsx|[cm]?ts|tsx)$")
_GO_TEST_NAME = re.compile(r"^Test[A-Za-z0-9_]*$")
# Why the entry script could not plant them (the word it prints instead of PLANTED)
_IN_CONTAINER = {
    "target_missing": "the test file to plant them in is not a regular file in the tests' container",
    "definition_missing": "no _test.go file in the repository defines the test to plant them beside",
    "function_names_configured": "the project's pytest configuration sets python_functions, which may not "
                                 "collect them",
    "package_runner_unknown": "package.json's test script names none of jest, mocha or node --test",
    "write_failed": "the test file could not be written",
}


@dataclass(frozen=True)
class Canary:
    name: str  # as written in the test file (the function's name, a test's title): found in a reported name
    must_pass: bool
    values: tuple[int, int, int]  # the test adds the first two and compares the sum with the third


@dataclass
class CanaryPlan:
    """The canaries of one scoring, and where they go; none, with the reason, when they cannot be planted."""

    runner: Runner | None = None
    target: str = ""  # the test file (or, for go test, the test whose file's package takes them)
    canaries: list[Canary] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)  # added to the run script's test list so that it runs them
    reason: str = ""  # why none are planted
    suite: str = ""  # the class (pytest) they are methods of, when the required tests in the file are methods
    summary: bool = False  # the runner prints an end-of-run summary the tests' output must hold (summaries.py)

    @property
    def planned(self) -> bool:
        return bool(self.canaries)


def plan(task: Task, run_script: str, patch: str, rng: random.Random | None = None) -> CanaryPlan:
    """Where and what to plant for scoring ``patch`` on ``task`` with ``run_script`` (its text). ``rng``: the
    randomness names and values are drawn from (the operating system's by default)."""
    script = read_run_script(run_script)
    placed = _placement(task, script, patch, rng or random.SystemRandom())
    placed.summary = script.runner is not None and script.summary
    return placed


def _placement(task: Task, script: RunScript, patch: str, draw: random.Random) -> CanaryPlan:
    if script.runner is None:
        return CanaryPlan(reason=script.unknown)
    runner = script.runner
    if script.name_filter:
        return CanaryPlan(runner, reason=f"run_script.sh picks {runner.value}'s tests by name, so planted tests "
                                         "would not run")
    if script.fail_fast:
        return CanaryPlan(runner, reason=f"run_script.sh stops {runner.value} at the first failure, so a planted "
                                         "test that must fail could keep required tests from running")
    selected = [entry for entry in task.selected_test_files_to_run if entry.strip()]
    if not selected:
        return CanaryPlan(runner, reason="the task selects no test files to run")
    if runner is Runner.GO:
        name = selected[-1].split("/", 1)[0].strip()
        if not _GO_TEST_NAME.match(name):
            return CanaryPlan(runner, reason=f"the last selected test, {name[:80]!r}, is no Go test name")
        canaries = _draw(draw, _class_name)
        return CanaryPlan(runner, name, canaries, arguments=[c.name for c in canaries])
    target = _test_file(selected[-1])
    wanted = _PYTHON_FILE if runner is Runner.PYTEST else _JS_FILE
    if not wanted.search(target) or not _safe_path(target):
        return CanaryPlan(runner, reason=f"the last selected test file, {target[:80]!r}, is no "
                                         f"{'Python' if runner is Runner.PYTEST else 'JavaScript'} test file "
                                         "swepipe can write to")
    if target in {name.strip() for name in (*task.fail_to_pass, *task.pass_to_pass)}:
        return CanaryPlan(runner, reason=f"the task's required tests include the whole file {target[:80]!r}, whose "
                                         "status a planted test that fails would change")
    if runner is Runner.PYTEST:
        canaries = _draw(draw, lambda words, suffix: "test_" + "_".join(words) + "_" + suffix)
        suite = _draw(draw, _class_name)[0].name if _methods(task, target) else ""
        node_ids = any("::" in entry for entry in selected)
        prefix = f"{target}::{suite}::" if suite else f"{target}::"
        return CanaryPlan(runner, target, canaries, suite=suite,
                          arguments=[prefix + c.name for c in canaries] if node_ids else [])
    return CanaryPlan(runner, target, _draw(draw, lambda words, suffix: " ".join(words) + " " + suffix))


def _class_name(words: list[str], suffix: str) -> str:
    """A name as Go tests and pytest classes are named: ``TestWordWordSuffix``."""
    return "Test" + "".join(word.title() for word in words) + suffix.capitalize()


def _draw(rng: random.Random, name: Callable[[list[str], str], str]) -> list[Canary]:
    """One canary that must pass, then one that must fail, named by ``name(words, suffix)``."""
    canaries = []
    for must_pass in (True, False):
        words = rng.sample(_WORDS, 2)
        suffix = "".join(rng.choice(_SUFFIX) for _ in range(8))
        first, second = rng.randint(100, 9999), rng.randint(100, 9999)
        total = first + second + (0 if must_pass else rng.randint(1, 9))
        canaries.append(Canary(name(words, suffix), must_pass, (first, second, total)))
    return canaries


def _methods(task: Task, target: str) -> bool:
    """Whether every required test of pytest file ``target`` (of all, when none is in it) is a method of a class
    (``file::Class::test``): then a parser may read only such names."""
    required = [*task.fail_to_pass, *task.pass_to_pass]
    names = [name for name in required if name.startswith(target + "::")] or required
    return bool(names) and all("::" in name.split("[", 1)[0].partition("::")[2] for name in names)


def _test_file(entry: str) -> str:
    """The file of a selected test: a pytest node id's, a "file | suite | test" name's."""
    return re.split(r"::| \| ", entry, maxsplit=1)[0].strip()


def _safe_path(path: str) -> bool:
    return not path.startswith(("/", "-")) and ".." not in path.split("/") and not any(c in path for c in "\0\n\r")


# -- the entry script's part ----------------------------------------------------------------------------------------

def plant_script(plan: CanaryPlan, patch: str) -> str:
    """Bash for the entry script, run in /app after the hidden tests are restored: writes the canaries and sets
    ``canary_status`` to PLANTED, or to a word of ``_IN_CONTAINER`` saying why not. Empty when none are planned."""
    if not plan.planned:
        return "canary_status=none\n"
    target = shlex.quote(plan.target)
    if plan.runner is Runner.GO:
        return _plant_go(plan, patch)
    write = f"cat >> {target} <<'SWEPIPE_CANARY_EOF' || canary_status=write_failed\n{_source(plan)}SWEPIPE_CANARY_EOF\n"
    checks = f'if [ ! -f {target} ] || [ -L {target} ]; then canary_status=target_missing\n'
    if plan.runner is Runner.PYTEST:
        checks += ("elif grep -qsE '^[[:space:]]*python_functions[[:space:]]*=' pytest.ini setup.cfg tox.ini "
                   "pyproject.toml; then canary_status=function_names_configured\n")
    if plan.runner is Runner.PACKAGE:
        checks += ("elif ! grep -qsE '\"test\"[[:space:]]*:[[:space:]]*\"[^\"]*(jest|mocha|node --test)' "
                   "package.json; then canary_status=package_runner_unknown\n")
    return (f"canary_status={PLANTED}\n{checks}else\n"
            f"  [ -z \"$(tail -c 1 {target})\" ] || echo >> {target}\n{write}fi\n")


def _plant_go(plan: CanaryPlan, patch: str) -> str:
    """The file defining the test, looked for among the tracked files the patch leaves alone (the hidden tests
    restored from the fix commit are tracked; a file the patch adds or edits is no place to trust)."""
    touched = sorted(patchtext.touched_paths(patch))
    excluded = "".join(f" {shlex.quote(':(exclude,literal)' + path)}" for path in touched[:500])
    name = plan.target
    file_name = f"zz_{plan.canaries[0].name[-8:].lower()}_test.go"
    return (f"canary_status={PLANTED}\n"
            f"canary_file=$(git grep -lE '^func {name}\\(' -- '*_test.go'{excluded} 2>/dev/null | head -n 1)\n"
            f'if [ -z "$canary_file" ]; then canary_status=definition_missing\n'
            f"else\n"
            f"  canary_package=$(sed -n 's/^package[[:space:]]\\{{1,\\}}\\([A-Za-z0-9_]\\{{1,\\}}\\).*/\\1/p' "
            f'"$canary_file" | head -n 1)\n'
            f'  {{ printf \'package %s\\n\' "$canary_package"; cat <<\'SWEPIPE_CANARY_EOF\'\n{_source(plan)}'
            f'SWEPIPE_CANARY_EOF\n  }} > "$(dirname "$canary_file")/{file_name}" || canary_status=write_failed\n'
            f"fi\n")


def _source(plan: CanaryPlan) -> str:
    """The canaries' source, as the runner's language writes a test."""
    if plan.runner is Runner.PYTEST:
        indent, self_ = ("    ", "self") if plan.suite else ("", "")
        head = f"\n\nclass {plan.suite}:" if plan.suite else ""
        return head + "".join(f"\n\n{indent}def {c.name}({self_}):\n{indent}    value = {c.values[0]} + {c.values[1]}\n"
                              f"{indent}    assert value == {c.values[2]}\n" for c in plan.canaries)
    if plan.runner is Runner.GO:
        return '\nimport "testing"\n' + "".join(
            f"\nfunc {c.name}(t *testing.T) {{\n\tgot := {c.values[0]} + {c.values[1]}\n"
            f"\tif got != {c.values[2]} {{\n\t\tt.Fatalf(\"got %d\", got)\n\t}}\n}}\n" for c in plan.canaries)
    return _javascript(plan.canaries)


def _javascript(canaries: Iterable[Canary]) -> str:
    """One block for jest, mocha and node --test alike, JavaScript or TypeScript: the file's own ``it`` or
    ``test`` (a global or node:test's, as the file imported it), else node:test's; jest's ``expect`` where it is
    jest's, else node's strict assert (what the tests use). Each line is preceded by ``@ts-ignore``, so a
    type-checked TypeScript file takes it as it is; the block declares nothing outside itself."""
    cases = ", ".join(f"[{_js_string(c.name)}, {c.values[0]}, {c.values[1]}, {c.values[2]}]" for c in canaries)
    lines = [
        ";(() => {",
        "  const define = typeof it === 'function' ? it : typeof test === 'function' ? test : null;",
        "  const check = async (got, want) => {",
        "    if (typeof expect === 'function' && typeof expect.extend === 'function') {",
        "      expect(got).toBe(want);",
        "      return;",
        "    }",
        "    const assert = typeof require === 'function' ? require('assert') : (await import('assert')).default;",
        "    assert.strict.strictEqual(got, want);",
        "  };",
        f"  const add = (register) => {{ for (const [title, a, b, want] of [{cases}]) "
        "register(title, async () => { await check(a + b, want); }); };",
        "  if (define) add(define); else import('node:test').then((runner) => add(runner.test));",
        "})();",
    ]
    return "\n" + "".join(f"// @ts-ignore\n{line}\n" for line in lines)


def _js_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# -- reading them back ------------------------------------------------------------------------------------------------

@dataclass
class CanaryOutcome:
    """What the run reported of each canary: its statuses (every entry whose name holds the canary's)."""

    plan: CanaryPlan
    status: str  # the entry script's word: PLANTED, "none" or why not (_IN_CONTAINER)
    reported: dict[str, list[str]] = field(default_factory=dict)  # canary name -> statuses, in order

    @property
    def planted(self) -> bool:
        return self.plan.planned and self.status == PLANTED

    def unreported_failures(self) -> int:
        """Planted canaries that must fail and were not reported: failures a runner's summary counts that
        output.json cannot."""
        if not self.planted:
            return 0
        return sum(1 for c in self.plan.canaries if not c.must_pass and c.name not in self.reported)

    def reason(self) -> str:
        """Why none ran, in words ("" when they were planted)."""
        if self.planted:
            return ""
        return self.plan.reason or _IN_CONTAINER.get(self.status, f"the entry script said {self.status[:40]!r}")


def read_outcome(plan: CanaryPlan, status: str | None, entries: list[tuple[str, str]]) -> CanaryOutcome:
    """The canaries' statuses among output.json's ``entries``, and those entries taken out of them (in place)."""
    outcome = CanaryOutcome(plan, status or "none")
    if not plan.planned:
        return outcome
    kept = []
    for name, reported in entries:
        canary = next((c for c in plan.canaries if c.name in name), None)
        if canary is None:
            kept.append((name, reported))
        else:
            outcome.reported.setdefault(canary.name, []).append(reported)
    entries[:] = kept
    return outcome


def findings(outcome: CanaryOutcome) -> list[str]:
    """What the canaries' statuses say of the run (a verdict the official protocol resolved): one detail a canary
    that came out other than it must."""
    if not outcome.planted:
        return []
    details = []
    for canary in outcome.plan.canaries:
        statuses = outcome.reported.get(canary.name)
        must = "must pass" if canary.must_pass else "must fail"
        place = "beside" if outcome.plan.runner is Runner.GO else "in"
        where = f"the planted test that {must}, {canary.name} ({place} {outcome.plan.target})"
        if not statuses:
            if canary.must_pass:  # a failure goes unreported by parsers that keep only passes: no sign of anything
                details.append(f"{where}, was not reported, though the required tests beside it passed")
        elif canary.must_pass and any(status != "PASSED" for status in statuses):
            details.append(f"{where}, was reported {', '.join(sorted(set(statuses)))}")
        elif not canary.must_pass and "PASSED" in statuses:
            details.append(f"{where}, was reported PASSED")
    return details
