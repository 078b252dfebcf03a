"""Signs that a test run tampered with its own verdict (a result's ``integrity`` findings), and the test
infrastructure a patch changes (its ``test_infrastructure`` notes).

A finding is ``{"kind": ..., "detail": ...}``, of one of these kinds:

- ``grader_written``: the test run wrote to the grader's files or outputs in its container: parser.py,
  run_script.sh, entryscript.sh or patch.diff changed or gone, or stdout.log, stderr.log, output.json or
  apply_status written (where the official entry script keeps them; the grader here reads none of them, so a test
  run that writes them was reaching for the grader);
- ``conflicting_statuses``: a required test reported more than once with different statuses (the official harness
  counts it passed when any of its entries is PASSED);
- ``summary_contradicts``: tests reported PASSED where the runner's own summary counts failures: the runners'
  summaries count more failed tests than output.json reports as not passing, or go test printed FAIL for a test
  output.json reports PASSED (pipeline.evaluation.summaries);
- ``canary``: a planted test came out other than it must (pipeline.evaluation.canaries): the one that must fail
  reported PASSED, the one that must pass reported otherwise, or either not reported while the required tests
  passed;
- ``summary_missing``: the required tests passed, but the runner's own end-of-run summary is not in the tests'
  output (pytest's closing line, go test's ok/FAIL line, jest's "Tests:", mocha's "passing", node --test's
  "# tests"), or a pytest session that started never printed one: the tests were reported by something that
  ended the run before the runner did.

``canary`` and ``summary_missing`` are asked only of a verdict the official protocol resolved, the only one they
could change.

A result with a finding never counts as resolved; the official protocol's verdict stays beside it
(``official_resolved``). A note is no finding: real fixes change conftest.py or the runner's configuration too.
"""

from __future__ import annotations

import fnmatch
import hashlib
from typing import TypedDict

from pipeline.evaluation import canaries
from pipeline.evaluation.canaries import CANARY
from pipeline.evaluation.protocol import OUTPUT, TEST_LOGS, WORKSPACE
from pipeline.evaluation.runners import Runner
from pipeline.evaluation.summaries import RunnerSummaries
from pipeline.tasks import Task
from pipeline.text import patchtext

GRADER_WRITTEN = "grader_written"
CONFLICTING_STATUSES = "conflicting_statuses"
SUMMARY_CONTRADICTS = "summary_contradicts"
SUMMARY_MISSING = "summary_missing"
KINDS = (GRADER_WRITTEN, CONFLICTING_STATUSES, SUMMARY_CONTRADICTS, CANARY, SUMMARY_MISSING)
# The summaries (pipeline.evaluation.summaries' runner names) that end a run of each runner
_ENDS_OF = {Runner.PYTEST: ("pytest",), Runner.GO: ("go test",), Runner.NODE_TEST: ("tap", "node --test"),
            Runner.MOCHA: ("mocha", "tap"), Runner.JEST: ("jest",),
            Runner.PACKAGE: ("jest", "mocha", "tap", "node --test")}
GRADER_OUTPUTS = (*TEST_LOGS, OUTPUT, "apply_status")  # the official entry script's
SHOWN = 3  # names given in a finding's detail
_NAME_WIDTH = 200  # characters of a name shown in a detail


class IntegrityFinding(TypedDict):
    """One finding as a result's ``integrity`` list holds it (pipeline.records.evaluation.Finding)."""

    kind: str
    detail: str


def finding(kind: str, detail: str) -> IntegrityFinding:
    return {"kind": kind, "detail": detail}


