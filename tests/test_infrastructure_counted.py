"""A resolved verdict whose patch changes test infrastructure (conftest.py, a runner's configuration, a start-up
hook, the hidden test files) is counted and named where verdicts are read: `swepipe eval`'s summary, the report's
main table, `swepipe compare` and the task page (issue 42). Without Docker: results recorded as a scoring writes
them, read back by the real commands (`eval` keeps a verdict already on record for the same patch);
tests/test_forged_verdicts_docker.py scores such a patch in a real container."""

import dataclasses
import html
import json
from pathlib import Path

from fuzzing import fuzz
from hostile import hostile_line, in_html, in_markdown, in_terminal
from hypothesis import given
from typer.testing import CliRunner

from pipeline.analysis.load import RunData
from pipeline.analysis.stats import run_stats
from pipeline.cli import app
from pipeline.evaluation.batch import EvalSummary
from pipeline.evaluation.report import print_summary
from pipeline.records import EvalResult
from pipeline.records.evaluation import infrastructure_files, infrastructure_words
from pipeline.report.render import html_page, markdown
from pipeline.report.tables import overview
from pipeline.rundir.layout import EvalOutput, RunLayout
from pipeline.tasks import load_tasks
from pipeline.tasks.datasets import BUNDLED
from pipeline.text import patchtext
from pipeline.text.terminal import literal_console

TASKS = {t.repo.split("/")[-1]: t for t in load_tasks(BUNDLED)}
TINYQ, CURSORLY = TASKS["tinyq"], TASKS["cursorly"]
CONFTEST = "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n" \
           "@@ -0,0 +1 @@\n+# harmless\n"


def result(task, patch: str, resolved: bool, notes: list[str]) -> EvalResult:
    return EvalResult.of({"instance_id": task.instance_id, "resolved": resolved, "official_resolved": resolved,
                          "category": "resolved" if resolved else "tests_failed", "integrity": [],
                          "test_infrastructure": notes, "patch_sha256": patchtext.digest(patch)})


def scored_run(root, notes: dict[str, list[str]]):
    """A solo run of tinyq and cursorly, both resolved (gold patches); ``notes``: instance id -> its result's test
    infrastructure notes."""
    layout = RunLayout(root)
    root.mkdir(parents=True)
    layout.predictions.write_text("".join(
        json.dumps({"instance_id": task.instance_id, "model_patch": task.patch, "strategy": "solo", "source": "solo",
                    "resolved": True, "cost": {"solo": 0.1, "total": 0.1}}) + "\n" for task in (TINYQ, CURSORLY)))
    for task in (TINYQ, CURSORLY):
        notes_of = notes.get(task.instance_id, [])
        result(task, task.patch, True, notes_of).write(layout.task(task.instance_id).eval_files.result)
    return root


def invoke(*args: str) -> str:
    done = CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})
    assert done.exit_code == 0, done.output
    return " ".join(done.output.split())


def test_eval_counts_and_names_a_resolved_patch_that_changes_test_infrastructure(tmp_path):
    """Before, eval printed a plain "resolved 2 of 2" and the note showed only on a task page."""
    patched = TINYQ.patch + CONFTEST
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text("".join(json.dumps({"instance_id": t.instance_id, "model_patch": p}) + "\n"
                                   for t, p in ((TINYQ, patched), (CURSORLY, CURSORLY.patch))))
    out = EvalOutput(tmp_path / "out")
    result(TINYQ, patched, True, ["conftest.py: pytest configuration"]).write(out.task(TINYQ.instance_id).result)
    result(CURSORLY, CURSORLY.patch, True, []).write(out.task(CURSORLY.instance_id).result)
    shown = invoke("eval", "--predictions", str(predictions), "--output", str(out.root), "--dataset", BUNDLED)
    assert "2 instance(s) already had a result" in shown  # nothing scored again: the verdicts on record are read
    assert "resolved 2 of 2 scored predictions (100.0%; 1 changes test infrastructure: conftest.py)" in shown
    assert f"test infrastructure changed by {TINYQ.instance_id} (resolved; read its verdict with care): " \
           "conftest.py: pytest configuration" in shown
    summary = json.loads(out.summary.read_text())
    assert summary["resolved_changing_test_infrastructure"] == {TINYQ.instance_id: ["conftest.py"]}


