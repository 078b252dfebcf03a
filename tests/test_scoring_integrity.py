"""The grader out of the tests' reach, without Docker: reading output.json by its shape, the runners' summaries,
the integrity findings and notes, the tests' output split at its marker line, the archives in and out of the
containers, and a scoring that crashes inside `swepipe run` (tests/test_forged_verdicts_docker.py runs the forged
patches in real containers)."""

import io
import json
import tarfile

import pytest

from pipeline.evaluation import integrity
from pipeline.evaluation.capture import SpoolBudget, frames, split_at_marker, start_marker
from pipeline.evaluation.files import archive_digests, tar_stream
from pipeline.evaluation.protocol import OutputShapeError, judge, parse_statuses, passed_names, read_output
from pipeline.evaluation.summaries import RunnerSummaries, read_summaries
from pipeline.records import EvalResult
from pipeline.rundir.layout import RunLayout
from pipeline.tasks import Task

F2P, P2P = "t.py::test_new", "t.py::test_old"


def make_task(**overrides) -> Task:
    row = dict(instance_id="instance_acme__calc-1", repo="acme/calc", base_commit="abc1234", problem_statement="p",
               repo_language="python", fail_to_pass=[F2P], pass_to_pass=[P2P], selected_test_files_to_run=["t.py"],
               dockerhub_tag="calc-1", before_repo_set_cmd="git checkout def456 -- t.py",
               test_patch="diff --git a/t.py b/t.py\n--- a/t.py\n+++ b/t.py\n@@ -1 +1 @@\n-a\n+b\n")
    row.update(overrides)
    return Task.from_row(row)


def output(*entries) -> bytes:
    return json.dumps({"tests": [{"name": name, "status": status} for name, status in entries]}).encode()


# -- output.json, read by its shape -----------------------------------------------------------------------------

@pytest.mark.parametrize("data, why", [
    (b"[]", "holds a list, not an object"),  # what a rewritten parser wrote: AttributeError before
    (b'"tests"', "holds text"),
    (b"{}", "no 'tests' list"),
    (b'{"tests": {"t.py::test_new": "PASSED"}}', "'tests' is an object, not a list"),
    (b'{"tests": ["t.py::test_new PASSED"]}', "test 1 is not an object"),
    (b'{"tests": [{"name": "t.py::test_new"}]}', "test 1 is not an object with a text 'name' and a 'status'"),
    (b'{"tests": [{"name": ["t.py::test_new"], "status": "PASSED"}]}', "test 1"),
    (b"{", "not valid JSON"),
    (b"[" * 100_000, "not valid JSON"),  # RecursionError before
    (b'{"tests": [], "n": 1' + b"0" * 5000 + b"}", "not valid JSON"),  # more digits than Python converts
])
def test_output_of_the_wrong_shape_is_a_shape_error_never_another_exception(data, why):
    with pytest.raises(OutputShapeError, match=why):
        read_output(data)


def test_parser_output_without_tests_list_is_rejected():
    with pytest.raises(ValueError):
        parse_statuses({"results": []})
    with pytest.raises(ValueError):
        parse_statuses([])  # AttributeError before: the whole run ended


def test_a_name_reported_twice_passes_by_any_entry_as_in_the_official_harness():
    entries = read_output(output((F2P, "PASSED"), (F2P, "FAILED"), (P2P, "PASSED"), ("x", 3), ("y", None)))
    assert entries[-2:] == [("x", "3"), ("y", "null")]  # statuses of another type: their JSON text, never PASSED
    statuses, passed = dict(entries), passed_names(entries)
    assert statuses[F2P] == "FAILED" and passed == {F2P, P2P}
    verdict = judge(make_task(), statuses, passed)
    assert verdict.resolved and verdict.fail_to_pass.passed == [F2P]
    assert not judge(make_task(), statuses).resolved  # the last status alone: what swepipe counted before


# -- integrity findings -------------------------------------------------------------------------------------------

def test_a_required_test_reported_with_different_statuses_is_a_finding():
    task = make_task()
    found = integrity.conflicting_findings(task, [(F2P, "FAILED"), ("other", "FAILED"), ("other", "PASSED"),
                                                  (F2P, "PASSED"), (P2P, "PASSED"), (P2P, "PASSED")])
    assert [f["kind"] for f in found] == ["conflicting_statuses"]
    assert f"{F2P} (FAILED, PASSED)" in found[0]["detail"] and "other" not in found[0]["detail"]
    assert integrity.conflicting_findings(task, [(F2P, "PASSED"), (F2P, "PASSED")]) == []


