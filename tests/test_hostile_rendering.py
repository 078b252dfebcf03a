"""Every renderer fed generated hostile text (tests/hostile.py) in every field a model, a test, a file name or a
provider can set: the terminal (the CLI's summaries and tables), Markdown (report.md, compare --markdown) and HTML
(report.html, the task pages, compare --html). Invariants: no exception, and each text shown literally once the
format's own escaping is undone by its reader (hostile.in_terminal, in_markdown, in_html).

Each property runs tests/fuzzing.py's number of examples; scripts/fuzz_replies.py --examples N runs them long."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from fuzzing import fuzz
from hostile import (
    file_name,
    hostile_line,
    hostile_number,
    hostile_text,
    in_html,
    in_markdown,
    in_terminal,
    json_scalar,
    verdict,
)
from hypothesis import given
from hypothesis import strategies as st

from pipeline.cli.app import console, err_console
from pipeline.settings.config import RunConfig

texts = st.lists(hostile_text(), min_size=1, max_size=4)


@pytest.fixture
def printed(monkeypatch):
    """``printed(call)``: what the CLI's consoles print while ``call()`` runs, at a width no table folds."""
    for shown in (console, err_console):
        monkeypatch.setattr(shown, "width", 4000)

    def capture(call) -> str:
        with console.capture() as out, err_console.capture() as err:
            call()
        return out.get() + err.get()

    return capture


# -- the terminal ---------------------------------------------------------------------------------------------

@fuzz
@given(message=hostile_text(200), style=st.sampled_from(("", "red", "bold yellow")))
def test_a_message_prints_as_it_is(printed, message, style):
    out = printed(lambda: (console.print(message, style=style, soft_wrap=True), err_console.print("x", message)))
    assert in_terminal(message, out)


@fuzz
@given(title=hostile_text(), headers=texts, rows=st.lists(texts, max_size=3), notes=st.lists(hostile_text(),
                                                                                                 max_size=2))
def test_a_report_table_prints_as_it_is(printed, title, headers, rows, notes):
    from pipeline.analysis.table import Table
    from pipeline.report.render import rich_table

    rows = [(row + [""] * len(headers))[:len(headers)] for row in rows]
    out = printed(lambda: console.print(rich_table(Table(title, headers, rows, notes))))
    assert all(in_terminal(text, out) for text in [title, *headers, *(c for row in rows for c in row), *notes])


@fuzz
@given(run_id=file_name(), instance_id=hostile_line(30), source=hostile_line(), error=hostile_line(60),
       infra=hostile_text(), cost=st.one_of(json_scalar, st.dictionaries(hostile_line(), json_scalar)),
       resolved=verdict)
def test_the_run_summary_prints_as_it_is(printed, run_id, instance_id, source, error, infra, cost, resolved):
    from pipeline.cli.run_commands import _print_run
    from pipeline.records import Prediction
    from pipeline.run.bookkeeping import RunSummary, task_line
    from pipeline.rundir.layout import RunLayout

    fields = {"instance_id": instance_id, "source": source, "cost": {"principal": cost}, "error": error,
              "resolved": resolved}
    read = Prediction.from_data(fields)  # a cost the record cannot hold (an object): read without it
    prediction = read if isinstance(read, Prediction) else Prediction.from_data({**fields, "cost": {}})
    assert isinstance(prediction, Prediction)
    summary = RunSummary(roles=("principal",), predictions={instance_id: prediction}, infra_errors={"other": infra})
    out = printed(lambda: _print_run(summary, SimpleNamespace(layout=RunLayout(Path("runs") / run_id),
                                                              config=RunConfig())))
    assert all(in_terminal(text, out) for text in (run_id, instance_id, source, error.strip(), infra))
    assert summary.line() and task_line(prediction, ("principal",))  # the log's lines, whatever the file held


@fuzz
@given(files=texts, functions=texts, dropped=hostile_text(), reason=hostile_text(), exit_reason=hostile_line())
def test_the_candidate_pool_prints_as_it_is(printed, files, functions, dropped, reason, exit_reason):
    from pipeline.cli.run_commands import _print_pool

    candidate = SimpleNamespace(votes=2, rollouts=[0, 1], files=files, functions=functions, test_patch="")
    pool = SimpleNamespace(instance_id="t-1", candidates=[candidate], rollouts=2, empty=[], failed=[1],
                           dropped=[{"rollout": 0, "file": dropped, "reason": reason}])
    out = printed(lambda: _print_pool(pool, [SimpleNamespace(cost=0.1, exit_reason=exit_reason)]))
    assert all(in_terminal(text, out) for text in [*files, *functions[:6], exit_reason])
    assert in_terminal(f"dropped from rollout 0: {dropped} ({reason})", out)  # (the line is cleaned as one)


@fuzz
@given(tests=texts, unknown=hostile_line(), kind=hostile_line(), detail=hostile_text(), problem=hostile_text(),
       repo=hostile_line())
