"""The candidate pool: parsing, cleaning, de-duplication and votes."""

from pipeline.juniors.pool import build_pool, is_test_path, normalise

FIX = """diff --git a/calc/core.py b/calc/core.py
--- a/calc/core.py
+++ b/calc/core.py
@@ -10,2 +10,2 @@ class Calc:
     def add(self, a, b):
-        return a - b
+        return a + b
"""
SAME_FIX_OTHER_SPACING = FIX.replace("+        return a + b", "+        return  a + b ")
SCRATCH = """diff --git a/reproduce_bug.py b/reproduce_bug.py
new file mode 100644
--- /dev/null
+++ b/reproduce_bug.py
@@ -0,0 +1 @@
+print(Calc().add(1, 2))
"""
TEST_EDIT = """diff --git a/tests/test_core.py b/tests/test_core.py
--- a/tests/test_core.py
+++ b/tests/test_core.py
@@ -1 +1 @@
-assert add(1, 1) == 0
+assert add(1, 1) == 2
"""
WHITESPACE_ONLY = """diff --git a/calc/util.py b/calc/util.py
--- a/calc/util.py
+++ b/calc/util.py
@@ -1,2 +1,2 @@
-def helper(x):   
+def helper(x):
     return x
"""


def test_same_fix_with_other_spacing_is_one_candidate_with_two_votes():
    pool = build_pool("t", [{"index": 0, "patch": FIX}, {"index": 1, "patch": SAME_FIX_OTHER_SPACING + SCRATCH},
                            {"index": 2, "patch": FIX + TEST_EDIT}])
    assert len(pool.candidates) == 1
    candidate = pool.candidates[0]
    assert candidate.votes == 3 and candidate.rollouts == [0, 1, 2]
    assert candidate.files == ["calc/core.py"] and candidate.functions == ["def add(self, a, b):"]
    assert candidate.hunks == [{"file": "calc/core.py", "old_start": 10, "old_lines": 2,
                                "function": "def add(self, a, b):"}]
    assert "reproduce_bug" not in candidate.patch


def test_test_edits_are_kept_apart_and_scratch_or_whitespace_alone_is_no_candidate():
    candidate = normalise(FIX + TEST_EDIT)
    assert "tests/test_core.py" in candidate.test_patch and "tests/test_core.py" not in candidate.patch
    assert normalise(SCRATCH) is None
    assert normalise(WHITESPACE_ONLY) is None
    assert normalise(TEST_EDIT) is None  # test edits alone are not a fix
    pool = build_pool("t", [{"index": 0, "patch": ""}, {"index": 1, "patch": SCRATCH},
                            {"index": 2, "patch": "this is not a diff"}, {"index": 3, "patch": FIX}])
    assert pool.empty == [0, 1, 2] and [c.rollouts for c in pool.candidates] == [[3]]


def test_candidates_are_ordered_by_votes():
    other = FIX.replace("a + b", "b + a")
    pool = build_pool("t", [{"index": 0, "patch": other}, {"index": 1, "patch": FIX}, {"index": 2, "patch": FIX}])
    assert [c.votes for c in pool.candidates] == [2, 1] and pool.candidates[0].rollouts == [1, 2]


def test_test_paths_per_language():
    assert all(is_test_path(p) for p in ["tests/test_x.py", "pkg/x_test.go", "src/a.test.ts", "test/b.spec.js",
                                         "conftest.py", "pkg/testing/helpers.go"])
    assert not any(is_test_path(p) for p in ["src/contest.py", "latest/main.go", "src/attestation.js"])
