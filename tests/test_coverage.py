"""Coverage of the gold patch against run directories built by hand, with every number worked out below."""

import json
from pathlib import Path

import pytest

from pipeline.report.coverage import gold_edits, run_coverage
from pipeline.report.load import load_run
from pipeline.report.tables import coverage_by_task, coverage_table

# Base commit: pkg/a.py line n is "line n" except 11 and 21; pkg/b.py line n is "bn" except line 8.
A = {n: f"line {n}" for n in range(1, 31)} | {11: "old11", 21: "old21"}
B = {n: f"b{n}" for n in range(1, 11)} | {8: "    return None"}

# Gold: changes a.py:11 and a.py:21 (plus one added line), and adds a line to b.py whose text already
# exists in b.py (line 8), so the context text can hold it.
GOLD = """diff --git a/pkg/a.py b/pkg/a.py
--- a/pkg/a.py
+++ b/pkg/a.py
@@ -10,3 +10,3 @@
 line 10
-old11
+new11
 line 12
@@ -20,3 +20,4 @@
 line 20
-old21
+new21
+extra
 line 22
diff --git a/pkg/b.py b/pkg/b.py
--- a/pkg/b.py
+++ b/pkg/b.py
@@ -5,2 +5,3 @@
 b5
+  return  None
 b6
"""
# Candidate X (rollout 0) fixes a.py:11; Y (rollout 1) fixes a.py:21; rollout 2 leaves nothing.
X = """diff --git a/pkg/a.py b/pkg/a.py
--- a/pkg/a.py
+++ b/pkg/a.py
@@ -9,5 +9,5 @@
 line 9
 line 10
-old11
+new11
 line 12
 line 13
"""
Y = """diff --git a/pkg/a.py b/pkg/a.py
--- a/pkg/a.py
+++ b/pkg/a.py
@@ -19,4 +19,4 @@
 line 19
 line 20
-old21
+new21
 line 22
"""


def tokens(*texts: str) -> float:
    return sum((len(t) + 1) / 4 for t in texts)


def write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))


def render(file: str, lines: dict[int, str], start: int, end: int) -> str:
    width = len(str(end))
    body = "\n".join(f"{n:>{width}} | {lines[n]}" for n in range(start, end + 1))
    return f"### {file}:{start}-{end}\nwhy\n```\n{body}\n```\n"


def candidate(key: str, patch: str, rollouts: list[int], start: int, length: int) -> dict:
    return {"key": key, "patch": patch, "test_patch": "", "votes": len(rollouts), "rollouts": rollouts,
            "files": ["pkg/a.py"], "functions": [], "hunks": [{"file": "pkg/a.py", "old_start": start,
                                                               "old_lines": length, "function": None}]}


def make_run(root: Path, show_candidates: int = 0) -> Path:
    task = root / "tasks" / "t1"
    write(root / "config.yaml", f"principal:\n  show_candidates: {show_candidates}\n")
    write(root / "predictions.jsonl",
          json.dumps({"instance_id": "t1", "strategy": "pipeline", "model_patch": ""}) + "\n")
    write(task / "junior" / "pool.json", {"instance_id": "t1", "rollouts": 3, "empty": [2], "unparsable": [],
                                          "candidates": [candidate("X", X, [0], 9, 5), candidate("Y", Y, [1], 19, 4)]})
    write(task / "senior" / "expansion_by_candidate.json", {
        "X": [{"file": "pkg/b.py", "start": 1, "end": 10, "kind": "definition"}],
        "Y": [{"file": "pkg/a.py", "start": 20, "end": 25, "kind": "caller"}]})
    write(task / "senior" / "brief.json", {"analysis": "", "spans": [], "source": "senior", "context_tokens": 123,
                                           "context_spans": [{"file": "pkg/a.py", "start": 9, "end": 13, "reason": ""},
                                                             {"file": "pkg/b.py", "start": 1, "end": 10,
                                                              "reason": ""}]})
    write(task / "senior" / "context.md", render("pkg/a.py", A, 9, 13) + "\n" + render("pkg/b.py", B, 1, 10))
    return root


def values(points, metric):
    return [getattr(p, metric) for p in points]


def test_gold_edits_are_source_side_removed_lines_and_normalised_added_text():
    gold = gold_edits(GOLD)
    assert gold.removed == {("pkg/a.py", 11), ("pkg/a.py", 21)}
    assert gold.added == {("pkg/a.py", "new11"), ("pkg/a.py", "new21"), ("pkg/a.py", "extra"),
                          ("pkg/b.py", "return None")}
    assert gold.files == {"pkg/a.py", "pkg/b.py"}


def test_curves_with_and_without_the_senior_match_the_hand_count(tmp_path):
    result = run_coverage(load_run(make_run(tmp_path / "run")), {"t1": GOLD})
    assert result.skipped == {}
    (task,) = result.tasks
    assert (task.rollouts, task.orderings, task.gold_removed, task.gold_added, task.gold_files) == (3, 6, 2, 4, 2)
    # Without: k=1 is X, Y or nothing (1/2, 1/2, 0 removed; 1/4, 1/4, 0 added); k=2 is {X,Y}, {X}, {Y}.
    assert values(task.without, "removed") == pytest.approx([1 / 3, 2 / 3, 1])
    assert values(task.without, "added") == pytest.approx([1 / 6, 1 / 3, 1 / 2])
    assert values(task.without, "files") == [0, 0, 0]  # b.py is never in a candidate
    # With: X's expansion brings b.py, whose line 8 holds the added "return None"; Y's adds a.py:20-25 only.
    assert values(task.with_senior, "removed") == pytest.approx([1 / 3, 2 / 3, 1])
    assert values(task.with_senior, "added") == pytest.approx([1 / 4, 1 / 2, 3 / 4])
    assert values(task.with_senior, "files") == pytest.approx([1 / 3, 2 / 3, 1])
    # The context sent: a.py:9-13 and b.py:1-10, no candidate shown to the principal.
    assert (task.final.removed, task.final.added, task.final.files, task.final.tokens) == (0.5, 0.25, 1.0, 123.0)


