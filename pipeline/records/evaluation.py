"""The hidden tests' verdict on a patch (pipeline.evaluation.runner.evaluate, with pipeline.evaluation.batch's reruns
and pipeline.evaluation.candidates' candidate fields)."""

from __future__ import annotations

from collections import Counter
from enum import StrEnum
from pathlib import Path
from typing import Any

from pipeline.records.base import Flag, Int, Number, Part, Record, Text, Word, absent
from pipeline.rundir.layout import TASK, ScoringFiles


class EvalCategory(StrEnum):
    """How a scoring came out, in the order reports list them."""

    RESOLVED = "resolved"
    FLAGGED = "flagged"  # resolved by the official protocol, but with an integrity finding (evaluation.integrity)
    TESTS_FAILED = "tests_failed"
    PATCH_FAILED = "patch_failed"
    TIMEOUT = "timeout"
    INFRA_ERROR = "infra_error"  # the environment failed, so the patch was never scored


class TestOutcome(Part):
    """How the required tests of one list came out (pipeline.evaluation.protocol.TestOutcome)."""

    __test__ = False  # not a test class, whatever its name

    passed: list[Text] = absent("reported PASSED")
    failed: list[Text] = absent("reported with another status")
    missing: list[Text] = absent("not reported at all")


class Attempt(Part):
    """One run of the tests with --attempts (the first is the verdict)."""

    attempt: Int = absent("its number, from 1")
    resolved: Flag = absent("its verdict")
    category: Word[EvalCategory] = absent("its category")
    statuses: dict[str, Text] = absent("test name -> status")


class Finding(Part):
    """A sign that a test run tampered with its verdict (pipeline.evaluation.integrity)."""

    kind: Text = absent("grader_written (the test run wrote to the grader's files or outputs), "
                        "conflicting_statuses (a required test reported more than once with "
                        "different statuses), summary_contradicts (tests reported PASSED where "
                        "the runner's own summary counts failures), canary (a planted test came out "
                        "other than it must) or summary_missing (the required tests passed, but the "
                        "runner's own end-of-run summary is absent)")
    detail: Text = absent("what was found, in words")


class PlantedTest(Part):
    """One canary of a scoring (pipeline.evaluation.canaries)."""

    name: Text = absent("its name as written in the test file (drawn afresh for each scoring)")
    must: Text = absent("\"pass\" or \"fail\"")
    reported: list[Text] = absent("the statuses output.json gave it (none: not reported)")


class Canaries(Part):
    """The tests planted beside the required ones, to vouch for the verdict (pipeline.evaluation.canaries)."""

    planted: Flag = absent("they were planted and ran with the required tests")
    runner: Text | None = absent("the runner run_script.sh runs the selected tests with (null: not one "
                                 "swepipe knows)")
    target: Text = absent("the test file they were written into (go test: the test beside which they "
                          "were, in a file of their own)")
    tests: list[PlantedTest] = absent("each, with how it was reported")
    reason: Text = absent("why none was planted")


class EvalResult(Record):
    """The verdict on one patch: the official SWE-Bench Pro protocol's (official_resolved: every FAIL_TO_PASS and
    PASS_TO_PASS test reported PASSED, names compared exactly), which counts (resolved) only when the integrity
    checks found no sign of tampering; with the category that says why not, and each test's outcome. An
    infra_error is no verdict: the scoring could not run (eval/infra_error.json), and a rerun scores again.
    Format 2 added official_resolved, integrity, test_infrastructure and parser_exit_code; a format 1 result's
    verdict is its official one."""

    FORMAT = 2

    FILE = (f"{TASK.eval_files.result}; {TASK.eval_files.infra_error} (a scoring that could not run); "
            f"{ScoringFiles(Path('<output-dir>/<instance_id>')).result} (swepipe eval); "
            f"{ScoringFiles(TASK.candidates / '<key>').result} (swepipe eval --candidates)")

    instance_id: Text = absent("the task")
    resolved: Flag = absent("the verdict that counts: official_resolved, and no integrity finding")
    official_resolved: Flag = absent("the official protocol's verdict, as the official harness "
                                     "gives it (format 1 results: their resolved)")
    category: Word[EvalCategory] = absent("resolved, flagged (resolved by the official protocol, but with an "
                            "integrity finding), tests_failed, patch_failed, timeout or infra_error")
    integrity: list[Finding] = absent("signs that the test run tampered with its verdict; any "
                                      "one keeps the result from counting as resolved (none: "
                                      "not checked, as before format 2)")
    canaries: Canaries = absent("the tests planted beside the required ones and how they were reported, or "
                                "why none was (absent: scored before canaries)")
    test_infrastructure: list[Text] = absent("test infrastructure the patch changes (conftest.py, "
                                             "a runner's configuration, a start-up hook, hidden "
                                             "test files): noted, not held against it")
    patch_sha256: Text = absent("the sha256 of the scored patch's bytes: a rerun keeps this verdict only for "
                                "the same patch")
    patch_empty: Flag = absent("the patch was empty")
    patch_applied: Flag | None = absent("git apply succeeded (null: not known)")
    binary_sections_stripped: Flag = absent("binary sections were taken out of the patch first")
    network: Flag = absent("the tests' container had the network")
    limits: dict[str, Any] = absent("the container's limits (pipeline.runtime.limits)")
    image: Text = absent("the task's image")
    scorer: dict[str, Any] = absent("how it was scored, beside network and limits: swepipe's "
                                    "version, the protocol's (pipeline.evaluation.protocol), the "
                                    "scoring profile (pipeline.evaluation.profiles), where the "
                                    "parser ran (parser: this machine's Python, or the task's "
                                    "image and why), the tests' "
                                    "time limit in seconds, the seed the tests were given "
                                    "(validate's replicas), the image's id (the digest of its "
                                    "config) and its registry digest (repo@sha256:..., null "
                                    "for an image built locally)")
    entry_exit_code: Int | None = absent("the tests' container's exit code (null: timed out)")
    parser_exit_code: Int | None = absent("the parser's container's exit code (null: the parser "
                                          "did not run, or timed out)")
    tests_output_dropped: Int = absent("bytes the tests printed past what their output may take "
                                       "on disk (the container's disk limit, as the official "
                                       "entry script's logs could in the container): the parser "
                                       "read the output without them")
    timed_out: Flag = absent("the tests ran out of time")
    FAIL_TO_PASS: TestOutcome | list[Text] = absent("the tests the fix must make pass (a list of "
                                                    "names: no per-test outcome)")
    PASS_TO_PASS: TestOutcome | list[Text] = absent("the tests that must keep passing")
    near_misses: dict[str, Text] = absent("required name -> a reported name equal to it up to "
                                          "whitespace (recorded, not counted)")
    statuses: dict[str, Text] = absent("every reported test -> its status")
    error: Text = absent("what went wrong (an infra_error's cause, an unreadable output.json)")
    duration: Number = absent("seconds the scoring took")
    attempts: list[Attempt] = absent("with --attempts N: each run of an unresolved patch")
    flaky_tests: list[Text] = absent("tests whose status changed between attempts")
    key: Text = absent("candidates: the candidate's key in pool.json")
    votes: Int | None = absent("candidates: its votes")
    rollouts: list[Int] | None = absent("candidates: its rollouts")
    node: Text | None = absent("with the ray executor: the machine that scored it")

    @classmethod
    def upgrade(cls, data: dict[str, Any], version: int, path: Path | None) -> dict[str, Any]:
        """Before format 2 the verdict was the official one."""
        if version < 2 and "official_resolved" not in data and "resolved" in data:
            data["official_resolved"] = data["resolved"]
        return data

    @property
    def flagged(self) -> bool:
        """Whether an integrity finding is on record."""
        return isinstance(self.integrity, list) and bool(self.integrity)

    @property
    def infrastructure_files(self) -> list[str]:
        """The files of the test infrastructure the scored patch changes (its ``test_infrastructure`` notes)."""
        return infrastructure_files(self.test_infrastructure)


