"""The run directory's tree, from the layout: ``python -m pipeline.rundir.layout_doc`` writes docs/run-layout.md
(``--check``: exit 1 when the file differs from what would be written), so the document names every file
pipeline.rundir.layout names, as it names it (tests/test_run_layout_names.py checks it).

Each file is a member of a folder class of pipeline.rundir.layout (a property, or a method of one index or name) that
returns a path and has a docstring: the docstring is what the document says of it. A member that returns another
folder class is a folder, described by that member's docstring (or its class's). Only folders may go without
a docstring: the plumbing the others are built from (``TaskPaths.junior`` under ``junior_files``)."""

from __future__ import annotations

import inspect
import sys
import textwrap
from pathlib import Path

from pipeline.rundir import layout
from pipeline.rundir.docgen import doc_main

DOC = Path(__file__).resolve().parents[2] / "docs" / "run-layout.md"
ROOT = "runs/<run-id>"
SWEEP_ROOT = "runs/<sweep-id>"
FOLDER_CLASSES = {cls.__name__: cls for cls in (layout.RunLayout, layout.TaskPaths, layout.JuniorFiles,
                                                layout.SeniorFiles, layout.PrincipalFiles, layout.SoloFiles,
                                                layout.ReplayFiles, layout.TeamFiles, layout.ScoringFiles,
                                                layout.ReportFiles, layout.EvalOutput, layout.SweepLayout)}
# What a member's argument stands for in the document; the value passed is a plain name that its checks accept.
SHOWN_ARGUMENTS = {"index": "NN", "k": "NN", "name": "worker-N", "key": "<key>", "instance_id": "<instance_id>",
                   "run_id": "<run-id>", "cell": "<cell>"}
DESCRIPTION_COLUMN = 33
WIDTH = 118

INTRO = """\
Every file a run writes, where it is, and what it holds. The records among them (rollouts, pool, brief, principal
result, eval result, predictions) are described field by field in docs/run-directory.md. Paths are built by
pipeline.rundir.layout only: `RunLayout` for the run, `TaskPaths` for a task, and a class per stage folder."""

OUTRO = """\
No API key is written anywhere: containers get no host environment, and every file swepipe writes
(JSON, ledger lines, `config.yaml`, `error.txt` tracebacks, reports, scoring logs) passes through a
redactor: the values of secret-named environment variables (`*_API_KEY`, `*_TOKEN`,
`AWS_SECRET_ACCESS_KEY`, `AZURE_*_KEY`, ...) and the key shapes of litellm's providers (`sk-`,
`sk-ant-`, `AIza`, `hf_`, `gsk_`, `xai-`, `AKIA...`), bearer tokens, JWTs and credentials in URLs.
Patches and code keep key-shaped test fixtures byte for byte; only the environment's values go.

While an agent's session runs, and after a kill, its trajectory is the journal of its steps beside the name
the layout gives (`trajectory.jsonl`, `rollout-NN.trajectory.jsonl`): a line per save with what changed. The
whole trajectory is written when the session ends (a junior's into its rollout record) and the journal
removed; readers fold the journal over the file (pipeline.records.trajectory).

A paid model reply is journaled before its trajectory holds it (`<trajectory>.reply` beside an agent's
trajectory, `principal/reply.journal`), so a run killed in between never pays for it twice.

A run killed mid-write is repaired when it is started again: a last line of a `.jsonl` file that
was cut short moves to `<name>.torn` (one message says so), and abandoned temporary files go. A write
that fails (the disk full, an I/O error) leaves no half line: the file is cut back to its last whole
line, and a trajectory that cannot be saved stops its agent as an infrastructure fault naming what the
write met; the next good save writes the whole trajectory, so its journal never falls out of step."""


def entries(folder, shown: str) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """(path as shown, description) of every file under ``folder`` (an instance of a folder class whose root is
    shown as ``shown``), in the order the classes name them; and the descriptions of its folders."""
    files: list[tuple[str, str]] = []
    folders: dict[str, str] = {}
    for name, member in vars(type(folder)).items():
        function = member.fget if isinstance(member, property) else member
        if name.startswith("_") or not inspect.isfunction(function):
            continue
        returns = inspect.signature(function).return_annotation
        doc = _first_paragraph(inspect.getdoc(function) or "")
        if returns not in ("Path", *FOLDER_CLASSES):
            continue
        value, placeholders = _value(folder, name, member, function)
        if value is None:
            continue
        if returns == "Path":
            if doc:
                files.append((_shown(value, folder.root, shown, placeholders), doc))
            elif Path(value.name).suffix:
                raise TypeError(f"{type(folder).__name__}.{name} names a file without saying what it holds: give it "
                                "a docstring (docs/run-layout.md shows it)")
            continue
        inner = _shown(value.root, folder.root, shown, placeholders)
        folders.setdefault(inner, doc or _first_paragraph(inspect.getdoc(type(value)) or ""))
        more_files, more_folders = entries(value, inner)
        files += more_files
        folders.update({path: text for path, text in more_folders.items() if path not in folders})
    return files, folders


