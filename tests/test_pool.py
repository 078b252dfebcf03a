"""The candidate pool: parsing, cleaning, de-duplication and votes."""

from pipeline.juniors.pool import build_pool, is_test_path, normalise
from pipeline.records import Rollout

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
    pool = build_pool("t", [Rollout(index=0, patch=FIX), Rollout(index=1, patch=SAME_FIX_OTHER_SPACING + SCRATCH),
                            Rollout(index=2, patch=FIX + TEST_EDIT)])
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
    pool = build_pool("t", [Rollout(index=0, patch=""), Rollout(index=1, patch=SCRATCH),
                            Rollout(index=2, patch="this is not a diff"), Rollout(index=3, patch=FIX)])
    assert pool.empty == [0, 1, 2] and [c.rollouts for c in pool.candidates] == [[3]]


def test_candidates_are_ordered_by_votes():
    other = FIX.replace("a + b", "b + a")
    pool = build_pool("t", [Rollout(index=0, patch=other), Rollout(index=1, patch=FIX), Rollout(index=2, patch=FIX)])
    assert [c.votes for c in pool.candidates] == [2, 1] and pool.candidates[0].rollouts == [1, 2]


def test_test_paths_per_language():
    assert all(is_test_path(p) for p in ["tests/test_x.py", "pkg/x_test.go", "src/a.test.ts", "test/b.spec.js",
                                         "conftest.py", "spec/models/user_spec.rb", "__tests__/a.js"])
    assert not any(is_test_path(p) for p in ["src/contest.py", "latest/main.go", "src/attestation.js"])


def new_file(path, lines):
    body = "".join(f"+{line}\n" for line in lines)
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n{body}")


VIEWS_FIX = ("diff --git a/shop/views.py b/shop/views.py\n--- a/shop/views.py\n+++ b/shop/views.py\n"
             "@@ -1,5 +1,6 @@\n from shop.models import Item\n+from shop.templates import render_item\n \n \n"
             " def show(item):\n-    return str(item)\n+    return render_item(item)\n")
TEMPLATES = new_file("shop/templates.py", ["def render_item(item):", "    return f'<li>{item.name}</li>'"])
REPRODUCE = new_file("reproduce.py", ["from shop.views import show", "print(show(None))"])
BASE_FILES = ["setup.py", "README.md", "shop/__init__.py", "shop/models.py", "shop/views.py", "tests/test_views.py"]


def test_a_new_module_the_fix_imports_is_kept_and_a_root_reproduction_script_is_dropped_with_its_reason():
    records = [Rollout(index=0, patch=REPRODUCE + VIEWS_FIX + TEMPLATES), Rollout(index=1, patch=VIEWS_FIX + TEMPLATES)]
    pool = build_pool("t", records, base_files=BASE_FILES)
    assert [(c.files, c.votes) for c in pool.candidates] == [(["shop/templates.py", "shop/views.py"], 2)]
    assert "reproduce.py" not in pool.candidates[0].patch
    assert [(d["rollout"], d["file"]) for d in pool.dropped] == [(0, "reproduce.py")]
    assert "root" in pool.dropped[0]["reason"] and "references" in pool.dropped[0]["reason"]
    assert pool.to_dict()["dropped"] == pool.dropped  # into pool.json


def test_source_files_named_like_scratch_are_kept_when_the_fix_uses_them_or_they_sit_in_the_package():
    for name in ("templates", "debugger", "check_utils", "tmp_paths", "temp_units", "verify_input"):
        module = new_file(f"shop/{name}.py", ["def render_item(item):", "    return item"])
        fix = VIEWS_FIX.replace("shop.templates", f"shop.{name}")
        for base in (BASE_FILES, None):  # with the base commit's list, and from the patch alone
            candidate = normalise(fix + module, base_files=base)
            assert candidate is not None and f"shop/{name}.py" in candidate.files, (name, base)
    # not imported, but in the package where the project's code lives: a new module (the tests may import it)
    alone = normalise(new_file("shop/debugger.py", ["def trace():", "    pass"]), base_files=BASE_FILES)
    assert alone is not None and alone.files == ["shop/debugger.py"]


