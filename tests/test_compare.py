"""`swepipe compare` on hand-built runs whose per-task outcomes are known; figures worked out by hand."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.analysis.compare import compare_pair, compare_tables, mcnemar_exact
from pipeline.analysis.load import load_run


def make_run(root: Path, verdicts: dict[str, bool | None], cost: float, editor: bool) -> Path:
    root.mkdir(parents=True)
    (root / "config.yaml").write_text(yaml.safe_dump({"limits": {"editor": editor}}))
    (root / "predictions.jsonl").write_text("".join(
        json.dumps({"instance_id": task, "model_patch": "x", "strategy": "solo", "resolved": verdict,
                    "cost": {"solo": cost, "total": cost}}) + "\n" for task, verdict in verdicts.items()))
    return root


# Ten tasks both scored: A resolves t0-t5, B resolves t0-t3 and t6-t9; A also scored "a-only", which B lacks;
# "unscored" has no verdict in B (an infrastructure error).
A = {**{f"t{n}": n <= 5 for n in range(10)}, "a-only": True, "unscored": True}
B = {**{f"t{n}": n <= 3 or n >= 6 for n in range(10)}, "unscored": None}
META = {**{f"t{n}": ("org/left", "python") for n in range(5)}, **{f"t{n}": ("org/right", "go") for n in range(5, 10)}}


@pytest.fixture
def runs(tmp_path):
    return (make_run(tmp_path / "bash-only", A, 0.10, editor=False),
            make_run(tmp_path / "with-editor", B, 0.25, editor=True))


def test_the_exact_mcnemar_p_value_is_the_two_sided_binomial_tail():
    # 2 against 4 discordant tasks: 2 * (C(6,0) + C(6,1) + C(6,2)) / 2^6 = 2 * 22 / 64
    assert mcnemar_exact(2, 4) == pytest.approx(44 / 64) == mcnemar_exact(4, 2)
    assert mcnemar_exact(0, 10) == pytest.approx(2 / 1024)
    assert mcnemar_exact(0, 0) == 1.0 and mcnemar_exact(3, 3) == 1.0  # never above 1
    assert mcnemar_exact(1, 12) == pytest.approx(2 * (1 + 13) / 2 ** 13)
    assert math.isclose(mcnemar_exact(20, 40), 0.013, abs_tol=0.001)


def test_two_runs_compared_on_the_tasks_both_scored(runs):
    pair = compare_pair(load_run(runs[0]), load_run(runs[1]), META)
    assert (pair.tasks, pair.both, pair.only_a, pair.only_b, pair.neither) == (10, 4, 2, 4, 0)
    assert pair.p_value == pytest.approx(44 / 64)
    assert (pair.rate_a, pair.rate_b) == (pytest.approx(0.6), pytest.approx(0.8))
    assert pair.only_a_ids == ["t4", "t5"] and pair.only_b_ids == ["t6", "t7", "t8", "t9"]
    low, high = pair.rate_interval
    # The paired differences are -1 twice, +1 four times, 0 four times: mean 0.2, standard error about 0.24.
    assert -0.5 < low < 0 < 0.2 < high < 0.7  # it holds 0, as p = 0.69 says
    assert pair.dollars_interval == (pytest.approx(0.15), pytest.approx(0.15))  # B costs 0.15 more on every task
    assert pair.left_out == {"bash-only": 2, "with-editor": 0}  # a-only, and unscored in B
    assert pair.editors == ("off (bash only)", "on")
    rows = {(row.group, row.name): (row.tasks, row.rate_a, row.rate_b) for row in pair.groups}
    assert rows[("repo", "org/left")] == (5, 1.0, 0.8) and rows[("repo", "org/right")] == (5, 0.2, 0.8)
    assert rows[("language", "go")] == (5, 0.2, 0.8)
    table = {row[0]: row[1] for row in compare_tables([pair])[0].rows}
    assert table["only bash-only"] == "2" and table["exact McNemar p (two-sided)"] == "0.6875"
    assert table["file editor"] == "off (bash only) -> on"


def test_the_compare_command_prints_json_and_writes_markdown_and_html(runs, tmp_path):
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "compare", *map(str, runs), "--json",
                           "--output", str(tmp_path / "out")],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert done.returncode == 0, done.stderr
    pair = json.loads(done.stdout[done.stdout.index("{"):done.stdout.rindex("}") + 1])["pairs"][0]
    assert (pair["both"], pair["only_a"], pair["only_b"], pair["neither"]) == (4, 2, 4, 0)
    assert pair["p_value"] == pytest.approx(44 / 64)
    assert "| exact McNemar p (two-sided) | 0.6875 |" in (tmp_path / "out" / "compare.md").read_text()
    page = (tmp_path / "out" / "compare.html").read_text()
    assert "0.6875" in page and "<table" in page
    alone = subprocess.run([sys.executable, "-m", "pipeline.cli", "compare", str(runs[0])], capture_output=True,
                           text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert alone.returncode != 0 and "at least two runs" in alone.stdout + alone.stderr


def write_results(run: Path, timeout: float, image_id: str) -> None:
    for line in (run / "predictions.jsonl").read_text().splitlines():
        prediction = json.loads(line)
        folder = run / "tasks" / prediction["instance_id"] / "eval"
        folder.mkdir(parents=True)
        (folder / "result.json").write_text(json.dumps({
            "instance_id": prediction["instance_id"], "resolved": prediction["resolved"], "network": False,
            "limits": {"cpus": 1}, "scorer": {"swepipe": "0.1.0", "protocol": "swe-bench-pro-os/1",
                                             "timeout": timeout, "image_id": image_id}}))


def test_runs_scored_differently_are_said_to_be(runs):
    write_results(runs[0], 1800, "sha256:aaa")
    write_results(runs[1], 1800, "sha256:aaa")
    same = compare_pair(load_run(runs[0]), load_run(runs[1]), META)
    assert same.scoring_warnings == [] and (same.tasks, same.only_b) == (10, 4)
    for result in runs[1].glob("tasks/t[0-2]/eval/result.json"):  # three tasks: a rebuilt image, a longer limit
        data = json.loads(result.read_text())
        data["scorer"].update(timeout=3600, image_id="sha256:bbb")
        result.write_text(json.dumps(data))
    pair = compare_pair(load_run(runs[0]), load_run(runs[1]), META)
    assert len(pair.scoring_warnings) == 2
    assert "different settings" in pair.scoring_warnings[0] and "timeout 3600" in pair.scoring_warnings[0]
    assert pair.scoring_warnings[1].startswith("3 task(s) were scored in different builds of their image")
    assert compare_tables([pair])[0].notes[0].startswith("Warning: the runs were scored under different settings")


def test_a_report_of_runs_scored_under_different_profiles_warns(runs):
    """The report of two runs side by side (no baseline) says they were scored differently, as compare does."""
    from pipeline.report.build import build_report

    write_results(runs[0], 1800, "sha256:aaa")
    write_results(runs[1], 1800, "sha256:aaa")
    assert not [n for n in build_report(list(runs), None).notes if n.startswith("Warning")]
    for result in runs[1].glob("tasks/*/eval/result.json"):
        data = json.loads(result.read_text())
        data["scorer"].update(profile="official", timeout=3600)
        result.write_text(json.dumps(data))
    warnings = [n for n in build_report(list(runs), None).notes if n.startswith("Warning")]
    assert len(warnings) == 1 and "scored under different settings" in warnings[0]
    assert 'profile "official"' in warnings[0] and "timeout 3600" in warnings[0]
