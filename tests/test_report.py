"""The report over the hand-built runs of tests/fixtures/runs (see its README.md); numbers worked out by hand."""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from pipeline.analysis.load import load_run
from pipeline.analysis.stats import bootstrap_interval, efficiency, error_kind, run_stats
from pipeline.errors import SwepipeError
from pipeline.report.build import build_report, write_report
from pipeline.report.tables import efficiency_cell, exits, overview, per_task
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


def test_the_overview_shows_each_stage_s_prompt_cache_hits(runs):
    """Of the solo run's 8000 input tokens the provider read 2000 from its cache; the pipeline run had none."""
    text = "\n".join(" | ".join(row) for row in overview([stats_of(runs, "solo"), stats_of(runs, "pipe")], None).rows)
    line = next(row for row in text.splitlines() if row.startswith("prompt cache hits"))
    assert line.split(" | ")[1:] == ["solo 25.0%", "junior 0.0%, senior 0.0%, principal 0.0%"]


def test_the_exit_table_counts_each_role_s_editor_calls_and_the_share_that_failed(runs):
    """Two junior rollouts and a solo trajectory with editor calls (one refused of three, one of one); a step
    that holds something else than a list of edits counts as none."""
    ok, refused = {"command": "str_replace", "path": "calc.py", "ok": True}, \
        {"command": "str_replace", "path": "calc.py", "ok": False, "error": "old_str does not occur"}
    for number, steps in (("00", [{"edits": [ok, refused]}, {"edits": "garbage"}]), ("01", [{"edits": [ok]}])):
        path = runs / "pipe" / "tasks" / "demo__calc-1" / "junior" / f"rollout-{number}.json"
        data = json.loads(path.read_text())
        data["trajectory"]["steps"] = steps
        path.write_text(json.dumps(data))
    solo = runs / "solo" / "tasks" / "demo__calc-1" / "solo"
    solo.mkdir()
    (solo / "trajectory.json").write_text(json.dumps({"messages": [], "steps": [{"edits": [refused]}]}))
    pipe, alone = stats_of(runs, "pipe"), stats_of(runs, "solo")
    assert (pipe.edits["junior", "calls"], pipe.edits["junior", "failed"], pipe.edits["solo", "calls"]) == (3, 1, 0)
    assert (alone.edits["solo", "calls"], alone.edits["solo", "failed"], alone.edits["junior", "calls"]) == (1, 1, 0)
    rows = {row[0]: row[1:] for row in exits([pipe, alone]).rows}
    assert rows["editor calls: junior (failed)"] == ["3 (33% failed)", "0"]
    assert rows["editor calls: solo (failed)"] == ["0", "1 (100% failed)"]
    assert "editor calls: team (failed)" not in rows and "editor calls: senior (failed)" not in rows


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
    assert [row[0] for row in table.rows[:5]] == ["strategy", "pipeline variant", "history compaction", "file editor",
                                                  "tasks"]
    assert {cell for row in table.rows[5:] for cell in row[1:]} <= {"n/a", "$0.0000"}


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
    assert efficiency_cell(failed, solo) == "cheaper and worse: -33.3 pp for $0.1900/task less"
    assert efficiency_cell(solo, solo) == "baseline"


def test_error_kind_keeps_the_stable_head():
    assert error_kind("junior stage: RuntimeError: boom: 3") == "junior stage: RuntimeError"
    introduced = "1 of 1 edit blocks could not be applied (blocks are numbered in reply order):\n\nBlock 1 (x): no"
    assert error_kind(introduced) == "1 of 1 edit blocks could not be applied (blocks are numbered in reply order)"
    assert error_kind("principal call failed: timeout") == "principal call failed"
    assert error_kind("solo: RuntimeError: no container") == "solo: RuntimeError"