def test_the_eval_and_validate_summaries_print_as_they_are(printed, tests, unknown, kind, detail, problem, repo):
    from pipeline.cli.dataset_commands import _print_validation
    from pipeline.evaluation.batch import EvalSummary
    from pipeline.evaluation.report import print_summary
    from pipeline.evaluation.validate import TaskCheck
    from pipeline.records import EvalResult

    results = {"i-1": EvalResult.of({"category": "tests_failed", "resolved": False, "flaky_tests": tests,
                                     "integrity": [{"kind": kind, "detail": detail}]})}
    summary = EvalSummary(results=results, unknown=[unknown], dataset_size=1)
    out = printed(lambda: print_summary(summary, Path("eval"), console))
    # the lines as printed: a terminal code can only be told from text in the line it is in
    assert all(in_terminal(text, out) for text in [f"flaky in i-1: {', '.join(tests[:5])}", unknown,
                                                   f"integrity findings in i-1 (not resolved): {kind}: {detail}"])
    check = TaskCheck("i-1", repo, "python", 1, status="broken", problems=[problem, *tests])
    out = printed(lambda: _print_validation([check], [check], "bundled", 1))
    assert in_terminal(repo, out) and in_terminal("; ".join([problem, *tests]), out)


# -- Markdown and HTML of any table -----------------------------------------------------------------------------

@fuzz
@given(title=hostile_text(), headers=texts, rows=st.lists(texts, max_size=3),
       notes=st.lists(hostile_text(), max_size=2), lead=st.lists(hostile_text(), max_size=2), caption=hostile_text())
def test_markdown_and_html_show_every_text_as_it_is(title, headers, rows, notes, lead, caption):
    from pipeline.analysis.table import Table
    from pipeline.report.render import html_page, markdown

    rows = [(row + [""] * len(headers))[:len(headers)] for row in rows]
    tables = [Table(title, headers, rows, notes)]
    shown = [title, *(headers if rows else []), *(c for row in rows for c in row), *notes, *lead]  # no rows: no head
    text = markdown(title, tables, {caption: "figures/x.png"}, lead)
    assert all(in_markdown(value, text) for value in shown)
    page = html_page(title, tables, {caption: b"png"}, lead)
    assert all(in_html(value, page) for value in [*shown, caption])


# -- a whole report of a hostile run ------------------------------------------------------------------------------

safe_id = st.from_regex(r"[A-Za-z0-9_+@=~][A-Za-z0-9_.+@=~-]{0,15}", fullmatch=True).filter(lambda i: ".." not in i)
test_names = st.lists(hostile_text(40, min_size=1), max_size=3)


@st.composite
def hostile_task(draw) -> dict:
    """One task's files: the prediction, and maybe an eval result; every text and number from hostile.py."""
    cost = {"junior": draw(st.one_of(hostile_number, json_scalar)), "principal": draw(hostile_number)}
    if draw(st.booleans()):
        cost["total"] = draw(hostile_number)
    prediction = {"instance_id": draw(st.one_of(safe_id, hostile_line(20))), "model_patch": draw(hostile_text()),
                  "strategy": draw(hostile_line()), "source": draw(hostile_line()), "error": draw(hostile_text()),
                  "resolved": draw(verdict), "cost": cost, "seconds": {"junior": draw(hostile_number)},
                  "tokens": {"junior": {"input": draw(hostile_number), "output": draw(json_scalar)}},
                  "models": {"junior": draw(hostile_line()), "principal": draw(hostile_line())},
                  "exit_reason": draw(hostile_line()), "juniors_reused_from": draw(st.one_of(st.none(),
                                                                                              hostile_line()))}
    result = None
    if draw(st.booleans()):
        result = {"instance_id": prediction["instance_id"], "resolved": draw(verdict),
                  "category": draw(st.one_of(st.sampled_from(("resolved", "tests_failed", "infra_error")),
                                             hostile_line())),
                  "error": draw(st.one_of(st.none(), hostile_text())),
                  "FAIL_TO_PASS": {"passed": draw(test_names), "failed": draw(test_names), "missing": []},
                  "PASS_TO_PASS": {"passed": [], "failed": [], "missing": draw(test_names)}}
    return {"prediction": prediction, "result": result}


configs = st.one_of(
    st.fixed_dictionaries({}, optional={
        "strategy": st.one_of(hostile_line(), json_scalar), "models": st.one_of(st.lists(json_scalar, max_size=2),
                                                                               json_scalar),
        "limits": st.one_of(json_scalar, st.fixed_dictionaries({}, optional={
            "editor": json_scalar, "compact_after": json_scalar, "compact_chars": json_scalar})),
        "juniors": st.one_of(json_scalar, st.fixed_dictionaries({}, optional={"k": json_scalar, "seed": json_scalar})),
        "principal": st.one_of(st.lists(json_scalar, max_size=2), st.fixed_dictionaries(
            {}, optional={"show_candidates": json_scalar, "impl": json_scalar}))}),
    st.lists(json_scalar, max_size=2), json_scalar)


def _yaml(config) -> bytes:
    """config.yaml as a hand-edited file may be: YAML, or bytes that are not UTF-8."""
    try:
        return yaml.safe_dump(config, allow_unicode=True).encode("utf-8")
    except (UnicodeEncodeError, yaml.YAMLError):
        return b"strategy: \xff\xfe\n"


