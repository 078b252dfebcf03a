"""Coverage of the gold patch against run directories built by hand, with every number worked out below."""

import json
from pathlib import Path

import pytest

from pipeline.analysis.coverage import gold_edits, run_coverage
from pipeline.analysis.load import load_run
from pipeline.records import Rollout
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
    assert values(task.hunks, "removed") == pytest.approx([1 / 3, 2 / 3, 1])
    assert values(task.hunks, "added") == pytest.approx([1 / 6, 1 / 3, 1 / 2])
    assert values(task.hunks, "files") == [0, 0, 0]  # b.py is never in a candidate
    # With: X's expansion brings b.py, whose line 8 holds the added "return None"; Y's adds a.py:20-25 only.
    assert values(task.expansion, "removed") == pytest.approx([1 / 3, 2 / 3, 1])
    assert values(task.expansion, "added") == pytest.approx([1 / 4, 1 / 2, 3 / 4])
    assert values(task.expansion, "files") == pytest.approx([1 / 3, 2 / 3, 1])
    # The context sent: a.py:9-13 and b.py:1-10, no candidate shown to the principal.
    assert (task.final.removed, task.final.added, task.final.files, task.final.tokens) == (0.5, 0.25, 1.0, 123.0)


def test_context_tokens_are_characters_over_four_with_unknown_lines_estimated(tmp_path):
    (task,) = run_coverage(load_run(make_run(tmp_path / "run")), {"t1": GOLD}).tasks
    hunk_x = tokens(*(A[n] for n in range(9, 14))) + tokens("new11")
    hunk_y = tokens(*(A[n] for n in range(19, 23))) + tokens("new21")
    assert task.hunks[-1].tokens == pytest.approx(hunk_x + hunk_y)
    assert task.hunks[-1].estimated == 0
    known = [A[n] for n in (*range(9, 14), *range(19, 23))] + list(B.values())
    per_line = tokens(*known) / len(known)  # a.py:23-25 appear nowhere in the run
    expected = tokens(*known) + 3 * per_line + tokens("new11", "new21")
    assert task.expansion[-1].tokens == pytest.approx(expected)
    assert task.expansion[-1].estimated == pytest.approx(3 * per_line / expected)


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
    assert values(task.hunks, "removed") == pytest.approx([k / 8 for k in range(1, 9)])
    assert values(task.hunks, "added") == pytest.approx([k / 8 for k in range(1, 9)])
    assert task.final is None  # no brief
    again = run_coverage(load_run(root), {"t8": gold}, seed=3)
    assert again.tasks[0].hunks == task.hunks


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
    assert values(t2.hunks, "removed") == [None, None, None]
    # The mean over tasks of removed coverage is t1's alone; added coverage averages both tasks.
    assert result.curve("hunks", "removed") == [(1, pytest.approx(1 / 3), 1), (2, pytest.approx(2 / 3), 1),
                                                  (3, pytest.approx(1.0), 1)]
    t2_added = values(t2.hunks, "added")
    assert t2_added == pytest.approx([1 / 3, 2 / 3, 1])  # "new11" comes with X
    assert [v for _, v, _ in result.curve("hunks", "added")] == pytest.approx(
        [(a + b) / 2 for a, b in zip([1 / 6, 1 / 3, 1 / 2], t2_added, strict=True)])
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


# -- three curves: the candidates, + code expansion, + the senior model ----------------------------------------


def senior_at(root: Path, k: int, spans: list[tuple[str, int, int]], source: str = "senior") -> None:
    write(root / "tasks" / "t1" / "analysis" / f"senior-at-{k:02d}" / "brief.json",
          {"analysis": "", "spans": [], "source": source,
           "context_spans": [{"file": f, "start": s, "end": e, "reason": ""} for f, s, e in spans]})