def summaries_of(tmp_path, stdout: str, stderr: str = "") -> RunnerSummaries:
    (tmp_path / "stdout.log").write_text(stdout)
    (tmp_path / "stderr.log").write_text(stderr)
    return read_summaries(tmp_path / "stdout.log", tmp_path / "stderr.log")


def test_runner_summaries_are_read_as_each_runner_prints_them(tmp_path):
    pytest_log = ("t.py::test_new FAILED\n=== FAILURES ===\n"
                  "\x1b[31m========= \x1b[31m\x1b[1m2 failed\x1b[0m, \x1b[32m3 passed\x1b[0m in 0.12s "
                  "=========\x1b[0m\n"
                  "1 failed, 1 passed, 1 xfailed in 1.50 seconds\n==== 4 passed, 1 warning in 0.1s (0:00:01) ====\n"
                  "progress\r=== 1 failed in 2s ===\r\n")
    jest_log = "Tests:       1 failed, 1 skipped, 5 passed, 7 total\n"
    tap_log = "# tests 4\n# pass 1\n# fail 3\n"
    found = summaries_of(tmp_path, pytest_log + tap_log + "  2 failing\n--- FAIL: TestA (0.00s)\n"
                                                          "    --- FAIL: TestA/sub_case (0.01s)\n", jest_log)
    assert found.failed == {"pytest": 4, "tap": 3, "mocha": 2, "jest": 1}
    assert found.failed_names == {"TestA", "TestA/sub_case"}
    assert summaries_of(tmp_path, "I failed 99999999999 times\n1 failed" + "0" * 20 + " in 1s\n").counted == 0


def test_passed_reports_the_runner_summary_denies_are_a_finding(tmp_path):
    summaries = summaries_of(tmp_path, "==== 2 failed, 3 passed in 0.5s ====\n")
    forged = {F2P: "PASSED", P2P: "PASSED", "a": "PASSED", "b": "PASSED", "c": "PASSED"}
    found = integrity.summary_findings(summaries, forged, set(forged))
    assert [f["kind"] for f in found] == ["summary_contradicts"]
    assert "count 2 failed test(s) (pytest: 2)" in found[0]["detail"]
    honest = {**forged, "b": "FAILED", "c": "ERROR"}
    assert integrity.summary_findings(summaries, honest, {F2P, P2P, "a"}) == []
    assert integrity.summary_findings(summaries, {"x": "FAILED"}, set()) == []  # nothing reported PASSED
    go = summaries_of(tmp_path, "--- FAIL: TestA (0.00s)\n--- PASS: TestA (0.00s)\nFAIL\n")
    found = integrity.summary_findings(go, {"TestA": "PASSED"}, {"TestA"})
    assert len(found) == 1 and "go test printed FAIL for 1 test(s) output.json reports PASSED: TestA" in \
        found[0]["detail"]


def test_grader_files_changed_and_outputs_written_by_the_tests_are_findings():
    sent = {"parser.py": b"parse", "run_script.sh": b"run", "entryscript.sh": b"entry", "patch.diff": b"p"}
    untouched = {name: integrity.digest(payload) for name, payload in sent.items()}
    assert integrity.grader_findings(sent, untouched) == []
    found = integrity.grader_findings(sent, {**untouched, "parser.py": integrity.digest(b"print('[]')"),
                                             "output.json": integrity.digest(b"[]")})
    assert [f["detail"] for f in found] == [
        "the test run changed or removed parser.py in /workspace",
        "the test run wrote output.json in /workspace, where the official entry script keeps the grader's outputs"]
    del untouched["run_script.sh"]
    assert "changed or removed run_script.sh" in integrity.grader_findings(sent, untouched)[0]["detail"]
    assert integrity.grader_findings(sent, None) == [{"kind": "grader_written",
                                                      "detail": "the test run removed /workspace"}]


