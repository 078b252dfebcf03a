"""The report over the hand-built runs of tests/fixtures/runs (see its README.md); numbers worked out by hand."""

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from pipeline.report.build import build_report, write_report
from pipeline.report.load import load_run
from pipeline.report.stats import bootstrap_interval, efficiency, error_kind, run_stats
from pipeline.report.tables import efficiency_cell, overview
from pipeline.tasks import load_task_file

FIXTURES = Path(__file__).parent / "fixtures" / "runs"


@pytest.fixture
def runs(tmp_path) -> Path:
    """A copy of the fixture runs: reports are written into run directories."""
    shutil.copytree(FIXTURES, tmp_path / "runs")
    return tmp_path / "runs"


@pytest.fixture
def patches() -> dict[str, str]:
    return {t.instance_id: t.patch for t in load_task_file(FIXTURES / "tasks.jsonl")}


def stats_of(runs: Path, name: str):
    return run_stats(load_run(runs / name))


def test_pipeline_run_numbers(runs):
    s = stats_of(runs, "pipe")
    assert (s.tasks, s.scored, s.resolved, s.rate) == (3, 3, 2, pytest.approx(2 / 3))
    assert s.stages == ["junior", "senior", "principal"]
    assert s.cost_mean == pytest.approx({"junior": 0.06, "senior": 0.08 / 3, "principal": 0.5 / 3, "total": 0.76 / 3})
    assert s.cost_median == pytest.approx({"junior": 0.06, "senior": 0.02, "principal": 0.10, "total": 0.20})
    assert s.cost_sum["total"] == pytest.approx(0.76)
    assert s.principal_share == pytest.approx(0.5 / 0.76)
    assert s.tokens_sum["junior"] == {"input": 3000, "cached": 0, "output": 300}
    assert s.tokens_mean["principal"] == {"input": 1000, "cached": 0, "output": 100}
    assert (s.seconds_mean, s.seconds_median, s.seconds_total) == (20, 20, 60)
    assert s.junior_exits == Counter(submitted=3, step_limit=1, cost_limit=1, runtime_error=1)
    assert s.sources == Counter(principal=2, junior_top=1)
    assert s.senior_sources == Counter(senior=1)
    assert s.errors == Counter()
    assert dict(s.categories) == {"resolved": 2, "tests_failed": 1}  # calc-1 from the prediction, the rest from eval/


def test_solo_run_costs_come_from_its_ledgers(runs):
    s = stats_of(runs, "solo")
    assert s.stages == ["solo"]
    assert s.cost_mean == pytest.approx({"solo": 0.2, "total": 0.2})
    assert s.tokens_sum["solo"] == {"input": 8000, "cached": 2000, "output": 800}
    assert s.principal_share is None
    assert (s.resolved, s.scored) == (1, 3)
    assert s.agent_exits == Counter(submitted=2, step_limit=1) and s.junior_exits == Counter()


def test_run_where_every_task_failed(runs):
    s = stats_of(runs, "failed")
    # the infra error is unscored
    assert (s.tasks, s.scored, s.resolved, s.rate, s.interval) == (2, 1, 0, 0.0, (0.0, 0.0))
    assert dict(s.categories) == {"patch_failed": 1, "infra_error": 1}
    assert s.errors == Counter({"junior stage: RuntimeError": 1, "senior stage: CostLimitExceeded": 1})
    assert s.principal_share == 0.0


def test_reused_junior_run_is_counted_and_unscored(runs):
    s = stats_of(runs, "reused")
    assert (s.tasks, s.scored, s.rate, s.interval) == (2, 0, None, None)
    assert s.reused_juniors == Counter(pipe=2)
    assert s.cost_mean["junior"] == pytest.approx(0.06)
    assert dict(s.categories) == {"not scored": 2}


def test_empty_run_is_all_not_available(runs):
    s = stats_of(runs, "empty")
    assert (s.tasks, s.unfinished, s.rate, s.interval, s.dollars_per_task, s.principal_share) == (0, 1, None, None,
                                                                                                   None, None)
    table = overview([s], None)
    assert {cell for row in table.rows[2:] for cell in row[1:]} <= {"n/a", "$0.0000"}


def test_missing_run_directory_is_a_clear_error(tmp_path):
    from pipeline.errors import SwepipeError

    with pytest.raises(SwepipeError, match="does not exist"):
        load_run(tmp_path / "nope")


def test_bootstrap_interval_is_seeded_and_brackets_the_rate():
    outcomes = [True] * 7 + [False] * 13
    low, high = bootstrap_interval(outcomes, seed=1)
    assert 0 <= low <= 7 / 20 <= high <= 1 and low < high
    assert bootstrap_interval(outcomes, seed=1) == (low, high)
    assert bootstrap_interval([]) is None
    assert bootstrap_interval([True, True]) == (1.0, 1.0)


