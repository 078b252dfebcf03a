"""What a model, a test or a file name says is printed by the CLI as it is: never read as Rich markup (which stopped
a run and its report with MarkupError, and printed app/[slug]/page.tsx as app//page.tsx) or as emoji codes, and
with no terminal code reaching the terminal (issue 32, defect 1). tests/test_hostile_rendering.py checks the same
with generated text."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.cli.app import console
from pipeline.settings.config import RunConfig

REPLY_PATH = "tinyq/[/i]queue.py"
TEST_NAME = "tests/test_p.py::test_norm[/usr/lib]"
NEXT_JS_PAGE = "app/[slug]/page.tsx"
TASKS = Path(__file__).parent / "fixtures" / "runs" / "tasks.jsonl"


@pytest.fixture
def printed(monkeypatch):
    """``printed(call)``: what the CLI's console prints while ``call()`` runs, at a width no table folds."""
    monkeypatch.setattr(console, "width", 2000)

    def capture(call) -> str:
        with console.capture() as captured:
            call()
        return captured.get()

    return capture


def test_a_run_summary_prints_the_errors_a_reply_caused_as_they_are(printed, tmp_path):
    """The error of a principal reply naming tinyq/[/i]queue.py stopped `swepipe run --repeats 2` after repeat 1."""
    from pipeline.cli.run_commands import _print_run
    from pipeline.records import Prediction
    from pipeline.run.bookkeeping import RunSummary
    from pipeline.rundir.layout import RunLayout

    summary = RunSummary(roles=("principal",), predictions={"tinyq-1": Prediction.of({
        "instance_id": "tinyq-1", "source": "principal", "cost": {"principal": 0.01},
        "error": f"principal: no such file {REPLY_PATH} :smile:"})}, infra_errors={"tinyq-2": "docker: [bold]gone"})
    out = printed(lambda: _print_run(summary, SimpleNamespace(layout=RunLayout(tmp_path / "run-[red]1"),
                                                              config=RunConfig())))
    assert f"principal: no such file {REPLY_PATH} :smile:" in out
    assert "tinyq-2: docker: [bold]gone" in out and "run run-[red]1" in out


def test_the_eval_and_validate_summaries_print_test_names_with_brackets(printed):
    from pipeline.cli.dataset_commands import _print_validation
    from pipeline.evaluation.batch import EvalSummary
    from pipeline.evaluation.report import print_summary
    from pipeline.evaluation.validate import TaskCheck
    from pipeline.records import EvalResult

    summary = EvalSummary(results={"i-1": EvalResult.of({"category": "tests_failed", "resolved": False,
                                                         "flaky_tests": [TEST_NAME]})},
                          unknown=["[/]x"], dataset_size=1)
    out = printed(lambda: print_summary(summary, console=console, output_dir="eval"))
    assert f"flaky in i-1: {TEST_NAME}" in out and "dataset: [/]x" in out
    check = TaskCheck("i-1", "org/[slug]", "python", 1, status="broken", problems=[f"{TEST_NAME} failed on gold"])
    out = printed(lambda: _print_validation([check], [check], "bundled", 1))
    assert f"{TEST_NAME} failed on gold" in out and "org/[slug]" in out


def test_a_report_table_shows_a_file_name_with_brackets(printed):
    from pipeline.analysis.table import Table
    from pipeline.report.render import rich_table

    table = Table("files [/i]", ["file", ":smile:"], [[NEXT_JS_PAGE, "[link=https://example.com]x[/link]"]],
                  ["note [/dim]"])
    out = printed(lambda: console.print(rich_table(table)))
    assert NEXT_JS_PAGE in out and "[link=https://example.com]x[/link]" in out
    assert all(text in out for text in ("files [/i]", ":smile:", "note [/dim]"))


def test_the_progress_bar_shows_its_description_as_text(printed):
    from pipeline.control.parallel import progress_bar

    progress = progress_bar("run")
    progress.add_task(f"waiting: {REPLY_PATH}", total=3)
    assert f"waiting: {REPLY_PATH}" in printed(lambda: console.print(progress.make_tasks_table(progress.tasks)))


def test_a_log_line_carries_no_terminal_code(capsys):
    from pipeline.cli.run_commands import _log_line

    _log_line("task t-1: source principal | error: \x1b[2J\x1b]52;c;aGk=\x07cleared")
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "cleared" in out


def test_the_report_command_prints_and_writes_a_run_whose_error_looks_like_markup(tmp_path):
    """`swepipe report` of the run above wrote nothing."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text(json.dumps({
        "instance_id": "tinyq-1", "model_patch": "", "strategy": "pipeline", "source": "none",
        "error": f"principal reply edits {REPLY_PATH}", "cost": {"principal": 0.01, "total": 0.01}}) + "\n")
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "report", str(run), "--dataset", str(TASKS)],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert f"principal reply edits {REPLY_PATH}" in done.stdout
    assert (run / "report.md").is_file() and (run / "report.html").is_file()



def test_only_real_terminal_codes_are_taken_out_of_shown_text():
    """A stray "ESC [" in one value of a joined cell took the ", [" of the next value with it (found by the fuzzer)."""
    from pipeline.text.printable import clean

    assert clean("\x1b[31mred\x1b[0m \x1b[?25lhidden") == "red hidden"
    assert clean("a\x1b[, [b]") == "a\ufffd[, [b]"
    assert clean("x\x1b[1;2") == "x\ufffd[1;2"


def test_an_instance_id_that_is_only_the_usual_prefix_is_still_shown():
    """Found by the suite's fuzz in CI: "instance_" shortened to nothing in the run's table."""
    from pipeline.text.printable import short_id

    assert short_id("instance_") == "instance_" and short_id("instance_abc") == "abc"