SHOWN_FILES = 5  # files named in a count of results that change test infrastructure; the rest are counted


def infrastructure_files(notes: object) -> list[str]:
    """The files that a result's ``test_infrastructure`` notes ("<file>: <what it is>") name, each once, in order.
    What it is never holds ": ", so a file whose own name does is kept whole."""
    if not isinstance(notes, list):
        return []
    files = (note.rpartition(": ")[0] or note for note in notes if isinstance(note, str) and note)
    return list(dict.fromkeys(files))


def infrastructure_named(changed: list[list[str]]) -> tuple[int, str]:
    """How many results change test infrastructure (``changed``: each result's files) and their files in words:
    a file several results change is counted ("conftest.py ×2"); past ``SHOWN_FILES`` files, how many more."""
    changed = [files for files in changed if files]
    counts: dict[str, int] = {}
    for files in changed:
        for name in files:
            counts[name] = counts.get(name, 0) + 1
    ordered = sorted(counts, key=lambda name: (-counts[name], name))
    shown = ", ".join(name + (f" ×{counts[name]}" if counts[name] > 1 else "") for name in ordered[:SHOWN_FILES])
    more = f" and {len(ordered) - SHOWN_FILES} more" if len(ordered) > SHOWN_FILES else ""
    return len(changed), shown + more


def infrastructure_words(changed: list[list[str]]) -> str:
    """"1 changes test infrastructure: conftest.py" (``infrastructure_named``); "" when no result does."""
    count, files = infrastructure_named(changed)
    if not count:
        return ""
    return f"{count} {'changes' if count == 1 else 'change'} test infrastructure: {files}"


def canary_words(canaries: Canaries | None) -> str | None:
    """How a result's canaries came out, in words: where they were planted and how each was reported, or why none
    was; None for a result scored before canaries."""
    if not isinstance(canaries, Canaries) or canaries.planted is None:
        return None
    if not canaries.planted:
        return f"none planted: {canaries.reason or 'no reason recorded'}"
    tests = [f"{test.name} (must {test.must}): {', '.join(map(str, test.reported or [])) or 'not reported'}"
             for test in canaries.tests or []]
    where = "beside" if canaries.runner == "go test" else "in"  # a Go test's name: they are in a file of their own
    return f"planted {where} {canaries.target}: " + "; ".join(tests)


def canary_coverage(results: list[EvalResult]) -> str:
    """"canaries planted in 13 of 15 scored; none in 2: <reason> (2)" over results' ``canaries``; "" when no result
    has any on record."""
    recorded = [r.canaries for r in results if isinstance(r.canaries, Canaries)]
    if not recorded:
        return ""
    planted = sum(1 for c in recorded if c.planted is True)
    reasons = Counter(str(c.reason or "no reason recorded") for c in recorded if c.planted is not True)
    words = f"canaries planted in {planted} of {len(recorded)} scored"
    if reasons:
        words += f"; none in {sum(reasons.values())}: " + "; ".join(f"{reason} ({count})" for reason, count in
                                                                    reasons.most_common())
    return words
