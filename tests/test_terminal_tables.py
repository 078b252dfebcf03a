"""Every table swepipe prints reads where it is printed: at 80 columns, at 160, and in a log with no terminal
(COLUMNS unset: Rich's 80). No line is wider than the width, no header word is split over lines, a task's id is
shown once shortened and whole, and every message is whole (issue 44). Names and messages are data: shown
literally, with markup, brackets, unicode and newlines."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.cells import cell_len

from pipeline.text.printable import clean, short_id, short_ids, whole_paragraphs
from pipeline.text.terminal import literal, literal_console
from pipeline.text.terminal_table import TerminalTable
from tests.fuzzing import fuzz
from tests.hostile import hostile_line, hostile_text, in_terminal

WIDTHS = (80, 160)
BUNDLED_ID = "instance_swepipe-bundled__markroll-4554c235a44409ad51224726097a584c723b3902"
PRO_ID = "instance_NodeBB__NodeBB-04998908ba6721d64eba79ae3b65a351dcfbc5b5-vnan"
EDIT_ERROR = ("1 of 1 edit blocks could not be applied (blocks are numbered in reply order):\n\n"
              "Block 1 (markroll/[bold]table.py): the SEARCH text was not found in the file; the nearest lines "
              "are 12-14, which differ in their indentation")
FIXTURES = Path(__file__).parent / "fixtures" / "runs"


def rendered(renderable, width: int | None) -> str:
    """What a console of swepipe prints, ``width`` columns wide, or (None) as in a log: no terminal, COLUMNS
    unset."""
    if width is None:
        saved = os.environ.pop("COLUMNS", None)
        try:
            console = literal_console(file=io.StringIO(), force_terminal=False)
        finally:
            if saved is not None:
                os.environ["COLUMNS"] = saved
    else:
        console = literal_console(file=io.StringIO(), width=width, force_terminal=False)
    console.print(renderable)
    return console.file.getvalue()


def assert_readable(out: str, width: int, headers=(), ids=(), messages=()) -> None:
    lines = out.split("\n")
    wide = [line for line in lines if cell_len(line) > width]
    assert not wide, f"lines over {width} columns: {wide[:3]}"
    for header in headers:
        for word in clean(header).split():
            if cell_len(word) < width - 4:
                assert any(word in line for line in lines), f"header word {word!r} split over lines:\n{out}"
    for shown in ids:
        as_printed = literal(shown).plain  # a tab as the spaces it takes
        assert any(as_printed in line for line in lines), f"id {shown!r} not whole on a line:\n{out}"
    for message in messages:
        assert in_terminal(message, out), f"message {message!r} not whole:\n{out}"


# -- the rule every table follows ------------------------------------------------------------------------------

@pytest.mark.parametrize("width", [*WIDTHS, None])
def test_a_narrow_table_stays_a_grid_and_a_wide_one_turns(width):
    narrow = TerminalTable("evaluation: eval", ["category", "instances"], [["resolved", "1"], ["tests_failed", "2"]])
    out = rendered(narrow, width)
    assert "┃ category     ┃ instances ┃" in out
    headers = ["instance", "K", "gold rm/add/files", "rm: cand.", "rm: +exp.", "rm: +senior", "rm: sent",
               "add: cand.", "add: +exp.", "add: +senior", "add: sent", "all files sent"]
    wide = TerminalTable("Coverage by task at k=K: pipe", headers,
                         [[short_id(BUNDLED_ID), "2", "3/4", *["5.0%"] * 8, "yes"]])
    out = rendered(wide, width)
    assert_readable(out, width or 80, headers, [short_id(BUNDLED_ID)])
    assert "┃" not in out or width == 160  # 80 columns (and a log) hold its turned form
    assert "┃" in rendered(wide, 200)


@pytest.mark.parametrize("width", [*WIDTHS, None])
def test_the_run_table_shows_ids_whole_and_the_edit_error_whole(width, tmp_path):
    from pipeline.cli.run_commands import run_table
    from pipeline.records import Prediction
    from pipeline.run.bookkeeping import RunSummary
    from pipeline.rundir.layout import RunLayout

    predictions = {i: Prediction(instance_id=i, source="principal", error=EDIT_ERROR,
                                 cost={"junior": 0.0, "senior": 0.0, "principal": 0.0})
                   for i in (BUNDLED_ID, PRO_ID)}
    summary = RunSummary(roles=("junior", "senior", "principal"), predictions=predictions)
    out = rendered(run_table(summary, RunLayout(tmp_path / "main-20261206-110645")), width)
    assert_readable(out, width or 80, ["instance", "source", "junior $", "senior $", "principal $", "resolved"],
                    ["markroll@4554c23", "NodeBB@0499890"], [EDIT_ERROR])
    assert BUNDLED_ID not in out  # shortened once, the same way as everywhere


def test_a_long_error_shows_whole_paragraphs_and_says_how_many_are_left():
    shown, left = whole_paragraphs("\n\n".join(f"paragraph {n}: " + "word " * 20 for n in range(12)), lines=3)
    assert left == 9 and shown.count("paragraph") == 3 and shown.rstrip().endswith("word")
    assert whole_paragraphs("a:\n\n" + "b\n" * 20, lines=1) == ("a:\n\n" + ("b\n" * 20).strip("\n"), 0)


# -- ids ---------------------------------------------------------------------------------------------------------

def test_an_id_is_shortened_to_its_repository_and_commit():
    assert short_id(BUNDLED_ID) == "markroll@4554c23" and short_id(PRO_ID) == "NodeBB@0499890"
    assert short_id("demo__calc-1") == "demo__calc-1" and short_id("instance_") == "instance_"
    twins = [PRO_ID, PRO_ID.replace("-vnan", "-v1234")]
    assert sorted(short_ids(twins).values()) == sorted(i.removeprefix("instance_NodeBB__").replace("-", "@", 1)
                                                         for i in twins)


ids = st.one_of(hostile_text(120, min_size=1),
                st.builds(lambda owner, repo, commit: f"instance_{owner}__{repo}-{commit}", hostile_line(20),
                          hostile_line(30), st.text("0123456789abcdef", min_size=40, max_size=40)))


@fuzz
@given(names=st.lists(ids, min_size=1, max_size=6))
def test_short_ids_are_distinct_and_each_on_one_line(names):
    shown = short_ids(names)
    assert len(set(shown.values())) == len(set(names))
    assert all("\n" not in s and "\r" not in s and s == clean(s) for s in shown.values())


# -- hostile tables ------------------------------------------------------------------------------------------------

@fuzz
@given(names=st.lists(ids, min_size=1, max_size=4), messages=st.lists(hostile_text(300), min_size=1, max_size=4),
       title=hostile_text(), width=st.sampled_from([*WIDTHS, None]))
def test_a_table_of_hostile_ids_and_messages_reads_at_any_width(names, messages, title, width):
    shown = short_ids(names)
    headers = ["instance", "source", "error"]
    rows = [[shown[name], "[bold]principal[/bold]", messages[n % len(messages)]] for n, name in enumerate(names)]
    out = rendered(TerminalTable(title, headers, rows, ["note: [/i] :smile:"]), width)
    short = [s for s in shown.values() if cell_len(s) <= (width or 80) - 4]  # an id wider than a line must fold
    assert_readable(out, width or 80, headers, short, [*(row[2] for row in rows), "[bold]principal[/bold]",
                                                     "note: [/i] :smile:"])


# -- the commands, as they print -----------------------------------------------------------------------------------

def swepipe(tmp_path: Path, columns: str | None, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "MPLCONFIGDIR": str(tmp_path / "mpl"),
           "HOME": str(tmp_path), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    if columns is not None:
        env["COLUMNS"] = columns
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=env, timeout=180)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("columns", ["80", "160", None])
def test_the_report_command_reads_at_the_width_of_its_log(columns, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(FIXTURES, runs)
    out = swepipe(tmp_path, columns, "report", str(runs / "pipe"), str(runs / "failed"), "--baseline",
                  str(runs / "solo"), "--dataset", str(runs / "tasks.jsonl"), "--output", str(tmp_path / "out"))
    width = int(columns or 80)
    assert_readable(out.split("wrote ")[0], width,
                    ["add: +senior", "tokens: +senior", "rm: +exp.", "unresolved (no eval result)", "category"])
    assert "Coverage of the gold patch: pipe" in out
    assert (tmp_path / "out" / "report.html").exists()  # the whole tables


@pytest.mark.parametrize("columns", ["80", "160", None])
def test_the_tasks_command_shows_the_bundled_ids_short_and_whole(columns, tmp_path):
    out = swepipe(tmp_path, columns, "tasks", "--limit", "5")
    ids = re.findall(r"[a-z]+@[0-9a-f]{7}", out)
    assert len(set(ids)) == 5, out
    assert_readable(out, int(columns or 80), ["instance", "repo", "language", "FAIL_TO_PASS", "PASS_TO_PASS"], ids)


@pytest.mark.parametrize("width", [*WIDTHS, None])
def test_the_eval_and_validation_summaries_read_at_the_width(width, monkeypatch):
    from pipeline.cli import dataset_commands
    from pipeline.evaluation.batch import EvalSummary
    from pipeline.evaluation.report import print_summary
    from pipeline.evaluation.validate import TaskCheck
    from pipeline.records import EvalResult

    summary = EvalSummary(results={BUNDLED_ID: EvalResult.of({"instance_id": BUNDLED_ID, "category": "tests_failed",
                                                              "resolved": False})}, dataset_size=1)
    console = literal_console(file=io.StringIO(), width=width or 80, force_terminal=False)
    print_summary(summary, Path("eval"), console)
    problem = f"tests/test_table.py::test_[{'x' * 90}] failed on gold; {EDIT_ERROR}"
    check = TaskCheck(BUNDLED_ID, "swepipe-bundled/markroll", "python", 1, status="broken", problems=[problem])
    monkeypatch.setattr(dataset_commands, "console", console)
    dataset_commands._print_validation([check], [check], "bundled", 1)
    out = console.file.getvalue()
    assert_readable(out, width or 80, ["category", "instances", "repository", "language", "status", "problems"],
                    ["markroll@4554c23"], [problem])


def test_the_run_summary_line_of_a_log_keeps_the_error_sentence_whole():
    from pipeline.records import Prediction
    from pipeline.run.bookkeeping import task_line

    line = task_line(Prediction(instance_id=BUNDLED_ID, source="principal", error=EDIT_ERROR), ("principal",))
    assert "task markroll@4554c23" in line
    assert " ".join(EDIT_ERROR.split()) in line


def test_the_pool_table_turns_when_its_cells_hold_several_lines():
    from pipeline.cli import run_commands

    console = literal_console(file=io.StringIO(), width=80, force_terminal=False)
    candidate = SimpleNamespace(votes=2, rollouts=[0, 1], files=["a/[x].py", "b.py"], functions=["f", "g"],
                                test_patch=False)
    pool = SimpleNamespace(instance_id=BUNDLED_ID, candidates=[candidate], rollouts=2, empty=[], failed=[],
                           dropped=[])
    saved = run_commands.console
    run_commands.console = console
    try:
        run_commands._print_pool(pool, [])
    finally:
        run_commands.console = saved
    out = console.file.getvalue()
    assert_readable(out, 80, ["candidate", "votes", "rollouts", "files", "functions", "test edits"],
                    messages=["a/[x].py", "b.py"])