def write_run(root: Path, tasks: list[dict], config) -> Path:
    root.mkdir(parents=True)
    (root / "config.yaml").write_bytes(_yaml(config))
    lines = [json.dumps(task["prediction"]) + "\n" for task in tasks]
    (root / "predictions.jsonl").write_text("".join(lines), encoding="utf-8")
    for task in tasks:
        instance_id = task["prediction"]["instance_id"]
        if task["result"] is not None and re.fullmatch(r"[A-Za-z0-9_.+@=~-]+", instance_id):
            folder = root / "tasks" / instance_id / "eval"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "result.json").write_text(json.dumps(task["result"]), encoding="utf-8")
    return root


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8")  # as written: read_text would turn a carriage return into a newline


def _last_by_id(tasks: list[dict]) -> list[dict]:
    """The tasks as the report keeps them: a later prediction of an instance id replaces an earlier one."""
    return list({task["prediction"]["instance_id"]: task for task in tasks}.values())


@fuzz
@given(name=file_name(), tasks=st.lists(hostile_task(), min_size=1, max_size=3), config=configs)
def test_a_report_of_a_hostile_run_is_written_and_shows_its_text(printed, monkeypatch, name, tasks, config):
    """The figures are left to the next property (they take most of the time)."""
    from pipeline.report.build import Report, build_report, write_report

    monkeypatch.setattr(Report, "figures", lambda report, files: {})
    from pipeline.analysis.load import load_run
    from pipeline.report.render import rich_table

    with tempfile.TemporaryDirectory() as folder:
        run = write_run(Path(folder) / name, tasks, config)
        tasks = json.loads(json.dumps(tasks))  # as a reader of the files has them (a surrogate pair reads as one)
        report = build_report([run], None)
        out = printed(lambda: [console.print(rich_table(table)) for table in report.tables(per_task=False)])
        written = write_report(report, run, task_pages=True)
        text, page = _read(run / "report.md"), _read(run / "report.html")
        kept = {t.instance_id: t for t in load_run(run).tasks}
        for task in _last_by_id(tasks):
            prediction = task["prediction"]
            if prediction["instance_id"] not in kept:
                continue  # an id that is no safe file name: left out, and said so
            for value in (run.name, prediction["strategy"], prediction["source"]):
                assert in_terminal(value, out) and in_markdown(value, text) and in_html(value, page)
            assert in_markdown(prediction["error"][:100], text) and in_html(prediction["error"][:100], page)
            task_page = next(path for key, path in written.items() if key.endswith("_tasks/")) / run.name
            own = task_page.parent / (task_page.name if (task_page).is_dir() else "")
            pages = list(own.rglob(f"{prediction['instance_id']}.html"))
            assert pages, f"no task page for {prediction['instance_id']!r}"
            shown = _read(pages[0])
            for value in (prediction["error"], *prediction["models"].values()):
                assert in_html(value, shown)
            result = task["result"]
            if result is not None and kept[prediction["instance_id"]].eval_result is not None:
                assert all(in_html(name_, shown) for name_ in result["FAIL_TO_PASS"]["failed"])


@fuzz
@given(names=st.lists(file_name(), min_size=1, max_size=2), tasks=st.lists(hostile_task(), min_size=1, max_size=2),
       config=configs)
def test_the_figures_of_hostile_runs_are_drawn(names, tasks, config):
    """Names with "$" pairs (mathtext to matplotlib), numbers that are NaN, infinite or huge."""
    from pipeline.report.build import build_report
    from pipeline.rundir.layout import ReportFiles

    with tempfile.TemporaryDirectory() as folder:
        runs = [write_run(Path(folder) / str(number) / name, tasks, config) for number, name in enumerate(names)]
        report = build_report(runs, None, baseline=runs[0])
        assert all(png.startswith(b"\x89PNG") for _, png in report.figures(ReportFiles(Path(folder))).values())


# -- compare ------------------------------------------------------------------------------------------------------

@fuzz
@given(names=st.lists(file_name(), min_size=2, max_size=2), tasks=st.lists(hostile_task(), min_size=1, max_size=3))
def test_compare_shows_both_runs_in_every_format(printed, names, tasks):
    from pipeline.analysis.compare import compare_runs, compare_tables
    from pipeline.analysis.load import load_run
    from pipeline.report.render import html_page, markdown, rich_table

    with tempfile.TemporaryDirectory() as folder:
        runs = [load_run(write_run(Path(folder) / str(number) / name, tasks, {}))
                for number, name in enumerate(names)]
        pairs = compare_runs(runs)
        assert pairs[0].a != pairs[0].b
        json.loads(json.dumps({"pairs": [pair.as_dict() for pair in pairs]}),
                   parse_constant=lambda word: pytest.fail(f"{word} is no JSON"))
        tables = compare_tables(pairs)
        out = printed(lambda: [console.print(rich_table(table)) for table in tables])
        text, page = markdown("compare", tables, {}), html_page("compare", tables, {})
        for label in (pairs[0].a, pairs[0].b):
            assert in_terminal(label, out) and in_markdown(label, text) and in_html(label, page)