def test_three_curves_and_the_senior_lift_on_the_same_rollouts(tmp_path):
    root = make_run(tmp_path / "run")
    senior_at(root, 1, [("pkg/a.py", 19, 23)])  # rollout 0 is X (a.py:11): the senior finds a.py:21 too
    senior_at(root, 2, [("pkg/b.py", 1, 3)], source="expansion")  # adds nothing new
    senior_at(root, 4, [("pkg/a.py", 1, 30)])  # above K = 3: not a point
    write(root / "tasks" / "t1" / "analysis" / "senior-at-05" / "brief.json", "{not json")
    result = run_coverage(load_run(root), {"t1": GOLD})
    (task,) = result.tasks
    assert sorted(task.senior) == [1, 2, 3]  # k = 3 is the run's own brief
    # k=1, rollout 0 (X): '+exp.' is a.py:9-13 and b.py:1-10 -> removed 1/2; the senior adds a.py:19-23.
    assert (task.paired[1].removed, task.senior[1].removed) == (0.5, 1.0)
    assert (task.paired[1].added, task.senior[1].added) == (0.5, 0.5)  # new11 (X), b.py's "return None"
    assert task.senior[1].files == 1.0
    # k=2 and k=3: X and Y with their expansions already hold both removed lines; new21 comes with Y.
    assert (task.paired[2].removed, task.senior[2].removed, task.senior[2].added) == (1.0, 1.0, 0.75)
    assert (task.paired[3].removed, task.senior[3].removed, task.senior[3].added) == (1.0, 1.0, 0.75)
    assert task.senior_sources == {1: "senior", 2: "expansion", 3: "senior"}
    # The curves (a) and (b) still average over orderings; (c) sits on the first k rollouts with its paired lift.
    assert values(task.expansion, "removed") == pytest.approx([1 / 3, 2 / 3, 1])
    assert result.senior_curve("removed") == [(1, 1.0, 0.5, 1), (2, 1.0, 0.0, 1), (3, 1.0, 0.0, 1)]

    table = coverage_table(result)
    assert table.headers[1:4] == ["rm: cand.", "rm: +exp.", "rm: +senior"]
    assert table.rows[0][1:4] == ["33.3%", "33.3%", "100.0% (+50.0 pp, 1)"]
    assert any("at most 5 lines from where the gold patch adds it" in note for note in table.notes)
    assert any("1 at k=2" in note for note in table.notes)  # the brief that fell back to the expansion
    by_task = coverage_by_task(result)
    assert by_task.headers[3:7] == ["rm: cand.", "rm: +exp.", "rm: +senior", "rm: sent"]

    from pipeline.report.figures import coverage_curves, coverage_title
    png = coverage_curves(result)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert coverage_title(result).endswith("senior model: first k rollouts, k = 1, 2, 3)")


def test_without_senior_at_runs_the_senior_is_the_point_at_k(tmp_path):
    result = run_coverage(load_run(make_run(tmp_path / "run")), {"t1": GOLD})
    assert result.senior_ks == [3]
    rows = coverage_table(result).rows
    assert rows[0][3] == "" and rows[2][3] == "100.0% (+0.0 pp, 1)"


def test_a_run_with_the_senior_switched_off_has_no_senior_point_and_says_why(tmp_path):
    """--senior-model none: the run's brief is the code expansion (source expansion), which is no senior model's
    selection and no senior that failed; 'sent' is still what the principal got."""
    root = make_run(tmp_path / "run")
    write(root / "config.yaml", "models:\n  senior: {model: none}\nprincipal:\n  show_candidates: 0\n")
    brief = json.loads((root / "tasks" / "t1" / "senior" / "brief.json").read_text())
    write(root / "tasks" / "t1" / "senior" / "brief.json",
          {**brief, "source": "expansion", "senior_error": "no senior model configured"})
    result = run_coverage(load_run(root), {"t1": GOLD})
    (task,) = result.tasks
    assert task.senior == {} and result.senior_ks == [] and result.senior_off
    assert task.final is not None and task.final.removed == 0.5  # a.py:11 of the two removed lines
    table = coverage_table(result)
    assert [row[3] for row in table.rows[:3]] == ["", "", ""]
    assert not any("gave nothing usable" in note for note in table.notes)
    assert any("senior model was switched off" in note for note in table.notes)
    from pipeline.report.figures import coverage_curves, coverage_title
    assert coverage_curves(result)[:8] == b"\x89PNG\r\n\x1a\n"
    assert coverage_title(result).endswith("senior model: switched off in this run)")


# -- added lines: a line already in the base counts only next to where the gold patch adds it -------------------

B_GOLD = """--- a/pkg/b.py
+++ b/pkg/b.py
@@ -5,2 +5,3 @@
 b5
+  return  None
 b6
"""


