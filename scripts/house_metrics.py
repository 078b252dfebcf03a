"""The figures issue 44's proof asks for, measured the same way on any checkout of swepipe.

    python scripts/house_metrics.py [TREE] [--layers-from DOC] [--no-run] [--fast-loop] [--list] [--json]

TREE is a checkout (default: the one this script is in); its own code is measured, with the main venv's Python
(the one running this script). What each figure counts:

- **path modules**: the modules of ``pipeline/`` one task's path touches from ``swepipe run`` to its report line.
  One bundled task (tinyq, a fix in two files) runs through ``python -m pipeline.cli run`` in a fresh interpreter
  with the scripted model (two juniors of two replies, the senior's two, the principal's one, as
  tests/test_repeats.py scripts them) in local clones (the tree's tests/local_opener.py, no Docker, no scoring).
  A module counts when a function or method defined in it runs (a profile hook on every thread records the code
  objects called); a module that is only imported does not. ``path imported`` is the wider figure: every
  ``pipeline`` module in ``sys.modules`` when the command returns.
- **dict[str, Any] annotations**: every ``dict[str, Any]`` (or ``Dict[str, Any]``) inside an annotation of
  ``pipeline/`` (parameters, returns, annotated assignments and fields; nested ones such as ``list[dict[str, Any]]``
  count once each; string annotations are parsed). A name bound to ``dict[str, Any]`` anywhere in the tree (``JSON =
  dict[str, Any]``, ``JSON: TypeAlias = ...``, ``type JSON = ...``) counts as ``dict[str, Any]`` where it is used, so
  renaming one removes nothing. Split in two: those whose data is JSON by nature (in a module ``JSON_BY_NATURE``
  names, or belonging to a name ``JSON_BY_NATURE_NAMES`` names: chat messages and tool calls, provider requests
  and responses, foreign trajectory files being parsed, JSON schemas, a record's JSON before its type checks it),
  and the rest (swepipe's own data, which records, dataclasses and TypedDicts can shape).
- **public functions returning dicts**: functions and methods whose name has no leading underscore and whose return
  annotation is a dict (``dict``, ``dict[...]``, ``Dict[...]``, or one of those ``| None``).
- **dict shims**: functions that accept a dict where a record is due: a parameter whose annotation holds, at any
  depth, a union of a dict and a type other than None, Any or object (``X | dict``, ``Callable[[], R | dict]``),
  or a function that calls ``isinstance(p, dict)`` on a parameter annotated with a record-like (capitalised) type
  and builds a record in the same function (calls ``model_validate``, ``of`` or a capitalised name). A parser of
  outside data (a parameter that is unannotated, ``Any`` or ``object``) is not a shim.
- **enums**: classes deriving (directly or through a class of the tree) from Enum, StrEnum, IntEnum, Flag, IntFlag.
- **broad handlers**: ``except Exception``, ``except BaseException`` (alone or in a tuple), a bare ``except:``, and
  ``suppress(...)`` / ``contextlib.suppress(...)`` given Exception or BaseException.
- **imports against the layer order**: the layer of every top-level module and package of ``pipeline/`` is read from
  the table under "## The layers" of docs/architecture.md (``--layers-from``; by default this script's own tree's
  doc, so that two trees are held to the same order); an import (at any depth, type-only ones under
  ``if TYPE_CHECKING:`` included) from a module of layer a of a module of layer b > a is against the order.
  ``unplaced`` counts the top-level names the table does not place (their imports are not judged).
- **top-level modules**: ``pipeline/*.py`` other than ``__init__.py``.
- **README lines**: the lines of README.md.
- **fast loop** (only with ``--fast-loop``: it takes minutes): the wall time of
  ``pytest -m "not docker and not slow" -n 2 -p no:randomly`` in the tree.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
ENUM_BASES = {"Enum", "StrEnum", "IntEnum", "Flag", "IntFlag"}
BROAD = {"Exception", "BaseException"}

# The modules (a path under the tree, or a folder ending in /) whose dict[str, Any] hold data that is JSON by nature,
# and why; with JSON_BY_NATURE_NAMES below, the rule the split of the dict[str, Any] figure follows. A module that
# mixes such data with swepipe's own is not listed: its annotations count with the rest unless a name says.
JSON_BY_NATURE = {
    "pipeline/models/client.py": "litellm's requests and responses",
    "pipeline/models/gemma_server.py": "the OpenAI-style bodies it serves, llama.cpp's it forwards",
    "pipeline/models/gemma_chat.py": "chat messages, tool calls and tool schemas made into a prompt",
    "pipeline/models/grammars.py": "the tools' JSON schemas",
    "pipeline/models/prompt_cache.py": "chat messages",
    "pipeline/models/scripted.py": "litellm's completion call and its reply, scripts read from YAML",
    "pipeline/settings/model_spec.py": "further litellm.completion parameters",
    "pipeline/agent/actions.py": "tool schemas, a tool call's arguments",
    "pipeline/agent/compact.py": "chat messages",
    "pipeline/agent/transcript.py": "chat messages",
    "pipeline/agent/settings.py": "chat messages",
    "pipeline/interop/trajectory_formats/": "foreign trajectory files being parsed",
    "pipeline/interop/recorded.py": "tool calls of recorded trajectories",
    "pipeline/interop/replay.py": "tool calls of recorded trajectories, scripted replies",
    "pipeline/records/base.py": "a record's JSON before its type checks it, and after",
    "pipeline/records/chat.py": "a tool's parameters, a JSON schema (the chat's other parts are TypedDicts)",
    "pipeline/run/ray/connect.py": "ray's node table and ray.init's options",
    "pipeline/interop/atif_export.py": "a run's saved trajectories read leniently, a tool call's arguments, the "
                                       "ATIF document the atif models return (its own parts are TypedDicts)",
}
# Names whose dict[str, Any] hold JSON by nature in any module: an annotation counts so when it belongs to a
# function, parameter, field or variable of one of these names.
JSON_BY_NATURE_NAMES = {
    "upgrade": "a record file's JSON of an older format, before its type reads it (Record.upgrade)",
    "messages": "chat messages",
    "message": "a chat message",
    "tool_calls": "tool calls in the provider's format",
    "tools": "tool schemas",
}


def python_files(tree: Path) -> Iterator[Path]:
    skipped = tree / "pipeline" / "bundled" / "tasks"  # the bundled tasks' projects are data
    for path in sorted((tree / "pipeline").rglob("*.py")):
        if not path.is_relative_to(skipped):
            yield path


def parsed(tree: Path) -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(encoding="utf-8"), filename=str(path)) for path in python_files(tree)}


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _annotations(module: ast.Module) -> Iterator[tuple[ast.expr, set[str]]]:
    """Every annotation, with the names it belongs to: the functions around it, and the parameter, or the field
    or variable, it annotates (a return's: its function's)."""
    def walk(node: ast.AST, functions: set[str]) -> Iterator[tuple[ast.expr, set[str]]]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions = functions | {node.name}
            arguments = node.args
            for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                             *filter(None, [arguments.vararg, arguments.kwarg])]:
                if argument.annotation is not None:
                    yield _unstring(argument.annotation), functions | {argument.arg}
            if node.returns is not None:
                yield _unstring(node.returns), functions
        elif isinstance(node, ast.AnnAssign):
            target = node.target
            name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) \
                else ""
            yield _unstring(node.annotation), functions | {name}
        for child in ast.iter_child_nodes(node):
            yield from walk(child, functions)
    yield from walk(module, set())


def _unstring(annotation: ast.expr) -> ast.expr:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            return ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return annotation
    return annotation


def _is_dict_str_any(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Subscript) and _name(node.value) in ("dict", "Dict")):
        return False
    pair = node.slice
    return (isinstance(pair, ast.Tuple) and len(pair.elts) == 2 and _name(pair.elts[0]) == "str"
            and _name(pair.elts[1]) == "Any")


def _is_dict(node: ast.expr) -> bool:
    if isinstance(node, ast.Subscript):
        node = node.value
    return _name(node) in ("dict", "Dict")


def _union_members(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union_members(node.left) + _union_members(node.right)
    if isinstance(node, ast.Subscript) and _name(node.value) in ("Union", "Optional"):
        inner = node.slice
        members = list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]
        return members + ([ast.Constant(None)] if _name(node.value) == "Optional" else [])
    return [node]


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _where(tree: Path, path: Path, line: int) -> str:
    return f"{path.relative_to(tree)}:{line}"


def _dict_str_any_aliases(modules: dict[Path, ast.Module]) -> set[str]:
    """Names bound to ``dict[str, Any]`` (``X = ...``, ``X: TypeAlias = ...``, ``type X = ...``) in the tree."""
    names = set()
    for module in modules.values():
        for node in ast.walk(module):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                target, value = node.target, node.value
            elif isinstance(node, getattr(ast, "TypeAlias", ())):  # ``type X = ...``, Python 3.12 on
                target, value = node.name, node.value  # type: ignore[attr-defined]
            else:
                continue
            if isinstance(target, ast.Name) and _is_dict_str_any(_unstring(value)):
                names.add(target.id)
    return names


def _dict_str_any_found(tree: Path, modules: dict[Path, ast.Module]) -> list[tuple[str, bool]]:
    """Each dict[str, Any] of an annotation (path:line), and whether its data is JSON by nature (its module is in
    JSON_BY_NATURE, or a name it belongs to in JSON_BY_NATURE_NAMES)."""
    aliases = _dict_str_any_aliases(modules)
    found = []
    for path, module in modules.items():
        where = path.relative_to(tree).as_posix()
        listed = any(where == name or (name.endswith("/") and where.startswith(name)) for name in JSON_BY_NATURE)
        for annotation, names in _annotations(module):
            by_nature = listed or bool(names & set(JSON_BY_NATURE_NAMES))
            found += [(_where(tree, path, annotation.lineno), by_nature) for node in ast.walk(annotation)
                      if _is_dict_str_any(node) or (isinstance(node, ast.Name) and node.id in aliases)]
    return found


def dict_str_any(tree: Path, modules: dict[Path, ast.Module]) -> list[str]:
    return [where for where, _ in _dict_str_any_found(tree, modules)]


def json_by_nature(tree: Path, modules: dict[Path, ast.Module]) -> tuple[list[str], list[str]]:
    """The dict[str, Any] annotations whose data is JSON by nature, and the rest."""
    found = _dict_str_any_found(tree, modules)
    return [where for where, by_nature in found if by_nature], [where for where, by_nature in found if not by_nature]


def _functions(module: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(module):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def public_dict_returns(tree: Path, modules: dict[Path, ast.Module]) -> list[str]:
    found = []
    for path, module in modules.items():
        for function in _functions(module):
            if function.name.startswith("_") or function.returns is None:
                continue
            members = [m for m in _union_members(_unstring(function.returns)) if not _is_none(m)]
            if len(members) == 1 and _is_dict(members[0]):
                found.append(f"{_where(tree, path, function.lineno)} {function.name}")
    return found


def _dict_or_record(annotation: ast.expr) -> bool:
    """Whether ``annotation`` holds, at any depth, a union of a dict and a type that is neither a dict, None, Any nor
    object (``R | dict[str, Any]``, ``Callable[[], R | dict]``)."""
    for node in ast.walk(annotation):
        members = _union_members(node) if isinstance(node, (ast.BinOp, ast.Subscript)) else []
        if len(members) > 1 and any(_is_dict(m) for m in members) and any(
                not _is_dict(m) and not _is_none(m) and _name(m) not in ("Any", "object") for m in members):
            return True
    return False


def _names_a_record(annotation: ast.expr) -> bool:
    return any(isinstance(node, (ast.Name, ast.Attribute)) and _name(node)[:1].isupper()
               and _name(node) not in ("Any", "Dict", "Mapping", "Union", "Optional") for node in ast.walk(annotation))


def dict_shims(tree: Path, modules: dict[Path, ast.Module]) -> list[str]:
    found = []
    for path, module in modules.items():
        for function in _functions(module):
            arguments = function.args
            parameters = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            union = any(p.annotation is not None and _dict_or_record(_unstring(p.annotation)) for p in parameters)
            typed = {p.arg for p in parameters if p.annotation is not None and _names_a_record(_unstring(p.annotation))}
            checked = any(isinstance(node, ast.Call) and _name(node.func) == "isinstance" and len(node.args) == 2
                          and isinstance(node.args[0], ast.Name) and node.args[0].id in typed
                          and _name(node.args[1]) == "dict" for node in ast.walk(function))
            builds = any(isinstance(node, ast.Call) and (_name(node.func) in ("model_validate", "of")
                                                         or _name(node.func)[:1].isupper())
                         for node in ast.walk(function))
            if union or (checked and builds):
                found.append(f"{_where(tree, path, function.lineno)} {function.name}")
    return found


def enums(tree: Path, modules: dict[Path, ast.Module]) -> list[str]:
    classes = {}
    for path, module in modules.items():
        for node in ast.walk(module):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = (path, node)
    derived: set[str] = set()
    changed = True
    while changed:  # through the tree's own classes too (class Role(StrEnum) ... class Tier(Role))
        changed = False
        for name, (_, node) in classes.items():
            if name not in derived and any(_name(b) in ENUM_BASES | derived for b in node.bases):
                derived.add(name)
                changed = True
    return sorted(f"{_where(tree, classes[n][0], classes[n][1].lineno)} {n}" for n in derived)


def broad_handlers(tree: Path, modules: dict[Path, ast.Module]) -> list[str]:
    found = []
    for path, module in modules.items():
        for node in ast.walk(module):
            if isinstance(node, ast.ExceptHandler):
                caught = [] if node.type is None else (
                    node.type.elts if isinstance(node.type, ast.Tuple) else [node.type])
                if node.type is None or any(_name(c) in BROAD for c in caught):
                    found.append(_where(tree, path, node.lineno))
            elif (isinstance(node, ast.Call) and _name(node.func) == "suppress"
                  and any(_name(a) in BROAD for a in node.args)):
                found.append(_where(tree, path, node.lineno))
    return found


# -- the layer order --------------------------------------------------------------------------------------------


def layer_order(doc: Path) -> dict[str, int]:
    """Top-level name of pipeline/ (a module `config` for config.py, a package `records` for records/) -> its layer,
    from the rows `| N | name | `a.py` `b/` ... |` of the table under "## The layers"."""
    text = doc.read_text(encoding="utf-8")
    section = text.split("## The layers", 1)[1].split("\n## ", 1)[0] if "## The layers" in text else ""
    layers: dict[str, int] = {}
    for row in re.finditer(r"^\|\s*(\d+)\s*\|[^|\n]*\|([^\n]*)\|\s*$", section, re.MULTILINE):
        for name in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)(?:\.py|/)`", row.group(2)):
            layers[name] = int(row.group(1))
    return layers


def _type_checking(test: ast.expr) -> bool:
    return _name(test) == "TYPE_CHECKING"


def imported_modules(path: Path, module_name: str, module: ast.Module, names: set[str]) -> Iterator[tuple[str, int]]:
    """(module imported, line) for every import of ``module``, at any depth, type-only ones included (``names``:
    the tree's modules; ``from pipeline import x`` imports the module pipeline.x if there is one)."""
    package = module_name if path.name == "__init__.py" else module_name.rpartition(".")[0]
    for node in ast.walk(module):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                submodule = f"{origin}.{alias.name}"
                yield (submodule if submodule in names else origin), node.lineno


def top_name(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "pipeline" else None


def against_layers(tree: Path, modules: dict[Path, ast.Module], layers: dict[str, int]) -> tuple[list[str], list[str]]:
    """The imports from a lower layer of a higher one, and the top-level names the order does not place."""
    found: dict[str, None] = {}  # one per import statement and module imported, in order
    unplaced = set()
    names = {}
    for path in modules:
        parts = path.relative_to(tree).with_suffix("").parts
        names[path] = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    for path, module in modules.items():
        name = names[path]
        source = top_name(name)
        if source is None:
            continue
        if source not in layers:
            unplaced.add(source)
            continue
        for target_module, line in imported_modules(path, name, module, set(names.values())):
            target = top_name(target_module)
            if target is None or target == source:
                continue
            if target not in layers:
                unplaced.add(target)
            elif layers[target] > layers[source]:
                found[f"{_where(tree, path, line)} {source} ({layers[source]}) imports {target_module} "
                      f"({layers[target]})"] = None
    return list(found), sorted(unplaced)


# -- one task's path --------------------------------------------------------------------------------------------

_TRACED = r"""
import runpy, sys, threading
tree, out = sys.argv.pop(1), sys.argv.pop(1)
package = tree + "/pipeline/"
seen = set()
def hook(frame, event, arg):
    if event == "call":
        code = frame.f_code
        if code not in seen:
            seen.add(code)
threading.setprofile(hook)
sys.setprofile(hook)
try:
    runpy.run_module("pipeline.cli", run_name="__main__", alter_sys=True)
except SystemExit as stop:
    code = stop.code
else:
    code = 0
finally:
    sys.setprofile(None)
    threading.setprofile(None)
    ran = sorted({c.co_filename for c in seen if c.co_filename.startswith(package) and c.co_name != "<module>"})
    imported = sorted(m for m in sys.modules if m == "pipeline" or m.startswith("pipeline."))
    with open(out, "w") as f:
        import json
        json.dump({"ran": [p[len(tree) + 1:] for p in ran], "imported": imported, "exit": code}, f)
"""


def task_path(tree: Path) -> dict:
    """Run one bundled task as the module docstring says; the modules that ran and those imported."""
    sys.path[:0] = [str(tree), str(tree / "tests")]
    import yaml
    from scripted_pipeline import SUBMIT, bash, brief_from_patch, edits_from_patch, patch_per_file, reply

    from pipeline import bundled
    from pipeline.bundled.build import materialise_repo
    from pipeline.tasks import load_tasks

    task = next(t for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))
    with tempfile.TemporaryDirectory(prefix="house-metrics-") as scratch:
        work = Path(scratch)
        base, _ = materialise_repo(Path(bundled.__file__).parent / "tasks" / task.instance_id, work / "repo")
        apply = ("f=$(mktemp) && cat > \"$f\" <<'SWEPIPE_PATCH'\n{}SWEPIPE_PATCH\n"
                 "git apply \"$f\"; rm -f \"$f\"; git status --short")
        script = {"junior": [[bash(apply.format(half)), SUBMIT] for half in patch_per_file(task.patch).values()],
                  "senior": [bash("git grep -n 'def ' -- '*.py' | head -40"), reply(brief_from_patch(task.patch))],
                  "principal": [reply(edits_from_patch(task.patch))]}
        (work / "script.yaml").write_text(yaml.safe_dump(script))
        spec = {"model": f"scripted/{work / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}}
        config = {"models": {role: spec for role in ("junior", "senior", "principal")}, "juniors": {"k": 2},
                  "limits": {"max_steps": 6, "command_timeout": 60}, "containers": {"impl": "local_opener:open_local"}}
        (work / "config.yaml").write_text(yaml.safe_dump(config))
        out = work / "path.json"
        environment = {**os.environ, "COLUMNS": "200", "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'tests'}",
                       "SWEPIPE_TEST_REPO": str(work / "repo"), "SWEPIPE_TEST_BASE": base}
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-c", _TRACED, str(tree), str(out), "run", "--config", "config.yaml",
                               "--instance-ids", task.instance_id, "--run-id", "metrics"],
                              capture_output=True, text=True, cwd=work, env=environment, stdin=subprocess.DEVNULL,
                              timeout=900, check=False)
        found = json.loads(out.read_text()) if out.exists() else {"ran": [], "imported": [], "exit": None}
        found["seconds"] = round(time.monotonic() - started, 1)
        if found["exit"] not in (0, None) or done.returncode:
            found["error"] = (done.stdout[-1500:] + done.stderr[-1500:]).strip()
        return found