def test_scratch_outside_the_source_layout_or_named_as_a_reproduction_is_dropped_unless_referenced():
    # a new top-level folder the base commit does not have, unreferenced: scratch
    notes = new_file("scratch_area/try_it.py", ["import shop", "print(shop)"])
    # a root script in a project whose code lives in shop/: scratch, unless the fix uses it
    helper_at_root = new_file("debug_helpers.py", ["def dump_state(x):", "    print(x)"])
    pool = build_pool("t", [Rollout(index=0, patch=VIEWS_FIX + TEMPLATES + notes + helper_at_root),
                            Rollout(index=1, patch=new_file("shop/reproduce_issue.py", ["print(1)"])),
                            Rollout(index=2, patch=VIEWS_FIX + TEMPLATES + new_file("shop/patch.py.orig", ["x"])
                             + new_file("shop/__pycache__/views.cpython-311.pyc", ["x"]))], base_files=BASE_FILES)
    assert [c.rollouts for c in pool.candidates] == [[0, 2]] and pool.empty == [1]
    reasons = {(d["rollout"], d["file"]): d["reason"] for d in pool.dropped}
    assert set(reasons) == {(0, "scratch_area/try_it.py"), (0, "debug_helpers.py"), (1, "shop/reproduce_issue.py"),
                            (2, "shop/patch.py.orig"), (2, "shop/__pycache__/views.cpython-311.pyc")}
    assert "folder the base commit does not have" in reasons[(0, "scratch_area/try_it.py")]
    assert "reproduction" in reasons[(1, "shop/reproduce_issue.py")]
    assert "artefact" in reasons[(2, "shop/patch.py.orig")] and "cache" in reasons[
        (2, "shop/__pycache__/views.cpython-311.pyc")]
    # the same root helper, called by the fix, is part of it
    uses_helper = VIEWS_FIX.replace("+1,6 @@", "+1,7 @@").replace("+    return render_item(item)",
                                                                   "+    dump_state(item)\n+    return str(item)")
    candidate = normalise(uses_helper + helper_at_root, base_files=BASE_FILES)
    assert candidate is not None and candidate.files == ["debug_helpers.py", "shop/views.py"]


def test_rollout_records_base_entries_tell_a_new_top_level_folder_from_a_package_subfolder():
    plugin = new_file("shop/plugins/csv_export.py", ["def export(rows):", "    return rows"])
    stray = new_file("tools/try.py", ["print(1)"])
    records = [Rollout(index=0, patch=VIEWS_FIX + plugin + stray,
                base_entries=["README.md", "setup.py", "shop/", "shop/__init__.py", "shop/views.py"])]
    pool = build_pool("t", records)
    assert pool.candidates[0].files == ["shop/plugins/csv_export.py", "shop/views.py"]
    assert [d["file"] for d in pool.dropped] == ["tools/try.py"]


PY_BLOCK = """diff --git a/calc/core.py b/calc/core.py
--- a/calc/core.py
+++ b/calc/core.py
@@ -10,4 +10,4 @@ class Calc:
     def total(self, items):
         for item in items:
             self.count += 1
-        self.sum += item
+            self.sum += item
"""


def test_a_python_reindent_is_a_fix_and_two_indentations_are_two_candidates():
    candidate = normalise(PY_BLOCK)
    assert candidate is not None and candidate.files == ["calc/core.py"]
    assert [d["reason"] for d in build_pool("t", [Rollout(index=0, patch=PY_BLOCK)]).dropped] == []
    other = PY_BLOCK.replace("+            self.sum += item", "+                self.sum += item")
    tabs = PY_BLOCK.replace("+            self.sum += item", "+\t\t\tself.sum += item")
    pool = build_pool("t", [Rollout(index=0, patch=PY_BLOCK), Rollout(index=1, patch=other),
                            Rollout(index=2, patch=PY_BLOCK.replace("item\n", "item   \n")),  # trailing spaces only
                            Rollout(index=3, patch=tabs)])
    assert [c.rollouts for c in pool.candidates] == [[0, 2], [1], [3]]
    yaml_reindent = ("diff --git a/conf/app.yml b/conf/app.yml\n--- a/conf/app.yml\n+++ b/conf/app.yml\n"
                     "@@ -1,2 +1,2 @@\n server:\n-port: 80\n+  port: 80\n")
    assert normalise(yaml_reindent) is not None
    makefile = ("diff --git a/Makefile b/Makefile\n--- a/Makefile\n+++ b/Makefile\n@@ -1,2 +1,2 @@\n all:\n"
                "-        cc main.c\n+\tcc main.c\n")
    assert normalise(makefile) is not None