def test_context_tokens_are_characters_over_four_with_unknown_lines_estimated(tmp_path):
    (task,) = run_coverage(load_run(make_run(tmp_path / "run")), {"t1": GOLD}).tasks
    hunk_x = tokens(*(A[n] for n in range(9, 14))) + tokens("new11")
    hunk_y = tokens(*(A[n] for n in range(19, 23))) + tokens("new21")
    assert task.without[-1].tokens == pytest.approx(hunk_x + hunk_y)
    assert task.without[-1].estimated == 0
    known = [A[n] for n in (*range(9, 14), *range(19, 23))] + list(B.values())
    per_line = tokens(*known) / len(known)  # a.py:23-25 appear nowhere in the run
    expected = tokens(*known) + 3 * per_line + tokens("new11", "new21")
    assert task.with_senior[-1].tokens == pytest.approx(expected)
    assert task.with_senior[-1].estimated == pytest.approx(3 * per_line / expected)


def test_candidates_shown_to_the_principal_count_for_the_final_context(tmp_path):
    (task,) = run_coverage(load_run(make_run(tmp_path / "run", show_candidates=1)), {"t1": GOLD}).tasks
    assert task.final.added == 0.5  # X's "new11" besides b.py's "return None"
    assert task.final.tokens == pytest.approx(123 + tokens("new11"))


def test_more_than_six_rollouts_are_sampled_with_a_seed(tmp_path):
    # Eight rollouts, each fixing its own line of a 16-line file: any k rollouts cover exactly k/8 of it.
    gold_hunks, candidates = [], []
    for i in range(8):
        line = 2 * i + 1
        gold_hunks.append(f"@@ -{line},1 +{line},1 @@\n-old{line}\n+new{line}\n")
        candidates.append(candidate(f"c{i}", f"--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -{line},1 +{line},1 @@\n"
                                              f"-old{line}\n+new{line}\n", [i], line, 1))
    gold = "--- a/pkg/a.py\n+++ b/pkg/a.py\n" + "".join(gold_hunks)
    root = tmp_path / "run"
    write(root / "predictions.jsonl", json.dumps({"instance_id": "t8"}) + "\n")
    write(root / "tasks" / "t8" / "junior" / "pool.json", {"rollouts": 8, "empty": [], "unparsable": [],
                                                           "candidates": candidates})
    first = run_coverage(load_run(root), {"t8": gold}, seed=3)
    (task,) = first.tasks
    assert (task.rollouts, task.orderings) == (8, 200)
    assert values(task.without, "removed") == pytest.approx([k / 8 for k in range(1, 9)])
    assert values(task.without, "added") == pytest.approx([k / 8 for k in range(1, 9)])
    assert task.final is None  # no brief
    again = run_coverage(load_run(root), {"t8": gold}, seed=3)
    assert again.tasks[0].without == task.without


def test_run_means_skip_what_is_undefined_and_say_why(tmp_path):
    root = make_run(tmp_path / "run")
    added_only = "--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -10,2 +10,3 @@\n line 10\n+new11\n old11\n"
    extra = [{"instance_id": "t2"}, {"instance_id": "t3"}, {"instance_id": "t4"}, {"instance_id": "t5"}]
    with (root / "predictions.jsonl").open("a") as handle:
        handle.writelines(json.dumps(p) + "\n" for p in extra)
    pool = json.loads((root / "tasks" / "t1" / "junior" / "pool.json").read_text())
    write(root / "tasks" / "t2" / "junior" / "pool.json", pool)  # gold only adds: removed coverage undefined
    write(root / "tasks" / "t5" / "junior" / "pool.json", pool)
    result = run_coverage(load_run(root), {"t1": GOLD, "t2": added_only, "t3": GOLD, "t5": ""})
    assert result.skipped == {"t3": "no junior pool", "t4": "not in the dataset", "t5": "empty gold patch"}
    t2 = next(t for t in result.tasks if t.instance_id == "t2")
    assert values(t2.without, "removed") == [None, None, None]
    # The mean over tasks of removed coverage is t1's alone; added coverage averages both tasks.
    assert result.curve("without", "removed") == [(1, pytest.approx(1 / 3), 1), (2, pytest.approx(2 / 3), 1),
                                                  (3, pytest.approx(1.0), 1)]
    t2_added = values(t2.without, "added")
    assert t2_added == pytest.approx([1 / 3, 2 / 3, 1])  # "new11" comes with X
    assert [v for _, v, _ in result.curve("without", "added")] == pytest.approx(
        [(a + b) / 2 for a, b in zip([1 / 6, 1 / 3, 1 / 2], t2_added)])
    table = coverage_table(result)
    assert table.rows[-1][0] == "sent (k=3, 1 task)"  # t2 has no brief
    assert any("1 task(s): no junior pool" in note for note in table.notes)
    assert len(coverage_by_task(result).rows) == 2


def test_a_run_without_pools_has_no_coverage_and_says_so(tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    result = run_coverage(load_run(root), {"t1": GOLD})
    assert result.tasks == [] and result.max_k == 0 and result.final("added") == (None, 0)
    table = coverage_table(result)
    assert table.rows == [] and any("n/a" in note for note in table.notes)