def base_text_run(root: Path, where: int, saved: bool = True) -> Path:
    """Candidate X edits a.py only; its code expansion is all of b.py (40 lines), whose line ``where`` already
    reads "    return None"; the base text comes from expansion_text.json (``saved``) or from nothing."""
    task = root / "tasks" / "t1"
    b_lines = {n: f"b{n}" for n in range(1, 41)} | {where: "    return None"}
    write(root / "predictions.jsonl", json.dumps({"instance_id": "t1"}) + "\n")
    write(task / "junior" / "pool.json", {"rollouts": 1, "empty": [], "unparsable": [],
                                          "candidates": [candidate("X", X, [0], 9, 5)]})
    write(task / "senior" / "expansion_by_candidate.json",
          {"X": [{"file": "pkg/b.py", "start": 1, "end": 40, "kind": "definition"}]})
    if saved:
        write(task / "senior" / "expansion_text.json",
              {"files": {"pkg/b.py": {str(n): text for n, text in b_lines.items()}}, "complete": True})
    return root


@pytest.mark.parametrize(("where", "covered"), [(8, True), (2, True), (11, True), (12, False), (35, False)])
def test_a_base_line_counts_only_next_to_where_the_gold_adds_it(tmp_path, where, covered):
    # The gold adds between b.py:5 and b.py:6: lines 0..11 are within 5 lines of that place.
    (task,) = run_coverage(load_run(base_text_run(tmp_path / "run", where)), {"t1": B_GOLD}).tasks
    assert task.hunks[0].added == 0.0  # X proposes nothing in b.py
    assert task.expansion[0].added == (1.0 if covered else 0.0)
    assert task.expansion[0].estimated == 0.0  # every expansion line's text was saved
    assert task.base_text


def test_a_line_a_candidate_proposes_counts_wherever_it_is(tmp_path):
    gold = "--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -1,1 +1,2 @@\n line 1\n+new11\n"  # far from X's hunk at 9-13
    (task,) = run_coverage(load_run(base_text_run(tmp_path / "run", 8)), {"t1": gold}).tasks
    assert task.hunks[0].added == 1.0


def test_an_old_run_without_base_text_still_reports_and_says_so(tmp_path):
    root = base_text_run(tmp_path / "run", 8, saved=False)
    result = run_coverage(load_run(root), {"t1": B_GOLD})
    (task,) = result.tasks
    assert not task.base_text and task.expansion[0].added == 0.0  # the text is nowhere in the run
    assert task.expansion[0].estimated > 0.8  # b.py's 40 lines are estimated (X's hunk is known)
    table = coverage_table(result)
    assert any("1 task(s) from a run made before the expansion's base text was saved" in n for n in table.notes)
    # What context.md showed still counts, as before.
    write(root / "tasks" / "t1" / "senior" / "context.md", render("pkg/b.py", {n: f"b{n}" for n in range(1, 11)}
                                                                  | {8: "    return None"}, 1, 10))
    (task,) = run_coverage(load_run(root), {"t1": B_GOLD}).tasks
    assert task.expansion[0].added == 1.0


# -- the expansion's base text, saved when the senior stage runs -----------------------------------------------


def test_each_candidates_expansion_keeps_the_base_text_of_its_lines_bounded(tmp_path, monkeypatch):
    from conftest import git

    from pipeline.juniors.pool import build_pool
    from pipeline.runtime.local import LocalRuntime
    from pipeline.senior import expand

    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    source = "import os\n\n\ndef area(w, h):\n    total = w + h\n    return total\n\n\ndef other():\n    return 1\n"
    (repo / "pkg" / "a.py").write_text(source)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    patch = ("diff --git a/pkg/a.py b/pkg/a.py\n--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -4,3 +4,3 @@\n def area(w, h):\n"
             "-    total = w + h\n+    total = w * h\n     return total\n")
    pool = build_pool("t", [Rollout(index=0, patch=patch, exit_reason="submitted")])
    with LocalRuntime(str(repo), git(repo, "rev-parse", "HEAD")) as runtime:
        by_key, text = expand.expansion_by_candidate(pool, runtime)
        (key,) = by_key
        assert {"file": "pkg/a.py", "start": 4, "end": 6, "kind": "hunk"} in by_key[key]
        assert text["complete"] and text["files"]["pkg/a.py"] == {"4": "def area(w, h):", "5": "    total = w + h",
                                                                  "6": "    return total"}
        expand.write_expansion_by_candidate(pool, runtime, tmp_path / "senior")
        monkeypatch.setattr(expand, "MAX_BASE_TEXT_CHARS", 20)
        _, cut = expand.expansion_by_candidate(pool, runtime)
    assert json.loads((tmp_path / "senior" / "expansion_text.json").read_text()) == text
    assert json.loads((tmp_path / "senior" / "expansion_by_candidate.json").read_text()) == by_key
    assert cut == {"files": {"pkg/a.py": {"4": "def area(w, h):"}}, "complete": False}
