"""The scoring reader fed hostile test output (property-based, tests/fuzzing.py): output.json of every shape, runner
summaries with huge numbers and odd bytes, test names with brackets, newlines and surrogates, a marker line cut
anywhere. Whatever a test run or its parser wrote, the reader gives a verdict or a recorded error (OutputShapeError),
never another exception, and the result it makes is a record that can be written."""

import io
import itertools
import json
import random

from fuzzing import fuzz
from hypothesis import assume, given
from hypothesis import strategies as st

from pipeline.evaluation import canaries, integrity
from pipeline.evaluation.capture import split_at_marker
from pipeline.evaluation.protocol import OutputShapeError, parse_entries, read_output
from pipeline.evaluation.runner import ScoringRun, _judge_outputs
from pipeline.evaluation.summaries import RunnerSummaries, read_line, read_summaries
from pipeline.records import EvalResult
from pipeline.tasks import Task

PIECES = ("[", "]", "[/i]", "::", " | ", "\n", "\r", "\t", "\x00", "\x1b[31m", "\ud800", "\udfff", "’", "é", "日本",
          "PASSED", "FAILED", " PASSED", "--- FAIL: ", "tests/t.py::test_x[a/b]", "=", "[gw0]", "\\", '"', "{", "}")
NUMBERS = (0, -1, 2**31, 2**64, 10**400, -(10**300), 1e308, float("inf"), float("-inf"), float("nan"), 1.5)
REQUIRED = ("tests/t.py::test_x[a/b]", "tests/t.py::test_y[\n]", "TestGo/sub case", "test ’quoted’")


def task() -> Task:
    return Task(instance_id="instance_fuzz__scoring-1", repo="fuzz/scoring", base_commit="abc1234",
                problem_statement="p", repo_language="python", fail_to_pass=list(REQUIRED[:2]),
                pass_to_pass=list(REQUIRED[2:]), selected_test_files_to_run=["tests/t.py"], before_repo_set_cmd="",
                dockerhub_tag="x")


PLAN = canaries.plan(task(), "python -m pytest -v", "", random.Random(0))  # its canaries' names are in the output
PLANTED_NAMES = tuple(f"tests/t.py::{canary.name}" for canary in PLAN.canaries)
text = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)), max_size=8).map("".join)
name = st.one_of(st.sampled_from(REQUIRED + PLANTED_NAMES), text)
status = st.one_of(st.sampled_from(("PASSED", "FAILED", "ERROR", "SKIPPED", "passed", "PASSED ")), text)
scalar = st.one_of(st.none(), st.booleans(), st.sampled_from(NUMBERS), st.integers(), st.floats(), text)
json_value = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(text, inner, max_size=4)), max_leaves=12)
entry = st.one_of(
    st.fixed_dictionaries({"name": name, "status": st.one_of(status, json_value)}),
    st.fixed_dictionaries({"name": st.one_of(name, json_value)}, optional={"status": json_value}),
    json_value)
output = st.one_of(st.fixed_dictionaries({"tests": st.lists(entry, max_size=8)}, optional={"extra": json_value}),
                   json_value)


