"""Every file a run writes is named once, in pipeline/rundir/layout.py: no module spells out a run file's name, and
docs/run-layout.md is what the layout gives.

The names come from the layout itself (pipeline.rundir.layout_doc lists every file its folder classes name). The source
of every module of pipeline/ is read with `ast`, and these are names made outside the layout:
- a string constant (an f-string's literal parts too) that is such a name, or ends in ``/`` and such a name;
- a name built: an f-string joined to a path with ``/`` (``folder / f"attempt-{n}"``), or a ``with_name`` or
  ``with_suffix`` given a file suffix (``.with_name(stem + ".jsonl")``);
- a message that names a run file by its path in the run (``"no junior/pool.json yet"``): say it through the
  layout (``TASK.relative(TASK.junior_files.pool)``), so that a renamed file is renamed in its messages too.
Docstrings may name files: they are read by people, not shown to them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from pipeline.rundir import layout, layout_doc

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pipeline"
# Not swepipe's own code: the bundled tasks' projects (their sources are data).
# The layout's document (pipeline/rundir/layout_doc.py): its prose names the files the layout gives.
SKIPPED = (PACKAGE / "bundled" / "tasks", PACKAGE / "rundir" / "layout.py", PACKAGE / "rundir" / "layout_doc.py")
# Constants that equal a run file's name but name something else; each says what.
ALLOWED = {
    # The official harness's files in the tests' /workspace, inside the container; the scoring folder keeps copies
    # of some under the same names, through pipeline.rundir.layout.ScoringFiles.
    ("pipeline/evaluation/protocol.py", "entryscript.sh"), ("pipeline/evaluation/protocol.py", "patch.diff"),
    ("pipeline/evaluation/protocol.py", "output.json"), ("pipeline/evaluation/protocol.py", "stdout.log"),
    ("pipeline/evaluation/protocol.py", "stderr.log"),
    # The report page's template (pipeline/report/templates/report.html), not the report written.
    ("pipeline/report/render.py", "report.html"),
    # The lock of a Ray node's own image-cache state (its session folder on the node), not of a run directory.
    ("pipeline/run/ray/node.py", ".lock"),
    # Names built outside a run directory, each in its own place:
    ("pipeline/models/local_server.py", "f'swepipe-local-model-{os.getpid()}.log'"),  # the server's log in /tmp
    ("pipeline/run/ray/node.py", "f'{self.instance_id}.json'"),  # a task's state in the node's own folder
    ("pipeline/evaluation/validate.py", "f'r{replica}'"),  # `swepipe validate`'s replicas, in its --output
    ("pipeline/interop/export.py", "f'{trajectory.agent}{TRAJECTORY_SUFFIX}'"),  # other tools' names, in an export
    ("pipeline/interop/atif_export.py", "f'{source.name}{ATIF_SUFFIX}'"),  # the same, for ATIF
    # Harbor's trial result beside an imported ATIF trajectory (<trial>/result.json), not a run's.
    ("pipeline/interop/trajectory_formats/atif_format.py", "result.json"),
}
SUFFIXES = (".json", ".jsonl", ".log", ".diff", ".md", ".html", ".txt", ".sh", ".png", ".yaml", ".journal", ".reply")


def _layout_names() -> tuple[set[str], list[re.Pattern]]:
    """The plain file names the layout gives, and patterns for the numbered or named ones (rollout-NN.json)."""
    plain, patterns = set(), []
    for path, _ in layout_doc.every_file():
        name = path.rsplit("/", 1)[-1]
        if not (Path(name).suffix or name.startswith(".")):
            continue  # a folder
        if any(mark in name for mark in ("NN", "worker-N")):
            pieces = re.split(r"NN|worker-N", name)
            patterns.append(re.compile(r"(^|/)" + r"(\d+|\*|N+|worker-\S*|)".join(map(re.escape, pieces)) + "$"))
            suffix = pieces[-1]
            if suffix.count(".") > 1:  # .trajectory.json: what names the file once its number is put before it
                plain.add(suffix)
        else:
            plain.add(name)
    return plain, patterns


def _run_file_names_in(path: Path, plain: set[str], patterns: list[re.Pattern]) -> list[tuple[int, str]]:
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    in_a_message = _message_pattern(plain)
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            found += [(side.lineno, ast.unparse(side)) for side in (node.left, node.right)
                      if isinstance(side, ast.JoinedStr)]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("with_name", "with_suffix")
              and any(isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.endswith(SUFFIXES)
                      for argument in node.args for c in ast.walk(argument))):
            found.append((node.lineno, ast.unparse(node)))
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        text = node.value
        if text in plain or any(text.endswith("/" + name) for name in plain) or any(p.search(text) for p in patterns):
            found.append((node.lineno, text))
        elif id(node) not in docstrings and in_a_message.search(text):
            found.append((node.lineno, text))
    return found


def _message_pattern(plain: set[str]) -> re.Pattern:
    """A run file's name after a folder (``junior/pool.json``, ``tasks/<id>/ledger.jsonl``), as a word of a text."""
    names = "|".join(re.escape(name) for name in sorted(plain, key=len, reverse=True) if not name.startswith("."))
    return re.compile(r"(?<![\w.-])(?:[\w<>-]+/)+(?:" + names + r")(?![\w.-])")