def every_file() -> list[tuple[str, str]]:
    """(path as shown, description) of every file the layout names: a run's, then a sweep's."""
    return (entries(layout.RunLayout(Path("run")), ROOT)[0]
            + entries(layout.SweepLayout(Path("sweep")), SWEEP_ROOT)[0])


def render() -> str:
    lines = ["# A run on disk", "",
             "<!-- Generated from pipeline/rundir/layout.py by `python -m pipeline.rundir.layout_doc`: edit the "
             "layout's names and docstrings, not this file. -->", "", INTRO, "",
             *_block(layout.RunLayout(Path("run")), ROOT), "",
             OUTRO, "", "## A sweep on disk", "",
             *textwrap.wrap(_first_paragraph(inspect.getdoc(layout.SweepLayout) or ""), WIDTH), "",
             *_block(layout.SweepLayout(Path("sweep")), SWEEP_ROOT)]
    return "\n".join(lines) + "\n"


def _block(folder, root: str) -> list[str]:
    """The fenced tree of ``folder``'s files, its root shown as ``root``."""
    files, folders = entries(folder, root)
    tree: dict = {}
    for path, doc in files:  # a path named twice (a folder and its class, two ways to one file): its first doc
        node = tree
        for part in path.removeprefix(root + "/").split("/"):
            node = node.setdefault(part, {})
        node.setdefault("", doc)
    return ["```", f"{root}/", *_tree(tree, root, folders, 1), "```"]


def _tree(node: dict, at: str, folders: dict[str, str], depth: int) -> list[str]:
    lines = []
    for name, inner in node.items():
        if not name:
            continue
        path = f"{at}/{name}"
        children = [key for key in inner if key]
        is_folder = bool(children) or path in folders or not (Path(name).suffix or name.startswith("."))
        doc = inner.get("") or folders.get(path, "")
        lines += _line(depth, name + ("/" if is_folder else ""), doc)
        lines += _tree(inner, path, folders, depth + 1)
    return lines


def _value(folder, name: str, member, function):
    """The member's path (or folder) with its arguments shown as placeholders, and the placeholders to write
    back as the document shows them (text passed -> text shown)."""
    if isinstance(member, property):
        return getattr(folder, name), {}
    parameters = list(inspect.signature(function).parameters)[1:]
    if any(parameter not in SHOWN_ARGUMENTS for parameter in parameters):
        return None, {}
    arguments: list[object] = []
    placeholders: dict[str, str] = {}
    for parameter in parameters:
        if SHOWN_ARGUMENTS[parameter] == "NN":
            arguments.append(layout.NN)
        else:
            plain = f"shown-{parameter.replace('_', '-')}"
            arguments.append(plain)
            placeholders[plain] = SHOWN_ARGUMENTS[parameter]
    return getattr(folder, name)(*arguments), placeholders


def _shown(path: Path, root: Path, shown: str, placeholders: dict[str, str]) -> str:
    text = "/".join([shown, *path.relative_to(root).parts])
    for plain, placeholder in placeholders.items():
        text = text.replace(plain, placeholder)
    return text


def _line(depth: int, name: str, doc: str) -> list[str]:
    head = "  " * depth + name
    indent = " " * DESCRIPTION_COLUMN
    if not doc:
        return [head]
    if len(head) >= DESCRIPTION_COLUMN - 1:
        return [head, *textwrap.wrap(doc, WIDTH, initial_indent=indent, subsequent_indent=indent)]
    wrapped = textwrap.wrap(doc, WIDTH, initial_indent=head.ljust(DESCRIPTION_COLUMN), subsequent_indent=indent)
    return wrapped


def _first_paragraph(text: str) -> str:
    return " ".join(text.split("\n\n")[0].split()).replace("``", "`")


def main(argv: list[str] | None = None) -> int:
    return doc_main(argv, module="pipeline.rundir.layout_doc", doc=DOC, render=render,
                    source="pipeline/rundir/layout.py")


if __name__ == "__main__":
    sys.exit(main())