def encoded(value) -> bytes:
    """``value`` as a parser might write it: JSON (non-finite numbers as Python writes them), in some encoding."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8", errors="surrogatepass")


raw_output = st.one_of(
    output.map(encoded),
    st.binary(max_size=200),
    st.tuples(output.map(encoded), st.integers(0, 400)).map(lambda pair: pair[0][:pair[1]]),  # cut short
    st.integers(1, 50_000).map(lambda depth: b"[" * depth + b"]" * depth),
    st.sampled_from((b'{"tests": [{"name": "x", "status": ' + b"9" * 5000 + b"}]}", b"\xef\xbb\xbf{}",
                     "{\"tests\": []}".encode("utf-16"), b'{"tests": [{"name": "\\ud800", "status": "PASSED"}]}')))


@fuzz
@given(raw=raw_output)
def test_output_json_of_any_bytes_is_entries_or_a_shape_error(raw):
    try:
        entries = read_output(raw)
    except OutputShapeError:
        return
    assert all(isinstance(n, str) and isinstance(s, str) for n, s in entries)


@fuzz
@given(value=output)
def test_parse_entries_of_any_json_value_is_entries_or_a_shape_error(value):
    try:
        entries = parse_entries(value)
    except OutputShapeError:
        return
    assert len(entries) == len(value["tests"])


@fuzz
@given(raw=raw_output, log=st.binary(max_size=300), grader=st.booleans(), timed_out=st.booleans(),
       canary_status=st.one_of(st.none(), st.sampled_from((canaries.PLANTED, "none", "target_missing")), text))
def test_any_output_and_logs_make_a_result_that_can_be_written(tmp_path_factory, raw, log, grader, timed_out,
                                                               canary_status):
    """The whole reader (output.json, the runners' summaries, the canaries, the integrity checks, the verdict): a
    record, whose statuses never hold a canary and whose canaries say how each was reported."""
    folder = tmp_path_factory.mktemp("scored")
    (folder / "output.json").write_bytes(raw)
    (folder / "stdout.log").write_bytes(log)
    run = ScoringRun(apply_status="0", canary_status=canary_status, tests_started=True, timed_out=timed_out,
                     output_size=len(raw), summaries=read_summaries(folder / "stdout.log"),
                     grader=[integrity.finding(integrity.GRADER_WRITTEN, "parser.py changed")] if grader else [])
    result = {"instance_id": "i", "category": "tests_failed", "patch_empty": False,
              **_judge_outputs(task(), folder, run, PLAN)}
    EvalResult.of(result).write(folder / "result.json")
    written = EvalResult.read(folder / "result.json")
    assert written.official_resolved is result["official_resolved"]
    assert not (result["resolved"] and (grader or timed_out or "error" in result))
    assert not any(canary.name in reported for canary in PLAN.canaries for reported in result["statuses"])
    assert written.canaries.planted is (canary_status == canaries.PLANTED)
    if result["resolved"] and written.canaries.planted:  # vouched for: the canaries came out as they must
        for test in written.canaries.tests:
            assert test.reported and ("PASSED" not in test.reported if test.must == "fail" else
                                      set(test.reported) == {"PASSED"}), test


summary_line = st.one_of(
    text,
    st.tuples(st.sampled_from(NUMBERS[:5]), st.sampled_from(("failed", "passed", "error", "xfailed")),
              st.sampled_from(("in 0.1s", "in 1.5 seconds", "in 1s (0:00:01)", "in s"))).map(
        lambda parts: f"==== {parts[0]} {parts[1]}, 2 passed {parts[2]} ===="),
    st.sampled_from(NUMBERS[:5]).map(lambda n: f"Tests:   {n} failed, 3 passed, 9 total"),
    st.sampled_from(NUMBERS[:5]).map(lambda n: f"# fail {n}"),
    st.sampled_from(NUMBERS[:5]).map(lambda n: f"  {n} failing"),
    name.map(lambda n: f"--- FAIL: {n} (0.00s)"))


@fuzz
@given(lines=st.lists(summary_line, max_size=10), encoding=st.sampled_from(("utf-8", "utf-16", "latin-1")),
       newline=st.sampled_from(("\n", "\r\n", "\r", "")))
def test_runner_summaries_of_any_log_are_counts_never_an_exception(tmp_path_factory, lines, encoding, newline):
    log = tmp_path_factory.mktemp("logs") / "stdout.log"
    log.write_bytes(newline.join(lines).encode(encoding, errors="surrogatepass" if encoding != "latin-1" else
                                               "replace"))
    found = read_summaries(log, log.with_name("absent.log"))
    assert all(isinstance(count, int) and 0 <= count < 10**10 for count in found.failed.values())
    for line in lines:
        read_line(line, RunnerSummaries())
    passed = {n for n in REQUIRED}
    for item in integrity.summary_findings(found, dict.fromkeys(passed, "PASSED"), passed):
        assert item["kind"] == integrity.SUMMARY_CONTRADICTS and isinstance(item["detail"], str)


@fuzz
@given(setup=st.binary(max_size=300), tests=st.binary(max_size=300), cuts=st.lists(st.integers(0, 700), max_size=6))
def test_the_tests_output_after_the_marker_is_kept_byte_for_byte_however_it_is_cut(setup, tests, cuts):
    marker = "swepipe-tests-start-0123"
    assume(b"\n" + marker.encode() not in b"\n" + setup)
    stream = setup + (b"\n" if setup and not setup.endswith(b"\n") else b"") + f"{marker} 0\n".encode() + tests
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    out = io.BytesIO()
    captured = split_at_marker((stream[a:b] for a, b in itertools.pairwise(bounds)), marker, out, 10_000)
    assert captured.found and captured.apply_status == "0" and out.getvalue() == tests