def test_the_layout_names_the_files_it_always_named():
    """On-disk names are the run directory's format: runs written before read the same."""
    task = layout.TaskPaths(Path("t"))
    named = {
        task.junior_files.rollout(3): "t/junior/rollout-03.json",
        task.junior_files.live_trajectory(12): "t/junior/rollout-12.trajectory.json",
        task.junior_files.pool: "t/junior/pool.json", task.senior_files.brief: "t/senior/brief.json",
        task.senior_files.context: "t/senior/context.md",
        task.senior_files.expansion_text: "t/senior/expansion_text.json",
        task.senior_at_files(5).brief: "t/analysis/senior-at-05/brief.json",
        task.principal_files.replies: "t/principal/replies.json",
        task.principal_files.reply_journal: "t/principal/reply.journal",
        task.principal_files.result: "t/principal/result.json", task.solo_files.patch: "t/solo/patch.diff",
        task.team_files.worker_trajectory("worker-2"): "t/team/worker-2.trajectory.json",
        task.team_files.commands: "t/team/commands.jsonl", task.eval_files.result: "t/eval/result.json",
        task.candidate_result("0123abcd"): "t/candidates/0123abcd/result.json", task.ledger: "t/ledger.jsonl",
        layout.RunLayout(Path("r")).infra_errors: "r/infra_errors.jsonl",
        layout.RunLayout(Path("r")).scoring("a__b-1").result: "r/eval/a__b-1/result.json",
        layout.reply_journal(Path("t/solo/trajectory.json")): "t/solo/trajectory.reply",
    }
    assert {str(path): expected for path, expected in named.items()} == {expected: expected
                                                                         for expected in named.values()}
    assert layout.rollout_file("rollout-07.json") == (7, False)
    assert layout.rollout_file("rollout-07.trajectory.json") == (7, True)  # an older swepipe's live trajectory
    assert layout.rollout_file("rollout-07.trajectory.jsonl") == (7, True)  # its journal, today's
    assert layout.rollout_file("rollout-07.jsonl") is None
    assert layout.rollout_file("rollout-07.json.tmp") is None


def test_no_module_spells_out_a_run_file_name():
    plain, patterns = _layout_names()
    assert {"result.json", "trajectory.json", "brief.json", "pool.json", ".trajectory.json"} <= plain
    spelled, allowed = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(path == skipped or path.is_relative_to(skipped) for skipped in SKIPPED):
            continue
        module = path.relative_to(ROOT).as_posix()
        for line, text in _run_file_names_in(path, plain, patterns):
            if (module, text) in ALLOWED:
                allowed.add((module, text))
            else:
                spelled.append(f"{module}:{line}: {text!r}")
    assert allowed == ALLOWED, f"allowed but no longer there (take them off ALLOWED): {ALLOWED - allowed}"
    assert not spelled, ("run-file names spelled out of pipeline/rundir/layout.py (name them there, and use "
                         "RunLayout / TaskPaths):\n" + "\n".join(spelled))


@pytest.mark.parametrize("text", ["result.json", "senior/brief.json", "rollout-*.json", "rollout-", "x/eval.json"])
def test_the_scan_finds_a_run_file_name_and_only_that(tmp_path, text):
    plain, patterns = _layout_names()
    module = tmp_path / "module.py"
    module.write_text(f"path = root / {text!r}\nother = f'{{name}}.trajectory.json'\n", encoding="utf-8")
    found = [value for _, value in _run_file_names_in(module, plain, patterns)]
    shown = text in ("result.json", "senior/brief.json", "rollout-*.json")
    assert sorted(found) == sorted(([text] if shown else []) + [".trajectory.json"])


def test_the_scan_finds_names_built_and_named_in_messages(tmp_path):
    plain, patterns = _layout_names()
    module = tmp_path / "module.py"
    module.write_text(
        '"""A docstring may say junior/pool.json."""\n'
        "again = folder / f'attempt-{number}'\n"
        "journal = path.with_name(path.stem + '.jsonl')\n"
        "other = path.with_name(path.name + SUFFIX)\n"
        "said = f'no junior/pool.json yet: {names}'\n"
        "fine = f'the pool.json of {name} and runs/<id>/'\n", encoding="utf-8")
    found = {line: value for line, value in _run_file_names_in(module, plain, patterns)}
    assert found == {2: "f'attempt-{number}'", 3: "path.with_name(path.stem + '.jsonl')",
                     5: "no junior/pool.json yet: "}


def test_the_run_layout_document_is_what_the_layout_gives():
    """docs/run-layout.md is generated (python -m pipeline.rundir.layout_doc): it cannot drift from the layout."""
    assert layout_doc.main(["--check"]) == 0


def test_every_file_of_the_document_says_what_it_holds():
    files, _ = layout_doc.entries(layout.RunLayout(Path("run")), layout_doc.ROOT)
    assert len(files) > 40
    assert all(doc for _, doc in files)
    document = layout_doc.render()
    for name in ("rollout-NN.json", "rollout-NN.trajectory.json", "senior-at-NN/", "worker-N.trajectory.json",
                 "<key>/", "<instance_id>/", "reply.journal", "expansion_by_candidate.json"):
        assert name in document


def test_a_file_named_without_saying_what_it_holds_is_refused():
    class Extra(layout.JuniorFiles):
        @property
        def notes(self) -> Path:
            return self.root / "notes.json"

    with pytest.raises(TypeError, match="Extra.notes"):
        layout_doc.entries(Extra(Path("junior")), "junior")