JS_FIX = """diff --git a/src/cart.js b/src/cart.js
--- a/src/cart.js
+++ b/src/cart.js
@@ -1,3 +1,3 @@
 function total(items) {
-  return items.length;
+  return items.reduce((a, b) => a + b.price, 0);
 }
"""


def test_in_other_languages_indentation_does_not_count():
    reindented = JS_FIX.replace("+  return items.reduce", "+      return items.reduce")
    pool = build_pool("t", [Rollout(index=0, patch=JS_FIX), Rollout(index=1, patch=reindented)])
    assert [c.rollouts for c in pool.candidates] == [[0, 1]]
    js_reindent_only = ("diff --git a/src/a.js b/src/a.js\n--- a/src/a.js\n+++ b/src/a.js\n@@ -1,2 +1,2 @@\n"
                        " if (x) {\n-y();\n+    y();\n")
    pool = build_pool("t", [Rollout(index=0, patch=js_reindent_only)])
    assert pool.empty == [0] and pool.dropped[0]["file"] == "src/a.js" and "whitespace" in pool.dropped[0]["reason"]


def spec_edit(path):
    return (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,2 +1,2 @@\n def load(x):\n"
            "-    return x\n+    return dict(x)\n")


def test_spec_and_testing_folders_are_source_unless_they_hold_tests():
    # an OpenAPI spec loader in a Python project: spec/ is code
    python_base = ["setup.py", "api/__init__.py", "api/spec/__init__.py", "api/spec/loader.py", "tests/test_api.py"]
    candidate = normalise(spec_edit("api/spec/loader.py"), base_files=python_base)
    assert candidate is not None and candidate.files == ["api/spec/loader.py"] and candidate.test_patch == ""
    go_base = ["go.mod", "pkg/testing/fake.go", "pkg/server.go"]
    assert normalise(spec_edit("pkg/testing/fake.go"), base_files=go_base).files == ["pkg/testing/fake.go"]
    assert not is_test_path("api/spec/loader.py", python_base) and not is_test_path("api/spec/loader.py")
    # a Ruby project's spec/ holds *_spec.rb files: its helpers are test code
    ruby_base = ["lib/shop.rb", "spec/spec_helper.rb", "spec/models/cart_spec.rb"]
    assert is_test_path("spec/spec_helper.rb", ruby_base) and is_test_path("spec/models/cart_spec.rb")
    fix_and_helper = spec_edit("lib/shop.rb") + spec_edit("spec/spec_helper.rb")
    candidate = normalise(fix_and_helper, base_files=ruby_base)
    assert candidate.files == ["lib/shop.rb"] and "spec/spec_helper.rb" in candidate.test_patch
    # the same from a rollout's own look at the base commit
    pool = build_pool("t", [Rollout(index=0, patch=fix_and_helper, base_entries=["spec/models/cart_spec.rb"])])
    assert pool.candidates[0].files == ["lib/shop.rb"]
    go_tests = ["pkg/testing/fake.go", "pkg/testing/fake_test.go"]
    assert is_test_path("pkg/testing/fake.go", go_tests) and not is_test_path("pkg/testing/fake.go", go_base)


def test_without_scratch_leaves_out_the_scratch_files_and_keeps_the_rest_byte_for_byte():
    from pipeline.juniors.pool import without_scratch

    fix = "diff --git a/pkg/calc.py b/pkg/calc.py\n--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -1 +1 @@\n-a\xa0\n+b\n"
    scratch = ("diff --git a/reproduce_bug.py b/reproduce_bug.py\nnew file mode 100644\n--- /dev/null\n"
               "+++ b/reproduce_bug.py\n@@ -0,0 +1 @@\n+print(1)\n")
    helper = ("diff --git a/pkg/helpers.py b/pkg/helpers.py\nnew file mode 100644\n--- /dev/null\n"
              "+++ b/pkg/helpers.py\n@@ -0,0 +1 @@\n+def h(): pass\n")
    uses = ("diff --git a/pkg/main.py b/pkg/main.py\n--- a/pkg/main.py\n+++ b/pkg/main.py\n@@ -1 +1 @@\n-x\n"
            "+from pkg.helpers import h\n")
    patch, left_out = without_scratch(fix + scratch + helper + uses, ["pkg/", "pkg/calc.py", "pkg/main.py"])
    assert patch == fix + helper + uses and list(left_out) == ["reproduce_bug.py"]
    assert without_scratch(fix, None) == (fix, {}) and without_scratch("not a patch", None) == ("not a patch", {})