def test_report_files_are_written_into_the_first_run(runs, patches, tmp_path):
    report = build_report([runs / "pipe", runs / "failed", runs / "reused", runs / "empty"], patches,
                          baseline=runs / "solo")
    assert [r.run_id for r in report.runs] == ["solo", "pipe", "failed", "reused", "empty"]
    assert [c.run_id for c in report.coverage] == ["pipe"]
    written = write_report(report, runs / "pipe")
    names = sorted(p.name for p in (runs / "pipe" / "figures").iterdir())
    assert names == ["cost-failed.png", "cost-pipe.png", "cost-reused.png", "cost-solo.png", "coverage-pipe.png",
                     "pareto.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in (runs / "pipe" / "figures").iterdir())
    markdown = (runs / "pipe" / "report.md").read_text()
    assert "| resolved (95% CI) | 1/3 = 33.3% [" in markdown and "2/3 = 66.7% [" in markdown
    assert "cheaper and worse: -33.3 pp for $0.1900/task less" in markdown and "+6.250 per $" in markdown
    assert "![Coverage against pool size: pipe](figures/coverage-pipe.png)" in markdown
    # The baseline's paired comparison: each other run against solo on the tasks both scored.
    assert [(p.a, p.b) for p in report.pairs] == [("solo", "pipe"), ("solo", "failed"), ("solo", "reused"),
                                                  ("solo", "empty")]
    against = report.pairs[0]
    assert against.both + against.only_a + against.only_b + against.neither == against.tasks == 3
    assert (against.rate_a, against.rate_b) == (pytest.approx(1 / 3), pytest.approx(2 / 3))
    assert "## pipe against solo (3 tasks both scored)" in markdown and "exact McNemar p (two-sided)" in markdown
    page = (runs / "pipe" / "report.html").read_text()
    assert written["report.html"].read_text() == page and written["report.md"].exists()
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
    done = swepipe(tmp_path, "report", str(runs / "pipe"), str(runs / "failed"), str(runs / "empty"),
                   "--baseline", str(runs / "solo"), "--dataset", str(runs / "tasks.jsonl"))
    assert done.returncode == 0, done.stderr
    assert "+6.250 per $" in done.stdout and "cheaper and worse" in done.stdout
    assert "Coverage of the gold patch: pipe" in done.stdout
    assert all((runs / "pipe" / name).exists() for name in ("report.md", "report.html", "figures/pareto.png"))


def test_report_command_writes_into_its_output_folder_and_refuses_the_old_html_flag(runs, tmp_path):
    site = tmp_path / "my site"
    done = swepipe(tmp_path, "report", str(runs / "pipe"), "--output", str(site))
    assert done.returncode == 0, done.stderr
    assert {p.name for p in site.iterdir()} == {"report.md", "report.html", "report_tasks", "figures"}
    assert not (runs / "pipe" / "report.md").exists()
    old = swepipe(tmp_path, "report", str(runs / "pipe"), "--html", str(tmp_path / "page.html"))
    assert old.returncode == 2 and "--html was removed; use --output DIR" in " ".join(old.stderr.split())


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


# -- ablations, the baseline comparison and partial credit, over hand-made run directories ----------------------


def make_run(root: Path, name: str, config: dict | None, tasks: list[dict]) -> Path:
    """A run directory: config.yaml (unless None), predictions.jsonl, and each task's eval/result.json when given.
    A task: {"id", "cost" (by stage), "resolved" (the prediction's verdict, may be absent), "eval" (result.json)}."""
    run = root / name
    (run / "tasks").mkdir(parents=True)
    if config is not None:
        (run / "config.yaml").write_text(yaml.safe_dump(config))
    lines = []
    for task in tasks:
        cost = dict(task["cost"])
        prediction = {"instance_id": task["id"], "model_patch": "diff", "strategy": task.get("strategy", "pipeline"),
                      "source": "principal", "error": None, "cost": {**cost, "total": sum(cost.values())},
                      "seconds": {"junior": 1}}
        if "resolved" in task:
            prediction["resolved"] = task["resolved"]
        lines.append(json.dumps(prediction))
        (run / "tasks" / task["id"]).mkdir()
        if task.get("eval") is not None:
            (run / "tasks" / task["id"] / "eval").mkdir()
            (run / "tasks" / task["id"] / "eval" / "result.json").write_text(json.dumps(task["eval"]))
    (run / "predictions.jsonl").write_text("\n".join(lines) + "\n")
    return run


def f2p(passed: int, failed: int = 0, missing: int = 0, category: str = "tests_failed") -> dict:
    """An eval result.json with per-test outcomes, as pipeline.evaluation.runner writes it."""
    names = [f"test_{n}" for n in range(passed + failed + missing)]
    return {"resolved": category == "resolved", "category": category,
            "FAIL_TO_PASS": {"passed": names[:passed], "failed": names[passed:passed + failed],
                             "missing": names[passed + failed:]},
            "PASS_TO_PASS": {"passed": ["test_keep"], "failed": [], "missing": []}}


PIPELINE = {"strategy": "pipeline", "juniors": {"k": 10}, "models": {"junior": {"model": "cheap"},
                                                                     "senior": {"model": "mid"},
                                                                     "principal": {"model": "frontier"}}}


def with_models(**models) -> dict:
    return {**PIPELINE, "models": {**PIPELINE["models"], **{role: {"model": m} for role, m in models.items()}}}


def test_partial_credit_is_the_fail_to_pass_share_over_tasks_with_per_test_results(tmp_path):
    run = make_run(tmp_path, "credit", PIPELINE, [
        {"id": "a", "cost": {"junior": 0.1}, "eval": f2p(2, category="resolved")},  # 2/2
        {"id": "b", "cost": {"junior": 0.1}, "eval": f2p(1, failed=2, missing=1)},  # 1/4
        {"id": "c", "cost": {"junior": 0.1}, "eval": {"resolved": False, "category": "infra_error"}},  # unscored
        {"id": "d", "cost": {"junior": 0.1}, "eval": {"resolved": False, "category": "tests_failed"}},  # an old result
        {"id": "e", "cost": {"junior": 0.1}, "resolved": True},  # a verdict, no eval result
        {"id": "f", "cost": {"junior": 0.1}, "resolved": True, "eval": f2p(0, failed=3)},  # contradicts: not read
        {"id": "g", "cost": {"junior": 0.1}, "eval": f2p(0, category="tests_failed")},  # no FAIL_TO_PASS test
    ])
    loaded = load_run(run)
    assert [t.fail_to_pass for t in loaded.tasks] == [(2, 2), (1, 4), None, None, None, None, None]
    s = run_stats(loaded)
    assert s.scored == 6 and s.f2p_tasks == 2 and s.f2p_credit == pytest.approx((1 + 0.25) / 2)
    table = overview([s], None)
    row = next(r for r in table.rows if r[0].startswith("FAIL_TO_PASS"))
    assert row[1] == "62.5% (mean over 2 tasks of 6 scored)"
    tasks = per_task(loaded, s.stages)
    assert [r[2] for r in tasks.rows] == ["2/2", "1/4", "n/a", "n/a", "n/a", "n/a", "n/a"]


def test_runs_scored_before_per_test_results_show_n_a(runs):
    s = stats_of(runs, "pipe")  # eval results with a verdict only
    assert (s.f2p_credit, s.f2p_tasks) == (None, 0)
    row = next(r for r in overview([s], None).rows if r[0].startswith("FAIL_TO_PASS"))
    assert row[1] == "n/a (no per-test results)"


def test_pipeline_variant_names_each_ablation_from_the_config(tmp_path):
    from pipeline.analysis.stats import pipeline_variant

    assert pipeline_variant(PIPELINE, ["pipeline"]) == "full"
    assert pipeline_variant(with_models(senior="none"), ["pipeline"]) == "no senior"
    assert pipeline_variant(with_models(principal="None"), ["pipeline"]) == "no principal"
    assert pipeline_variant({**PIPELINE, "juniors": {"k": 0}}, ["pipeline"]) == "no juniors (k=0)"
    assert pipeline_variant({**with_models(principal="none"), "juniors": {"k": 0}}, []) == \
        "no juniors (k=0), no principal"
    assert pipeline_variant({**PIPELINE, "strategy": "vote"}, ["vote"]) == "vote"
    assert pipeline_variant({"strategy": "solo"}, ["solo"]) == "solo"
    assert pipeline_variant({"juniors": {"k": 2}}, ["pipeline"]) == "full"  # the config's default strategy
    assert pipeline_variant({**PIPELINE, "principal": {"impl": "merge_principal:MergePrincipal"}}, []) == \
        "principal plug-in merge_principal:MergePrincipal"
    assert pipeline_variant({}, ["pipeline"]) == "pipeline (no config.yaml)" and pipeline_variant({}, []) == "n/a"
    run = make_run(tmp_path, "nosenior", with_models(senior="none"), [{"id": "a", "cost": {"junior": 0.1}}])
    table = overview([run_stats(load_run(run))], None)
    assert ["pipeline variant", "no senior"] in table.rows
    assert ["history compaction", "off (whole history)"] in table.rows
    compacted = make_run(tmp_path, "compacted", {**PIPELINE, "limits": {"compact_after": 4, "compact_chars": 800}},
                         [{"id": "a", "cost": {"junior": 0.1}}])
    assert ["history compaction", "last 4 observation(s) whole, older cut to 800 + 800 characters"] in \
        overview([run_stats(load_run(compacted))], None).rows


def stats_with(base, rate: float, cost: float, run_id: str = "run"):
    return dataclasses.replace(base, run_id=run_id, rate=rate, cost_mean={**base.cost_mean, "total": cost})


def test_efficiency_says_dominates_dominated_or_the_trade_off(runs):
    solo = stats_of(runs, "solo")  # 1/3 resolved at $0.20 a task
    cell = lambda rate, cost: efficiency_cell(stats_with(solo, rate, cost), solo)  # noqa: E731
    assert cell(2 / 3, 0.10) == "dominates: +33.3 pp for $0.1000/task less"  # the method's headline case
    assert cell(1 / 3, 0.10) == "dominates: the same resolve rate for $0.1000/task less"
    assert cell(2 / 3, 0.20) == "dominates: +33.3 pp at the same cost"
    assert cell(0.0, 0.30) == "dominated: -33.3 pp for $0.1000/task more"
    assert cell(1 / 3, 0.30) == "dominated: the same resolve rate for $0.1000/task more"
    assert cell(0.0, 0.20) == "dominated: -33.3 pp at the same cost"
    assert cell(2 / 3, 0.30) == "+3.333 per $ (+33.3 pp for $0.1000/task more)"
    assert cell(0.0, 0.10) == "cheaper and worse: -33.3 pp for $0.1000/task less"
    assert cell(1 / 3, 0.2 + 1e-10) == "same cost and resolve rate"  # float noise is no difference
    assert efficiency_cell(dataclasses.replace(solo, run_id="x", rate=None), solo) == "n/a (no resolve rate)"


def test_cost_ratio_to_the_baseline(runs):
    from pipeline.analysis.stats import cost_ratio
    from pipeline.report.tables import ratio_cell

    solo = stats_of(runs, "solo")
    third = stats_with(solo, 0.5, 0.2 / 3)
    assert cost_ratio(third, solo) == pytest.approx(1 / 3) and ratio_cell(third, solo) == "0.33× (1/3.0)"
    assert ratio_cell(stats_with(solo, 0.5, 0.5), solo) == "2.50×"
    assert ratio_cell(solo, solo) == "1.00× (baseline)"
    free = stats_with(solo, 0.5, 0.0, run_id="free")
    assert cost_ratio(third, free) is None and ratio_cell(third, free) == "n/a (the baseline cost nothing)"


def test_stage_shares_of_spend(runs):
    s = stats_of(runs, "pipe")
    assert s.cost_share == pytest.approx({"junior": 0.18 / 0.76, "senior": 0.08 / 0.76, "principal": 0.5 / 0.76})
    row = next(r for r in overview([s], None).rows if r[0] == "spend by stage")
    assert row[1] == "junior 24% · senior 11% · principal 66%"


def test_report_says_a_cheaper_better_ablation_dominates_the_baseline(tmp_path):
    solo = make_run(tmp_path, "solo", {"strategy": "solo"}, [
        {"id": "a", "cost": {"solo": 0.30}, "strategy": "solo", "eval": f2p(0, failed=2)},
        {"id": "b", "cost": {"solo": 0.30}, "strategy": "solo", "eval": f2p(1, failed=1)}])
    run = make_run(tmp_path, "nosenior", with_models(senior="none"), [
        {"id": "a", "cost": {"junior": 0.05, "senior": 0.0, "principal": 0.05}, "eval": f2p(2, category="resolved")},
        {"id": "b", "cost": {"junior": 0.05, "senior": 0.0, "principal": 0.05}, "eval": f2p(1, failed=1)}])
    done = swepipe(tmp_path, "report", str(run), "--baseline", str(solo), "--dataset", str(tmp_path / "none.jsonl"))
    assert done.returncode == 0, done.stderr
    markdown = (run / "report.md").read_text()
    assert "| efficiency vs solo | baseline | dominates: +50.0 pp for $0.2000/task less |" in markdown
    assert "| $/task vs solo | 1.00× (baseline) | 0.33× (1/3.0) |" in markdown
    assert "| pipeline variant | solo | no senior |" in markdown
    assert "| FAIL_TO_PASS tests passed (partial credit) | 25.0% (mean over 2 tasks) | 75.0% (mean over 2 tasks) |" \
        in markdown
    assert "| spend by stage | solo 100% | junior 50% · senior 0% · principal 50% |" in markdown
    assert "dominates" in done.stdout


# -- reward (the study's: the share of FAIL_TO_PASS and PASS_TO_PASS tests passed) and efficiency on it ------------


def outcome(f2p_passed: int, f2p_failed: int, p2p_passed: int, p2p_failed: int, p2p_missing: int = 0) -> dict:
    """An eval result.json with per-test outcomes for both lists."""
    f2p_names = [f"test_new_{n}" for n in range(f2p_passed + f2p_failed)]
    p2p_names = [f"test_old_{n}" for n in range(p2p_passed + p2p_failed + p2p_missing)]
    resolved = not f2p_failed and not p2p_failed and not p2p_missing
    return {"resolved": resolved, "category": "resolved" if resolved else "tests_failed",
            "FAIL_TO_PASS": {"passed": f2p_names[:f2p_passed], "failed": f2p_names[f2p_passed:], "missing": []},
            "PASS_TO_PASS": {"passed": p2p_names[:p2p_passed], "failed": p2p_names[p2p_passed:p2p_passed + p2p_failed],
                             "missing": p2p_names[p2p_passed + p2p_failed:]}}


def test_reward_is_the_share_of_all_the_tasks_tests_that_passed(tmp_path):
    broken_p2p = outcome(2, 0, 3, 0)
    broken_p2p["PASS_TO_PASS"] = ["test_old_0"]  # not per-test outcomes: no reward, though FAIL_TO_PASS reads
    run = make_run(tmp_path, "reward", PIPELINE, [
        {"id": "a", "cost": {"junior": 0.1}, "eval": outcome(2, 0, 8, 0)},  # resolved: 10/10
        {"id": "b", "cost": {"junior": 0.1}, "eval": outcome(2, 0, 5, 2, p2p_missing=1)},  # F2P pass, P2P break: 7/10
        {"id": "c", "cost": {"junior": 0.1}, "eval": outcome(0, 4, 6, 0)},  # 6/10
        {"id": "d", "cost": {"junior": 0.1}, "eval": {"resolved": False, "category": "infra_error"}},  # unscored
        {"id": "e", "cost": {"junior": 0.1}, "eval": {"resolved": False, "category": "tests_failed"}},  # old result
        {"id": "f", "cost": {"junior": 0.1}, "eval": broken_p2p},
        {"id": "g", "cost": {"junior": 0.1}, "resolved": False, "eval": outcome(1, 0, 1, 0)},  # contradicts
    ])
    loaded = load_run(run)
    assert [t.reward for t in loaded.tasks] == [(10, 10), (7, 10), (6, 10), None, None, None, None]
    assert loaded.tasks[1].fail_to_pass == (2, 2)  # every new test passes, yet the task is not resolved
    s = run_stats(loaded)
    assert (s.reward_tasks, s.reward) == (3, pytest.approx((1 + 0.7 + 0.6) / 3))
    row = next(r for r in overview([s], None).rows if r[0] == "reward (tests passed)")
    assert row[1] == "76.7% (mean over 3 tasks of 6 scored)"
    table = per_task(loaded, s.stages)
    column = table.headers.index("reward (tests passed)")
    assert [r[column] for r in table.rows] == ["10/10 = 100%", "7/10 = 70%", "6/10 = 60%", "n/a", "n/a", "n/a", "n/a"]


def test_runs_scored_before_per_test_results_have_no_reward(runs):
    s = stats_of(runs, "pipe")
    assert (s.reward, s.reward_tasks) == (None, 0)
    assert next(r for r in overview([s], None).rows if r[0] == "reward (tests passed)")[1] == \
        "n/a (no per-test results)"
    solo = stats_of(runs, "solo")
    assert efficiency(s, solo, "reward") is None
    assert efficiency_cell(s, solo, "reward") == "n/a (no per-test results)"


def test_reward_efficiency_beside_the_resolve_rate_one(tmp_path):
    solo = make_run(tmp_path, "solo", {"strategy": "solo"}, [
        {"id": "a", "cost": {"solo": 0.20}, "strategy": "solo", "eval": outcome(0, 2, 8, 0)},  # 8/10
        {"id": "b", "cost": {"solo": 0.20}, "strategy": "solo", "eval": outcome(0, 2, 6, 2)}])  # 6/10
    team = make_run(tmp_path, "team", {"strategy": "team"}, [
        {"id": "a", "cost": {"lead": 0.3, "worker": 0.2}, "strategy": "team", "eval": outcome(1, 1, 8, 0)},  # 9/10
        {"id": "b", "cost": {"lead": 0.3, "worker": 0.2}, "strategy": "team", "eval": outcome(0, 2, 8, 0)}])  # 8/10
    base, s = run_stats(load_run(solo)), run_stats(load_run(team))
    assert (base.reward, s.reward) == (pytest.approx(0.7), pytest.approx(0.85))
    assert efficiency(s, base, "reward") == pytest.approx(0.15 / 0.30)  # reward per added dollar per task
    assert efficiency(s, base) == 0.0  # neither resolves a task: no resolve rate bought
    assert efficiency_cell(s, base) == "dominated: the same resolve rate for $0.3000/task more"
    assert efficiency_cell(s, base, "reward") == "+0.500 per $ (+15.0 pp for $0.3000/task more)"
    cheaper = dataclasses.replace(s, cost_mean={"total": 0.1})
    assert efficiency_cell(cheaper, base, "reward") == "dominates: +15.0 pp for $0.1000/task less"
    assert efficiency_cell(dataclasses.replace(s, reward=0.7, cost_mean={"total": 0.2}), base, "reward") == \
        "same cost and reward"
    rows = {r[0]: r[1:] for r in overview([base, s], base).rows}
    assert rows["reward efficiency vs solo"] == ["baseline", "+0.500 per $ (+15.0 pp for $0.3000/task more)"]
    assert rows["efficiency vs solo"][1] == "dominated: the same resolve rate for $0.3000/task more"


def test_outcomes_by_repository_and_language_show_where_a_run_loses(runs):
    """The pipe run: calc-1 and calc-2 resolved, lib-3 failed its tests; with the dataset's repositories the
    report counts each cause per repository and language, and a task the dataset lacks is '?'."""
    meta = {"demo__calc-1": ("demo/calc", "python"), "demo__calc-2": ("demo/calc", "python")}
    report = build_report([runs / "pipe"], None, meta=meta)
    table = next(t for t in report.tables() if t.title == "Outcomes by repository and language: pipe")
    assert table.headers[:3] == ["by", "name", "tasks"] and set(table.headers[3:]) == {"resolved", "tests_failed"}
    rows = {(row[0], row[1]): dict(zip(table.headers[2:], row[2:], strict=True)) for row in table.rows}
    assert rows[("repo", "demo/calc")] == {"tasks": "2", "resolved": "2", "tests_failed": "0"}
    assert rows[("repo", "?")] == {"tasks": "1", "resolved": "0", "tests_failed": "1"}
    assert rows[("language", "python")]["resolved"] == "2"
    assert not any(t.title.startswith("Outcomes by repository") for t in build_report([runs / "pipe"], None).tables())


def test_a_report_on_a_subset_gives_every_figure_there_and_the_full_rate_beside(runs, tmp_path):
    ids = tmp_path / "reliable.txt"
    ids.write_text("# from swepipe validate\ndemo__calc-1\n\ndemo__calc-2  # stable\nnot-in-the-run\n")
    report = build_report([runs / "pipe"], None, subset=ids)
    assert (report.stats[0].tasks, report.stats[0].resolved) == (2, 2) and report.full_stats[0].tasks == 3
    rows = {row[0]: row[1] for row in report.tables()[0].rows}
    assert rows[f"resolved (95% CI), on the subset {ids}"].startswith("2/2")
    assert rows["resolved (95% CI), on every task"].startswith("2/3")
    assert str(ids) in report.notes[0]
    ids.write_text("# nothing\n")
    with pytest.raises(SwepipeError, match="lists no instance id"):
        build_report([runs / "pipe"], None, subset=ids)
    with pytest.raises(SwepipeError, match="cannot read the id file"):
        build_report([runs / "pipe"], None, subset=tmp_path / "missing.txt")