def test_a_patch_changing_test_infrastructure_is_noted():
    def added(path, text="x = 1\n"):
        return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
                f"@@ -0,0 +1 @@\n+{text}")

    patch = (added("conftest.py") + added("src/calc.py") + added("pkg/tests/conftest.py") + added("t.py")
             + added("pyproject.toml", "[tool.black]\n") + added("setup.cfg", "[tool:pytest]\n")
             + added("lib/site-packages/hook.pth") + added("jest.config.js") + added("package.json", '"jest": {}\n')
             + added("cron/zz_test.go", "func TestMain(m *testing.M) {\n") + added("cron/a_test.go", "func TestA(\n")
             + added("src/setupTests.ts"))
    assert integrity.infrastructure_notes(make_task(), patch) == [
        "conftest.py: pytest configuration", "pkg/tests/conftest.py: pytest configuration",
        "t.py: a hidden test file, restored before the tests run", "setup.cfg: pytest configuration",
        "lib/site-packages/hook.pth: Python start-up hook", "jest.config.js: jest configuration",
        "package.json: test runner configuration",
        "cron/zz_test.go: a Go test main (TestMain runs the package's tests)", "src/setupTests.ts: jest configuration"]
    assert integrity.infrastructure_notes(make_task(), "") == []


# -- the tests' output, split at the marker -----------------------------------------------------------------------

def test_the_tests_output_starts_after_the_first_marker_line_however_it_is_cut_into_chunks():
    marker = start_marker("i", "patch")
    assert marker == start_marker("i", "patch") != start_marker("i", "other patch")
    stream = (b"HEAD is now at 123\n" + b"x" * 500 + b" " + marker.encode() + b" 9\n" + f"{marker} 1\n".encode()
              + b"collected 2 items\n" + f"{marker} 0\n".encode() + b"\xff end without newline")
    for size in (1, 7, 64, len(stream)):
        out = io.BytesIO()
        captured = split_at_marker((stream[i:i + size] for i in range(0, len(stream), size)), marker, out, 10_000)
        assert captured.found and captured.apply_status == "1", size
        assert out.getvalue() == b"collected 2 items\n" + f"{marker} 0\n".encode() + b"\xff end without newline"
        assert b"".join(captured.setup.kept()) == b"HEAD is now at 123\n" + b"x" * 500 + b" " + marker.encode() \
            + b" 9\n"
    out = io.BytesIO()
    assert not split_at_marker([b"no marker\n", b"at all"], marker, out, 100).found and out.getvalue() == b""


def test_the_tests_output_kept_on_disk_is_bounded_for_both_streams_together():
    """The official entry script's logs could take only the container's disk; spooled on this machine, the tests'
    output keeps the same bound, both streams together, and what was dropped is counted."""
    marker = start_marker("i", "patch")
    budget = SpoolBudget(1000)
    outs = [io.BytesIO(), io.BytesIO()]
    for out, fill in zip(outs, (b"o", b"e"), strict=True):
        split_at_marker([f"{marker} 0\n".encode(), fill * 700, fill * 700], marker, budget.writer(out), 100)
    assert [len(out.getvalue()) for out in outs] == [1000, 0] and budget.dropped == 1400 - 1000 + 1400
    assert outs[0].getvalue() == b"o" * 1000


def test_docker_frames_are_read_whatever_the_blocks():
    sent = ((1, b"one\n"), (2, b""), (2, b"err"), (1, b"two" * 50))
    stream = b"".join(bytes([kind, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload for kind, payload in sent)
    for size in (1, 5, 9, len(stream)):
        assert list(frames(stream[i:i + size] for i in range(0, len(stream), size))) == list(sent)
    with pytest.raises(OSError, match="inside a frame"):
        list(frames([stream[:-1]]))


def test_archives_sent_and_read_back(tmp_path):
    big = tmp_path / "stdout.log"
    big.write_bytes(b"\x00log\xff" * 300)
    sent = b"".join(tar_stream({"parser.py": b"print(1)\n", "parse.sh": b"python parser.py", "stdout.log": big},
                               "/workspace", block=7))
    with tarfile.open(fileobj=io.BytesIO(sent)) as archive:
        assert archive.getnames() == ["workspace", "workspace/parser.py", "workspace/parse.sh", "workspace/stdout.log"]
        assert archive.extractfile("workspace/stdout.log").read() == big.read_bytes()
        assert archive.getmember("workspace/parse.sh").mode == 0o755
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, payload in (("workspace/parser.py", b"p"), ("workspace/sub/parser.py", b"nested"),
                              ("workspace/output.json", b"[]")):
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))
        link = tarfile.TarInfo("workspace/run_script.sh")
        link.type, link.linkname = tarfile.SYMTYPE, "/tmp/evil.sh"
        archive.addfile(link)
    data = buffer.getvalue()
    found = archive_digests((data[i:i + 100] for i in range(0, len(data), 100)),
                            {"parser.py", "output.json", "run_script.sh", "stdout.log"})
    assert found == {"parser.py": integrity.digest(b"p"), "output.json": integrity.digest(b"[]"),
                     "run_script.sh": "a link"}


