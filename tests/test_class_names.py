"""One class per name across `pipeline/`: a name a reader meets in two modules means one thing.

Records keep the plain names (`pipeline.records.Brief`); an in-memory form elsewhere is named for what it is
(`BriefView` on a task page, the senior's `BriefDraft`). The classes come from the source (`ast`), nested ones
included; the bundled tasks' projects are benchmark data, not part of the package.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "pipeline"
SKIPPED_DIRS = (PACKAGE_DIR / "bundled" / "tasks",)


def class_definitions(root: Path = PACKAGE_DIR) -> dict[str, list[str]]:
    """Each class name defined under ``root`` -> where (path:line), in path order."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        if any(path.is_relative_to(skipped) for skipped in SKIPPED_DIRS):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def test_no_class_name_is_defined_twice():
    twice = {name: places for name, places in class_definitions().items() if len(places) > 1}
    assert not twice, "class names defined more than once (rename the in-memory ones for what they are):\n" + \
        "\n".join(f"  {name}: {', '.join(places)}" for name, places in sorted(twice.items()))


def test_the_scan_sees_a_duplicate(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("class Brief:\n    pass\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    class Brief:\n        pass\n")
    assert class_definitions(tmp_path / "pkg")["Brief"] == ["pkg/a.py:1", "pkg/b.py:2"]
