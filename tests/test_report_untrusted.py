"""A run directory is untrusted input to its report (issue 32, defect 7, and what the hostile-text properties of
test_hostile_rendering.py found): odd verdicts, configs and numbers, text that looks like HTML, Markdown or
mathtext, folders of the same name, and `compare --json` read by a program."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.analysis.compare import compare_runs
from pipeline.analysis.load import load_run
from pipeline.analysis.stats import run_stats
from pipeline.report.build import build_report, write_report

FIXTURE_TASKS = Path(__file__).parent / "fixtures" / "runs" / "tasks.jsonl"


def make_run(root: Path, predictions: list[dict], config=None) -> Path:
    root.mkdir(parents=True)
    if config is not None:
        (root / "config.yaml").write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    (root / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in predictions))
    return root


def prediction(instance_id: str, **fields) -> dict:
    return {"instance_id": instance_id, "model_patch": "diff", "strategy": "solo", "source": "solo",
            "cost": {"solo": 0.1, "total": 0.1}, **fields}


def test_only_a_json_true_is_resolved_and_the_report_says_which_verdicts_were_not_true_or_false(tmp_path):
    verdicts = {"t-true": True, "t-false": False, "t-text-false": "false", "t-no": "no", "t-one": 1, "t-yes": "yes"}
    run = make_run(tmp_path / "run", [prediction(i, resolved=v) for i, v in verdicts.items()])
    stats = run_stats(load_run(run))
    assert (stats.resolved, stats.scored) == (1, 6)
    notes = build_report([run], None).notes
    assert 'run: t-text-false: its prediction says resolved "false", neither true nor false; counted as not ' \
           "resolved" in notes
    assert len([n for n in notes if "neither true nor false" in n]) == 4


def test_an_eval_result_s_odd_verdict_is_not_resolved_either(tmp_path):
    run = make_run(tmp_path / "run", [prediction("t-1")])
    (run / "tasks" / "t-1" / "eval").mkdir(parents=True)
    (run / "tasks" / "t-1" / "eval" / "result.json").write_text(json.dumps(
        {"instance_id": "t-1", "resolved": "no", "category": "resolved"}))
    [task] = load_run(run).tasks
    assert task.resolved is False and task.category == "unresolved (no eval result)"
    assert task.odd_verdicts == ['eval/result.json says resolved "no", neither true nor false']


@pytest.mark.parametrize("config", [{"models": [1, 2]}, {"models": {"senior": "x"}, "juniors": "all", "limits": [3],
                                                         "principal": ["show_candidates"], "strategy": 7},
                                    {"limits": {"compact_after": 2, "compact_chars": "lots"}},
                                    b"strategy: \xff\xfe not UTF-8\n", "- a list\n- of things\n"])
def test_a_config_of_any_shape_is_read_as_what_it_can_say(tmp_path, config):
    run = tmp_path / "run"
    make_run(run, [prediction("t-1", resolved=True)])
    if isinstance(config, bytes):
        (run / "config.yaml").write_bytes(config)
    else:
        (run / "config.yaml").write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    write_report(build_report([run], {"t-1": "diff"}), run)
    assert (run / "report.md").is_file() and (run / "report.html").is_file()


def test_non_finite_and_huge_numbers_count_as_none_and_the_figures_are_drawn(tmp_path):
    lines = [json.dumps(prediction("t-nan", resolved=True, cost={"solo": float("nan"), "total": float("nan")},
                                   tokens={"solo": {"input": float("nan"), "output": float("inf")}})),
             json.dumps(prediction("t-inf", resolved=False, cost={"solo": float("inf")}, seconds={"solo": 1e400})),
             json.dumps(prediction("t-huge", resolved=True, cost={"solo": 10 ** 400, "total": -1e300})),
             json.dumps(prediction("t-fine", resolved=False, cost={"solo": 0.25, "total": 0.25}))]
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text("\n".join(lines) + "\n")
    report = build_report([run], None)
    assert report.stats[0].cost_sum["total"] == pytest.approx(0.25)
    write_report(report, run)
    assert (run / "figures" / "cost-run.png").read_bytes().startswith(b"\x89PNG")


def test_a_run_named_like_a_formula_gets_its_figures(tmp_path):
    """Matplotlib reads a pair of "$" as mathtext; this one is malformed and stopped the report."""
    run = make_run(tmp_path / "cost $\\frac{$ run", [prediction("t-1", resolved=True)])
    write_report(build_report([run], None), run)
    assert len(list((run / "figures").glob("*.png"))) == 2


def test_report_md_shows_a_model_s_text_literally(tmp_path):
    from markdown_it import MarkdownIt

    error = "<script>alert(1)</script> | `code` *not bold* _x_ [link](https://x.y) &amp;\nsecond line"
    run = make_run(tmp_path / "run", [prediction("t-1", resolved=False, error=error)])
    write_report(build_report([run], None), run)
    text = (run / "report.md").read_text()
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    row = next(line for line in text.splitlines() if line.startswith("| [t-1]("))  # (a link to its page)
    assert row.count(" | ") == len(next(line for line in text.splitlines() if line.startswith("| instance |"))
                                   .split(" | ")) - 1  # the error's "|" is no cell border
    rendered = MarkdownIt("commonmark").enable("table").render(text)
    assert ("&lt;script&gt;alert(1)&lt;/script&gt; | `code` *not bold* _x_ [link](https://x.y) &amp;amp;<br>"
            "second line") in rendered


def test_runs_in_folders_of_the_same_name_are_told_apart(tmp_path):
    """a/run and b/run were both "run": the comparison's keys and its tables mixed them up."""
    first = make_run(tmp_path / "a" / "run", [prediction("t-1", resolved=True), prediction("t-2", resolved=True)])
    second = make_run(tmp_path / "b" / "run", [prediction("t-1", resolved=False)])
    [pair] = compare_runs([load_run(first), load_run(second)])
    assert (pair.a, pair.b) == ("a/run", "b/run") and pair.left_out == {"a/run": 1, "b/run": 0}
    report = build_report([first, second], None)
    assert [run.run_id for run in report.runs] == ["a/run", "b/run"]
    alone = compare_runs([load_run(first), load_run(tmp_path / "a" / "run"), load_run(second)])
    assert [(p.a, p.b) for p in alone] == [("a/run", "a/run"), ("a/run", "b/run")]  # the same folder twice