def test_an_unresolved_patch_that_changes_test_infrastructure_is_not_counted(tmp_path):
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text(json.dumps({"instance_id": TINYQ.instance_id, "model_patch": CONFTEST}) + "\n")
    out = EvalOutput(tmp_path / "out")
    result(TINYQ, CONFTEST, False, ["conftest.py: pytest configuration"]).write(out.task(TINYQ.instance_id).result)
    shown = invoke("eval", "--predictions", str(predictions), "--output", str(out.root), "--dataset", BUNDLED)
    assert "resolved 0 of 1 scored predictions (0.0%);" in shown and "changed by" not in shown


def test_the_report_table_and_task_page_and_compare_count_and_name_it(tmp_path):
    honest = scored_run(tmp_path / "honest", {})
    hooked = scored_run(tmp_path / "hooked", {TINYQ.instance_id: ["conftest.py: pytest configuration",
                                                                  "tests/pytest.ini: pytest configuration"],
                                              CURSORLY.instance_id: ["conftest.py: pytest configuration"]})
    invoke("report", str(hooked), str(honest), "--dataset", BUNDLED)
    report = (hooked / "report.md").read_text().replace("\\", "")  # as shown, Markdown's escapes read
    assert "| resolved verdicts whose patch changes test infrastructure | 2 (conftest.py ×2, tests/pytest.ini) | 0 |" \
        in report
    page = html.unescape(next(hooked.rglob(f"report_tasks/hooked/{TINYQ.instance_id}.html")).read_text())
    assert "resolved, and the patch changes test infrastructure" in page
    assert "conftest.py, tests/pytest.ini" in page
    assert "test infrastructure changed (resolved: read the verdict with care)" in page
    invoke("compare", str(honest), str(hooked), "--dataset", BUNDLED, "--output", str(tmp_path / "compared"))
    compared = html.unescape((tmp_path / "compared" / "compare.md").read_text().replace("\\", ""))
    assert "| resolved verdicts whose patch changes test infrastructure | 0 -> 2 (conftest.py ×2, tests/pytest.ini) |" \
        in compared


def test_a_result_without_notes_or_of_an_older_format_counts_none(tmp_path):
    run = scored_run(tmp_path / "old", {})
    for task in (TINYQ, CURSORLY):  # a format 1 result: no notes at all
        path = RunLayout(run).task(task.instance_id).eval_files.result
        data = json.loads(path.read_text())
        data.pop("test_infrastructure")
        path.write_text(json.dumps({**data, "format": 1}))
    invoke("report", str(run), "--dataset", BUNDLED)
    assert "| resolved verdicts whose patch changes test infrastructure | 0 |" in (run / "report.md").read_text()


def test_the_files_are_read_from_the_notes_and_counted():
    assert infrastructure_files(["conftest.py: pytest configuration", "a: b.py: Python start-up hook",
                                 "conftest.py: pytest configuration", 3, None]) == ["conftest.py", "a: b.py"]
    assert infrastructure_files("conftest.py: x") == [] and infrastructure_files(None) == []
    assert infrastructure_words([]) == "" and infrastructure_words([[]]) == ""
    many = [[f"f{n}.py" for n in range(7)], ["f0.py"]]
    assert infrastructure_words(many) == ("2 change test infrastructure: f0.py ×2, f1.py, f2.py, f3.py, f4.py and 2 "
                                          "more")


STATS = run_stats(RunData(Path("empty"), []))


@fuzz
@given(name=hostile_line(40))
def test_a_hostile_file_name_is_counted_and_shown_literally(name):
    """A file name is data: Rich markup, terminal codes, table pipes and HTML are shown as they are (cleaned, never
    interpreted) in eval's summary and the report's table, and nothing crashes."""
    note = f"{name}: pytest configuration"
    assert infrastructure_files([note]) == [name]
    summary = EvalSummary(dataset_size=1, results={TINYQ.instance_id: EvalResult.of({
        "instance_id": TINYQ.instance_id, "resolved": True, "category": "resolved", "test_infrastructure": [note]})})
    console = literal_console(record=True, width=200)
    print_summary(summary, Path("out"), console)
    assert in_terminal(f"1 changes test infrastructure: {name})", console.export_text())
    stats = dataclasses.replace(STATS, run_id="r", scored=1, infrastructure=[[name]])
    table = overview([stats], None)
    assert {row[0]: row[1] for row in table.rows}["resolved verdicts whose patch changes test infrastructure"] == \
        f"1 ({name})"
    assert in_markdown(f"1 ({name})", markdown("r", [table], {}))
    assert in_html(f"1 ({name})", html_page("r", [table], {}))