# -- the record, and a scoring that crashes inside a run ----------------------------------------------------------

def test_a_format_1_result_reads_with_its_verdict_as_the_official_one(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"format": 1, "instance_id": "i", "resolved": True, "category": "resolved"}))
    record = EvalResult.read(path)
    assert record.official_resolved is True and record.integrity is None and not record.flagged
    flagged = EvalResult.of({"instance_id": "i", "resolved": False, "official_resolved": True, "category": "flagged",
                             "integrity": [{"kind": "grader_written", "detail": "parser.py changed"}]})
    flagged.write(path)
    assert json.loads(path.read_text())["format"] == 2 and EvalResult.read(path).flagged


def test_a_scoring_that_crashes_is_the_tasks_recorded_error_never_the_end_of_the_run(tmp_path, monkeypatch):
    from pipeline.evaluation import task_scoring
    from pipeline.evaluation.runner import EvalSettings

    def crashing(task, patch, out_dir, settings):
        return {}["the scoring code has a bug"]

    monkeypatch.setattr(task_scoring, "evaluate", crashing)
    paths = RunLayout(tmp_path / "run").task("instance_acme__calc-1")
    assert task_scoring.score_prediction(make_task(), "p", paths, EvalSettings(image_template="x")) is None
    record = json.loads((paths.eval / "infra_error.json").read_text())
    assert record["category"] == "infra_error" and "scoring crashed: KeyError" in record["error"]
    assert "Traceback" in (paths.eval / "error.txt").read_text()
    (paths.eval / "result.json").write_text('{"format": 2, "instance_id": "i", "resol')  # cut short by a kill
    monkeypatch.setattr(task_scoring, "evaluate", lambda *args: EvalResult.of({
        "instance_id": "i", "resolved": False, "official_resolved": False, "category": "tests_failed"}))
    assert task_scoring.score_prediction(make_task(), "p", paths, EvalSettings(image_template="x")) is False


# -- the report and compare: how many verdicts were flagged, and why ----------------------------------------------

def scored_run(root, flagged: bool):
    """A run of two tasks, both resolved by the official protocol; with ``flagged``, t0's verdict has a finding
    (its prediction still says resolved, as a run scored before the checks would)."""
    root.mkdir(parents=True)
    (root / "predictions.jsonl").write_text("".join(
        json.dumps({"instance_id": task, "model_patch": "x", "strategy": "solo", "resolved": True,
                    "cost": {"solo": 0.1, "total": 0.1}}) + "\n" for task in ("t0", "t1")))
    for task in ("t0", "t1"):
        findings = [integrity.finding(integrity.SUMMARY_CONTRADICTS, "pytest counts 1 failed")] \
            if flagged and task == "t0" else []
        EvalResult.of({"instance_id": task, "resolved": not findings, "official_resolved": True,
                       "category": "flagged" if findings else "resolved", "integrity": findings}
                      ).write(RunLayout(root).task(task).eval / "result.json")
    return root


def test_the_report_and_compare_count_the_flagged_verdicts_and_name_why(tmp_path):
    from pipeline.analysis.compare import compare_pair, compare_tables
    from pipeline.analysis.load import load_run
    from pipeline.analysis.stats import run_stats
    from pipeline.report.tables import overview

    honest, forged = load_run(scored_run(tmp_path / "honest", False)), load_run(scored_run(tmp_path / "forged", True))
    assert [t.resolved for t in forged.tasks] == [False, True]  # a finding is never resolved, whatever else says so
    stats = run_stats(forged)
    assert (stats.resolved, stats.flagged, dict(stats.integrity)) == (1, 1, {"summary_contradicts": 1})
    rows = {row[0]: row[1:] for row in overview([run_stats(honest), stats], None).rows}
    assert rows["verdicts flagged by integrity checks (not resolved)"] == ["0", "1 (summary_contradicts 1)"]
    pair = compare_pair(honest, forged, {})
    assert (pair.both, pair.only_a, pair.flagged) == (1, 1, ("0", "1 (summary_contradicts 1)"))
    table = {row[0]: row[1] for row in compare_tables([pair])[0].rows}
    assert table["verdicts flagged by integrity checks (not resolved)"] == "0 -> 1 (summary_contradicts 1)"