def fast_loop(tree: Path) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "not docker and not slow", "-n", "2",
                    "-p", "no:randomly"], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, check=False)
    return round(time.monotonic() - started, 1)


def measure(tree: Path, doc: Path, run: bool, loop: bool) -> dict:
    modules = parsed(tree)
    against, unplaced = against_layers(tree, modules, layer_order(doc))
    loose = dict_str_any(tree, modules)
    by_nature, elsewhere = json_by_nature(tree, modules)
    figures: dict = {
        "tree": str(tree),
        "commit": subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True, check=False).stdout.strip(),
        "dict[str, Any] annotations": loose,
        "  whose data is JSON by nature": by_nature,
        "  in the rest": elsewhere,
        "public functions returning dicts": public_dict_returns(tree, modules),
        "dict shims": dict_shims(tree, modules),
        "enums": enums(tree, modules),
        "broad handlers": broad_handlers(tree, modules),
        "imports against the layer order": against,
        "unplaced in the layer order": unplaced,
        "top-level modules": sorted(p.name for p in (tree / "pipeline").glob("*.py") if p.name != "__init__.py"),
        "README lines": len((tree / "README.md").read_text(encoding="utf-8").splitlines()),
    }
    if run:
        path = task_path(tree)
        figures["path modules (ran)"] = path["ran"]
        figures["path modules (imported)"] = path["imported"]
        figures["path run seconds"] = path["seconds"]
        if "error" in path:
            figures["path run error"] = path["error"]
    if loop:
        figures["fast loop seconds"] = fast_loop(tree)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", nargs="?", type=Path, default=HERE, help="a checkout of swepipe (default: this one)")
    parser.add_argument("--layers-from", type=Path, default=HERE / "docs" / "architecture.md",
                        help="the doc whose layer table is the order (default: this checkout's)")
    parser.add_argument("--no-run", action="store_true", help="skip the scripted run of one task")
    parser.add_argument("--fast-loop", action="store_true", help="also time the fast test loop (minutes)")
    parser.add_argument("--list", action="store_true", help="list what each figure counts")
    parser.add_argument("--json", action="store_true", help="print everything as JSON")
    arguments = parser.parse_args()
    figures = measure(arguments.tree.resolve(), arguments.layers_from, not arguments.no_run, arguments.fast_loop)
    if arguments.json:
        print(json.dumps(figures, indent=1))
        return
    for name, value in figures.items():
        if isinstance(value, list):
            print(f"{name}: {len(value)}")
            if arguments.list or name == "path run error":
                print("".join(f"    {item}\n" for item in value), end="")
        else:
            print(f"{name}: {value}")


if __name__ == "__main__":
    main()