def test_compare_json_is_the_only_thing_on_stdout(tmp_path):
    """The notes ("tasks from ..., as run ... recorded", "wrote ...") went to stdout before the JSON: `| jq .`
    failed."""
    runs = [make_run(tmp_path / name, [prediction("demo__calc-1", resolved=verdict)])
            for name, verdict in (("a", True), ("b", False))]
    for run in runs:
        (run / "dataset.json").write_text(json.dumps({"dataset": str(FIXTURE_TASKS), "split": ""}))
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "compare", *map(str, runs), "--json", "--output",
                           str(tmp_path / "out")], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pairs"][0]["only_a"] == 1
    said = " ".join(done.stderr.split())
    assert "as run a recorded" in said and f"wrote {tmp_path / 'out' / 'compare.md'}" in said


def test_a_task_page_whose_id_holds_the_back_link_s_placeholder_keeps_its_title(tmp_path):
    """A page made once for several reports had the first occurrence of a placeholder replaced by the link back: an
    instance id holding its words lost them in the page's title, and the link was never made."""
    instance_id = "swepipe-link-back-to-the-report"
    run = make_run(tmp_path / "run", [prediction(instance_id, resolved=True)])
    write_report(build_report([run], None), run)
    page = (run / "report_tasks" / "run" / f"{instance_id}.html").read_text()
    assert f"<title>{instance_id} · run</title>" in page and '<a href="../../report.html">' in page


def test_a_line_that_is_only_a_line_break_does_not_show_the_next_line_s_escapes():
    """A line of report.md that was "<br>" alone opened an HTML block, so the next line showed as typed: "\\[/i\\]"
    (found by the fuzzer at 5000 examples)."""
    from hostile import in_markdown

    from pipeline.analysis.table import Table
    from pipeline.report.render import markdown

    for lead in (["\r", "[/i][/i]"], ["\n\n  ", "*not bold*"]):
        text = markdown("t", [Table("t", ["a"], [], [])], {}, lead)
        assert in_markdown(lead[1], text), text