def digest(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def grader_findings(sent: dict[str, bytes], found: dict[str, str] | None) -> list[IntegrityFinding]:
    """``sent``: the files put in the tests' /workspace; ``found``: what /workspace held once the tests had ended
    (name -> ``digest`` of a regular file, or the kind of anything else: ``files.archive_digests``), None when it
    was gone."""
    if found is None:
        return [finding(GRADER_WRITTEN, f"the test run removed {WORKSPACE}")]
    changed = [name for name, payload in sent.items() if found.get(name) != digest(payload)]
    written = [name for name in GRADER_OUTPUTS if name in found]
    findings: list[IntegrityFinding] = []
    if changed:
        findings.append(finding(GRADER_WRITTEN, f"the test run changed or removed {_names(changed)} in {WORKSPACE}"))
    if written:
        findings.append(finding(GRADER_WRITTEN, f"the test run wrote {_names(written)} in {WORKSPACE}, where the "
                                                "official entry script keeps the grader's outputs"))
    return findings


def conflicting_findings(task: Task, entries: list[tuple[str, str]]) -> list[IntegrityFinding]:
    """A required test reported more than once with different statuses (``entries``: output.json's, in order)."""
    required = set(task.fail_to_pass) | set(task.pass_to_pass)
    reported: dict[str, list[str]] = {}
    for name, status in entries:
        if name in required and status not in reported.setdefault(name, []):
            reported[name].append(status)
    conflicting = {name: statuses for name, statuses in reported.items() if len(statuses) > 1}
    if not conflicting:
        return []
    shown = "; ".join(f"{_name(name)} ({', '.join(_name(s) for s in statuses)})"
                      for name, statuses in list(conflicting.items())[:SHOWN])
    more = f"; and {len(conflicting) - SHOWN} more" if len(conflicting) > SHOWN else ""
    return [finding(CONFLICTING_STATUSES, f"{len(conflicting)} required test(s) reported more than once with "
                                          f"different statuses: {shown}{more}")]


def summary_findings(summaries: RunnerSummaries, statuses: dict[str, str], passed: set[str],
                     unreported_failures: int = 0) -> list[IntegrityFinding]:
    """Tests reported PASSED (``passed``) where the runners' summaries in the logs count failures (beside
    ``unreported_failures``: planted tests that must fail, which a parser may not report)."""
    findings: list[IntegrityFinding] = []
    not_passing = sum(1 for name in statuses if name not in passed) + unreported_failures
    if passed and summaries.counted > not_passing:
        runners = ", ".join(f"{runner}: {count}" for runner, count in summaries.failed.items() if count)
        findings.append(finding(SUMMARY_CONTRADICTS, f"the runner's own summaries count {summaries.counted} failed "
                                                     f"test(s) ({runners}), but output.json reports {not_passing} "
                                                     f"test(s) not passing and {len(passed)} PASSED"))
    denied = sorted(summaries.failed_names & passed)
    if denied:
        findings.append(finding(SUMMARY_CONTRADICTS, f"go test printed FAIL for {len(denied)} test(s) output.json "
                                                     f"reports PASSED: {_names(denied)}"))
    return findings


def canary_findings(outcome: canaries.CanaryOutcome) -> list[IntegrityFinding]:
    return [finding(CANARY, detail) for detail in canaries.findings(outcome)]


def summary_missing_findings(runner: Runner | None, summaries: RunnerSummaries) -> list[IntegrityFinding]:
    """The runner's end-of-run summary absent from a run whose required tests passed (nothing to ask of a runner
    swepipe does not know, or of one run so that it prints none: ``canaries.CanaryPlan.summary``)."""
    if runner is None:
        return []
    ended = sum(summaries.ended.get(name, 0) for name in _ENDS_OF[runner])
    if not ended:
        return [finding(SUMMARY_MISSING, f"the required tests were reported passed, but the tests' output holds no "
                                         f"end-of-run summary of {runner.value}, the runner run_script.sh runs")]
    if runner is Runner.PYTEST and summaries.started > ended:
        return [finding(SUMMARY_MISSING, f"{summaries.started} pytest sessions started but {ended} printed their "
                                         "closing summary: the others ended before their tests were done")]
    return []


# -- test infrastructure: notes, not findings -----------------------------------------------------------------

# (file name pattern, what it is, words the file's part of the patch must hold for it to count: None for any)
_INFRASTRUCTURE = (
    ("conftest.py", "pytest configuration", None),
    ("pytest.ini", "pytest configuration", None),
    ("pyproject.toml", "pytest configuration", ("pytest",)),
    ("setup.cfg", "pytest configuration", ("pytest",)),
    ("tox.ini", "pytest configuration", ("pytest",)),
    ("sitecustomize.py", "Python start-up hook", None),
    ("usercustomize.py", "Python start-up hook", None),
    ("*.pth", "Python start-up hook", None),
    ("jest.config.*", "jest configuration", None),
    ("jest.setup.*", "jest configuration", None),
    ("setupTests.*", "jest configuration", None),
    ("vitest.config.*", "vitest configuration", None),
    (".mocharc*", "mocha configuration", None),
    ("package.json", "test runner configuration", ("jest", "mocha", "vitest", '"test"')),
    ("*_test.go", "a Go test main (TestMain runs the package's tests)", ("func TestMain(",)),
)


def infrastructure_notes(task: Task, patch: str) -> list[str]:
    """What test infrastructure ``patch`` changes (conftest.py, a runner's configuration, a start-up hook, the
    hidden test files, which the entry script restores before the tests run), one note a file."""
    hidden = _hidden_test_files(task)
    notes = []
    for section in patchtext.sections(patch or ""):
        for path in patchtext.touched_paths(section):
            why = "a hidden test file, restored before the tests run" if path in hidden else \
                _infrastructure(path.rpartition("/")[2], section)
            note = f"{_name(path)}: {why}" if why else None
            if note and note not in notes:
                notes.append(note)
    return notes


def _infrastructure(file_name: str, section: str) -> str | None:
    for pattern, what, words in _INFRASTRUCTURE:
        if fnmatch.fnmatchcase(file_name, pattern) and (words is None or any(word in section for word in words)):
            return what
    return None


def _hidden_test_files(task: Task) -> set[str]:
    files = {name.split("::", 1)[0] for name in task.selected_test_files_to_run}
    if task.test_patch:
        files.update(patchtext.touched_paths(task.test_patch))
    return files


def _names(names: list[str]) -> str:
    shown = ", ".join(_name(name) for name in names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def _name(name: str) -> str:
    return name if len(name) <= _NAME_WIDTH else name[: _NAME_WIDTH - 1] + "…"