def test_efficiency_defined_and_undefined(runs):
    solo, pipe, failed, reused = (stats_of(runs, n) for n in ("solo", "pipe", "failed", "reused"))
    assert efficiency(pipe, solo) == pytest.approx((2 / 3 - 1 / 3) / (0.76 / 3 - 0.2))  # 6.25
    assert efficiency(failed, solo) is None  # cheaper: the cost does not rise
    assert efficiency(dataclasses.replace(failed, cost_mean={"total": 0.2}), solo) is None  # same cost
    assert efficiency(reused, solo) is None  # no resolve rate
    worse = dataclasses.replace(failed, cost_mean={"total": 0.3})
    assert efficiency(worse, solo) == pytest.approx((0 - 1 / 3) / 0.1)  # dearer and worse: negative
    assert efficiency_cell(pipe, solo).startswith("+6.250 per $")
    assert efficiency_cell(failed, solo) == "undefined (cost does not rise)"
    assert efficiency_cell(solo, solo) == "baseline"


def test_error_kind_keeps_the_stable_head():
    assert error_kind("junior stage: RuntimeError: boom: 3") == "junior stage: RuntimeError"
    assert error_kind("principal call failed: timeout") == "principal call failed"
    assert error_kind("solo: RuntimeError: no container") == "solo: RuntimeError"


def test_report_files_are_written_into_the_first_run(runs, patches, tmp_path):
    report = build_report([runs / "pipe", runs / "failed", runs / "reused", runs / "empty"], patches,
                          baseline=runs / "solo")
    assert [r.run_id for r in report.runs] == ["solo", "pipe", "failed", "reused", "empty"]
    assert [c.run_id for c in report.coverage] == ["pipe"]
    written = write_report(report, runs / "pipe", tmp_path / "out" / "report.html")
    names = sorted(p.name for p in (runs / "pipe" / "figures").iterdir())
    assert names == ["cost-failed.png", "cost-pipe.png", "cost-reused.png", "cost-solo.png", "coverage-pipe.png",
                     "pareto.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in (runs / "pipe" / "figures").iterdir())
    markdown = (runs / "pipe" / "report.md").read_text()
    assert "| resolved (95% CI) | 1/3 = 33.3% [" in markdown and "2/3 = 66.7% [" in markdown
    assert "undefined (cost does not rise)" in markdown and "+6.250 per $" in markdown
    assert "![Coverage against pool size: pipe](figures/coverage-pipe.png)" in markdown
    page = (tmp_path / "out" / "report.html").read_text()
    assert page == (runs / "pipe" / "report.html").read_text() and written["report.md"].exists()
    assert page.count('src="data:image/png;base64,') == 6
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing to fetch: opens offline


def test_report_without_gold_patches_or_finished_tasks(runs):
    report = build_report([runs / "empty"], None)
    assert report.coverage == [] and "Coverage n/a" in report.notes[0]
    write_report(report, runs / "empty")
    markdown = (runs / "empty" / "report.md").read_text()
    assert "No finished task" in markdown and "## Figures" not in markdown
    assert not (runs / "empty" / "figures").exists()


def swepipe(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"COLUMNS": "250", "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "MPLCONFIGDIR": str(tmp_path / "mpl"),
           "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=env, timeout=120)


def test_report_command(runs, tmp_path):
    html = tmp_path / "page.html"
    done = swepipe(tmp_path, "report", str(runs / "pipe"), str(runs / "failed"), str(runs / "empty"),
                   "--baseline", str(runs / "solo"), "--html", str(html), "--dataset", str(runs / "tasks.jsonl"))
    assert done.returncode == 0, done.stderr
    assert "+6.250 per $" in done.stdout and "undefined (cost does not rise)" in done.stdout
    assert "Coverage of the gold patch: pipe" in done.stdout
    assert (html.exists() and (runs / "pipe" / "report.md").exists()
            and (runs / "pipe" / "figures" / "pareto.png").exists())


def test_report_command_on_an_empty_run_with_an_unreadable_dataset(runs, tmp_path):
    done = swepipe(tmp_path, "report", str(runs / "empty"), "--dataset", str(tmp_path / "missing.jsonl"))
    assert done.returncode == 0, done.stderr
    assert "no coverage" in done.stdout and "n/a" in done.stdout
    assert (runs / "empty" / "report.md").exists()


def test_coverage_command(runs, tmp_path):
    done = swepipe(tmp_path, "coverage", str(runs / "pipe"), "--dataset", str(runs / "tasks.jsonl"))
    assert done.returncode == 0, done.stderr
    first = next(line for line in done.stdout.splitlines() if line.startswith("│ 1 "))
    assert "75.0%" in first  # calc-1 half the orderings, calc-2 always
    assert "demo__calc-1" in done.stdout and "1 task(s): no junior pool" in done.stdout
