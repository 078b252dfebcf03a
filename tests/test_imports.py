"""The import graph of `pipeline`: no cycles between its packages, none between its modules at import time, and
no heavy imports where none are needed.

The graph comes from the source (`ast`), not from importing anything. Between packages, every `import` and
`from ... import`, at module level or inside a function, counts; only those under `if TYPE_CHECKING:` do not, as
they never run. Modules collapse to their package, the first component under `pipeline/` (`pipeline.team.lead` ->
`team`; a top-level module such as `pipeline/errors.py` is its own node, `errors`). The layer order
(docs/architecture.md's table) counts the type-only imports too: a type is a dependency as much as a call.

Between modules, only the imports that run when a module is imported count: those at module level (in a class
body, a `try:` or an `if` there too), not those inside a function, nor under `if TYPE_CHECKING:`. An edge goes to
the module named (`from pipeline.cli import app` -> `pipeline.cli`, `from pipeline.control import stopping` ->
`pipeline.control.stopping`), not to the packages Python imports on the way there.
"""

from __future__ import annotations

import ast
import itertools
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = ROOT / "pipeline"
# The bundled tasks' projects are data (their own Python sources), not part of the package's import graph.
SKIPPED_DIRS = (PACKAGE_DIR / "bundled" / "tasks",)
STAGE_PACKAGES = {"agent", "juniors", "senior", "principal", "team", "run", "runtime"}
# What runs a task (the stages, their strategies, scoring, containers, models, the agent's file editor): the packages
# that read runs (below) reach what these decided only through the records they wrote.
STAGE_INTERNALS = STAGE_PACKAGES | {"strategies", "evaluation", "models", "edits"}
# The products that read runs: the run report and task pages, the analyses, other tools' formats.
READERS_OF_RUNS = ("report", "analysis", "interop")
# The imports of a stage internal that a reader of runs makes when a function runs (never when it is imported),
# each because it replays the stage's own rule on recorded data; the list can only shrink (move the rule to a
# module both import, as pipeline.pool_rules and pipeline.records.ledger were, then take it off).
CALL_TIME_STAGE_IMPORTS = {
    ("pipeline.analysis.repricing", "pipeline.agent.compact"),  # the agent's compaction, replayed
    ("pipeline.analysis.repricing", "pipeline.models.prompt_cache"),  # where the calls put cache marks
    ("pipeline.analysis.whatif", "pipeline.models.pricing"),  # a policy priced at the models' prices
    ("pipeline.analysis.whatif", "pipeline.models.prompt_cache"),
    ("pipeline.report.task_build", "pipeline.agent.edit_actions"),  # a step's editor calls, parsed as the agent did
    ("pipeline.interop.trajectory_formats.swepipe", "pipeline.agent.edit_actions"),  # a swepipe export's ```edit blocks
}


@dataclass(frozen=True)
class Import:
    source: str  # importing module, e.g. pipeline.team.lead
    target: str  # imported module, e.g. pipeline.run.task
    file: Path
    line: int

    @property
    def where(self) -> str:
        file = self.file.relative_to(ROOT) if self.file.is_relative_to(ROOT) else self.file
        return f"{file}:{self.line}"


def _module_files() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if any(path.is_relative_to(skipped) for skipped in SKIPPED_DIRS):
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _imports_of(module: str, path: Path, modules: dict[str, Path], at_import: bool = False,
                type_only: bool = False) -> list[Import]:
    """The imports of pipeline modules in ``module`` (``at_import``: only those run when it is imported;
    ``type_only``: those under `if TYPE_CHECKING:` too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []
    for node in (ast.walk(tree) if type_only else _executed_nodes(tree, at_import)):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, path, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                # `from pipeline.control import stopping` imports the module pipeline.control.stopping, not the package.
                submodule = f"{origin}.{alias.name}"
                found.append(Import(module, submodule if submodule in modules else origin, path, node.lineno))
    return [i for i in found if i.target == "pipeline" or i.target.startswith("pipeline.")]


def _executed_nodes(tree: ast.AST, at_import: bool = False):
    """Every node, at any depth, except the bodies of `if TYPE_CHECKING:`, which never run (``at_import``: nor the
    bodies of functions, which run only when called)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if at_import and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue  # an import statement can only be in its body, which runs when the function is called
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _node(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None  # the bare `pipeline` package is nobody's dependency


def all_imports(at_import: bool = False, type_only: bool = False) -> list[Import]:
    modules = _module_files()
    return [i for module, path in modules.items() for i in _imports_of(module, path, modules, at_import, type_only)]


def package_graph(imports: list[Import]) -> dict[str, dict[str, list[Import]]]:
    """package -> imported package -> the import statements behind that edge."""
    graph: dict[str, dict[str, list[Import]]] = defaultdict(lambda: defaultdict(list))
    for imp in imports:
        source, target = _node(imp.source), _node(imp.target)
        if source and target and source != target:
            graph[source][target].append(imp)
    return graph


def module_graph(imports: list[Import]) -> dict[str, dict[str, list[Import]]]:
    """module -> imported module -> the import statements behind that edge (the bare `pipeline` package left out,
    as in the package graph)."""
    graph: dict[str, dict[str, list[Import]]] = defaultdict(lambda: defaultdict(list))
    for imp in imports:
        if imp.source != imp.target and "pipeline" not in (imp.source, imp.target):
            graph[imp.source][imp.target].append(imp)
    return graph


def _components(graph: dict[str, dict[str, list[Import]]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, {})):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    nodes = set(graph) | {t for targets in graph.values() for t in targets}
    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return found


def _shortest_cycle(graph: dict[str, dict[str, list[Import]]], start: str, members: set[str]) -> list[str]:
    """start -> ... -> start, the fewest edges, staying inside the component."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(graph.get(node, {})):
                if successor == start:
                    return paths[node] + [start]
                if successor in members and successor not in paths:
                    paths[successor] = paths[node] + [successor]
                    following.append(successor)
        frontier = following
    raise AssertionError(f"{start} is in a cycle but none was found")  # not reached for a real component


def describe_cycles(graph: dict[str, dict[str, list[Import]]], nodes: str = "packages") -> list[str]:
    """Each knot of the graph: its shortest cycle with the import lines behind every edge, then the knot's other
    imports; ``nodes`` names what the graph's nodes are."""
    descriptions = []
    for component in _components(graph):
        members = set(component)
        cycle = _shortest_cycle(graph, component[0], members)
        lines = [f"cycle {' -> '.join(cycle)} ({nodes} in this knot: {', '.join(component)})"]
        on_cycle = set(itertools.pairwise(cycle))
        lines += _edge_lines(graph, list(itertools.pairwise(cycle)))
        others = [(s, t) for s in component for t in sorted(graph.get(s, {}))
                  if t in members and (s, t) not in on_cycle]
        if others:
            lines.append("  other imports inside this knot:")
            lines += _edge_lines(graph, others)
        descriptions.append("\n".join(lines))
    return descriptions


def _edge_lines(graph: dict[str, dict[str, list[Import]]], edges: list[tuple[str, str]]) -> list[str]:
    lines = []
    for source, target in edges:
        statements = {(imp.where, imp.target): None for imp in graph[source][target]}  # one per line, in order
        lines += [f"    {source} -> {target}: {where} imports {module}" for where, module in statements]
    return lines


def test_the_graph_sees_every_kind_of_import(tmp_path):
    """Guards the parser: relative, function-level and `from pipeline import module` imports count;
    `if TYPE_CHECKING:` ones do not."""
    source = tmp_path / "y.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import z\n"
        "from ..w import helper\n"
        "from pipeline import datasets\n"
        "import json\n"
        "if TYPE_CHECKING:\n"
        "    from pipeline.tasks import Task\n"
        "else:\n"
        "    from pipeline.errors import SwepipeError\n"
        "def later():\n"
        "    import pipeline.team.lead\n",
        encoding="utf-8",
    )
    modules = dict.fromkeys(["pipeline.x.y", "pipeline.x.z", "pipeline.w", "pipeline.datasets"], source)
    found = {(i.target, i.line) for i in _imports_of("pipeline.x.y", source, modules)}
    assert found == {("pipeline.x.z", 2), ("pipeline.w", 3), ("pipeline.datasets", 4), ("pipeline.errors", 9),
                     ("pipeline.team.lead", 11)}

    imports = all_imports()
    assert ("pipeline.tasks", "pipeline.tasks.task") in {(i.source, i.target) for i in imports}
    assert not any(".bundled.tasks." in i.source for i in imports)


def test_the_module_graph_counts_only_imports_run_at_import_time(tmp_path):
    """Guards the module graph's parser: module level, class bodies and `try:` count; function bodies (a method's,
    a nested function's) and `if TYPE_CHECKING:` do not."""
    source = tmp_path / "y.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from pipeline import datasets\n"
        "try:\n"
        "    import pipeline.errors\n"
        "except ImportError:\n"
        "    pass\n"
        "if TYPE_CHECKING:\n"
        "    from pipeline.tasks import Task\n"
        "class C:\n"
        "    from pipeline.settings.config import RunConfig\n"
        "    def method(self):\n"
        "        from pipeline.team import lead\n"
        "async def later():\n"
        "    def inner():\n"
        "        import pipeline.run.task\n",
        encoding="utf-8",
    )
    modules = dict.fromkeys(["pipeline.x.y", "pipeline.datasets", "pipeline.team.lead"], source)
    found = {(i.target, i.line) for i in _imports_of("pipeline.x.y", source, modules, at_import=True)}
    assert found == {("pipeline.datasets", 2), ("pipeline.errors", 4), ("pipeline.settings.config", 10)}
    everything = {i.target for i in _imports_of("pipeline.x.y", source, modules)}
    assert {"pipeline.team.lead", "pipeline.run.task"} <= everything

    imports = [Import("pipeline.a", "pipeline.b", PACKAGE_DIR / "a.py", 1),
               Import("pipeline.b", "pipeline.a", PACKAGE_DIR / "b.py", 2),
               Import("pipeline.b", "pipeline", PACKAGE_DIR / "b.py", 3)]
    [described] = describe_cycles(module_graph(imports), "modules")
    assert "cycle pipeline.a -> pipeline.b -> pipeline.a (modules in this knot" in described


def test_cycles_are_described_with_their_import_lines():
    graph = {
        "a": {"b": [Import("pipeline.a", "pipeline.b.x", PACKAGE_DIR / "a.py", 3)]},
        "b": {"c": [Import("pipeline.b.x", "pipeline.c", PACKAGE_DIR / "b" / "x.py", 7)]},
        "c": {"a": [Import("pipeline.c", "pipeline.a", PACKAGE_DIR / "c.py", 1)], "d": []},
    }
    [described] = describe_cycles(graph)
    assert "a -> b -> c -> a" in described
    assert "pipeline/b/x.py:7 imports pipeline.c" in described
    graph["b"]["a"] = [Import("pipeline.b", "pipeline.a", PACKAGE_DIR / "b" / "__init__.py", 2)]
    [described] = describe_cycles(graph)
    assert "a -> b -> a" in described
    assert "other imports inside this knot" in described and "pipeline/c.py:1" in described
    assert describe_cycles({"a": {"b": []}, "b": {"c": []}}) == []


def test_no_import_cycle_between_packages():
    cycles = describe_cycles(package_graph(all_imports()))
    if cycles:
        pytest.fail("import cycles between packages of pipeline/:\n" + "\n".join(cycles), pytrace=False)


def test_no_import_cycle_between_modules():
    """No module imports, while it is being imported, one that imports it back (directly or through others): the
    order modules are first imported in can then never find a name missing."""
    cycles = describe_cycles(module_graph(all_imports(at_import=True)), "modules")
    if cycles:
        pytest.fail("import cycles between modules of pipeline/ (imports run at import time):\n" + "\n".join(cycles)
                    + "\nmove what both need to a module of its own, or import it inside the function that needs it",
                    pytrace=False)


def documented_layers(doc: Path = ROOT / "docs" / "architecture.md") -> dict[str, list[int]]:
    """Top-level name of pipeline/ (``config`` for config.py, ``records`` for records/) -> the layers whose row of
    the table under "## The layers" names it (one, unless the doc names it twice)."""
    section = doc.read_text(encoding="utf-8").split("## The layers", 1)[1].split("\n## ", 1)[0]
    layers: dict[str, list[int]] = defaultdict(list)
    for row in re.finditer(r"^\|\s*(\d+)\s*\|[^|\n]*\|([^\n]*)\|\s*$", section, re.MULTILINE):
        for name in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)(?:\.py|/)`", row.group(2)):
            layers[name].append(int(row.group(1)))
    return layers


def _top_level_names() -> set[str]:
    return {name for module in _module_files() if (name := _node(module))}


def test_the_layer_table_places_every_top_level_module_once():
    layers = documented_layers()
    assert sorted({n for found in layers.values() for n in found}) == list(range(1, 10)), "layers 1 to 9, each a row"
    twice = {name: found for name, found in layers.items() if len(found) > 1}
    assert not twice, f"named in more than one layer of docs/architecture.md: {twice}"
    missing, gone = _top_level_names() - set(layers), set(layers) - _top_level_names()
    assert not missing, f"in no layer of docs/architecture.md's table: {sorted(missing)}"
    assert not gone, f"docs/architecture.md's layer table names what pipeline/ has not: {sorted(gone)}"


def test_no_import_reaches_a_higher_layer():
    """The whole order the doc draws: every import, at module level, in a function or type-only, goes to the same
    layer or one below."""
    layer = {name: found[0] for name, found in documented_layers().items()}
    bad = {}
    for imp in all_imports(type_only=True):
        source, target = _node(imp.source), _node(imp.target)
        if source and target and source in layer and target in layer and layer[target] > layer[source]:
            bad[f"    {imp.where} ({source}, layer {layer[source]}) imports {imp.target} "
                f"(layer {layer[target]})"] = None
    if bad:
        pytest.fail("imports against the layer order of docs/architecture.md (move the code to the layer it belongs "
                    "to):\n" + "\n".join(bad), pytrace=False)


def test_type_only_imports_are_seen_by_the_layer_check(tmp_path):
    source = tmp_path / "y.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pipeline.tasks import Task\n",
                      encoding="utf-8")
    modules = dict.fromkeys(["pipeline.x.y", "pipeline.tasks"], source)
    assert _imports_of("pipeline.x.y", source, modules) == []
    assert [(i.target, i.line) for i in _imports_of("pipeline.x.y", source, modules, type_only=True)] == [
        ("pipeline.tasks", 3)]


def test_no_package_cycle_through_type_only_imports():
    cycles = describe_cycles(package_graph(all_imports(type_only=True)))
    if cycles:
        pytest.fail("import cycles between packages of pipeline/, type-only imports included:\n" + "\n".join(cycles),
                    pytrace=False)


def _reads_runs(module: str) -> bool:
    return _node(module) in READERS_OF_RUNS


def _with_packages(module: str) -> list[str]:
    """``module`` and the packages Python imports on the way to it (pipeline.a.b -> pipeline.a, pipeline.a.b)."""
    parts = module.split(".")
    return [".".join(parts[:n]) for n in range(2, len(parts) + 1)]


def test_readers_of_runs_do_not_import_the_stages_when_imported():
    """The layer rule: no module of pipeline/report/, pipeline/analysis/ or pipeline/interop/, when imported, imports
    a stage internal (STAGE_INTERNALS), itself or through the modules it imports (and their packages)."""
    graph = module_graph(all_imports(at_import=True))
    bad = []
    for module in sorted(m for m in _module_files() if _reads_runs(m)):
        path, seen, frontier = {module: [module]}, {module}, [module]
        while frontier:
            following = []
            for node in frontier:
                for target in sorted(graph.get(node, {})):
                    for reached in _with_packages(target):
                        if reached not in seen:
                            seen.add(reached)
                            path[reached] = path[node] + [reached]
                            following.append(reached)
            frontier = following
        stages = sorted(m for m in seen if _node(m) in STAGE_INTERNALS)
        if stages:
            bad.append(f"    {' -> '.join(path[stages[0]])}" + (f" (and {len(stages) - 1} more)" if stages[1:] else ""))
    if bad:
        pytest.fail("report, analysis and interop modules import a stage internal when imported (read what the stage "
                    "wrote through pipeline.records, or move the shared rule to a module both import):\n"
                    + "\n".join(bad), pytrace=False)


def test_readers_of_runs_reach_the_stages_at_call_time_only_where_listed():
    """A function of a reader of runs may import a stage internal only as CALL_TIME_STAGE_IMPORTS lists; a new one
    fails here, and one that is gone must come off the list."""
    found = {(i.source, i.target) for i in all_imports()
             if _reads_runs(i.source) and _node(i.target) in STAGE_INTERNALS}
    assert found - CALL_TIME_STAGE_IMPORTS == set(), "new imports of a stage internal from a reader of runs"
    assert CALL_TIME_STAGE_IMPORTS - found == set(), "no longer imported: take them off CALL_TIME_STAGE_IMPORTS"


def test_importing_every_reader_of_runs_loads_no_stage():
    """The layer rule, checked by Python itself: a fresh interpreter imports every module of the readers of runs,
    and no module of a stage internal is loaded."""
    modules = sorted(m for m in _module_files() if _reads_runs(m))
    stages = sorted(STAGE_INTERNALS)
    output = _python("import importlib, sys\n"
                     f"for name in {modules!r}:\n"
                     "    importlib.import_module(name)\n"
                     "print(*sorted(m for m in sys.modules if m.startswith('pipeline.') and "
                     f"m.split('.')[1] in {stages!r}))")
    assert not output.split(), f"importing the report, analysis and interop modules loads {output.split()}"


def _python(code: str, *args: str) -> str:
    """Run `code` in a fresh interpreter (nothing imported yet); its stdout."""
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize(
    ("statement", "unwanted"),
    [
        ("import pipeline.models.client", ["pipeline.models.scripted"]),
        ("import pipeline.models.litellm_setup", ["pipeline.models.scripted"]),
        ("import pipeline.tasks.task", ["pipeline.bundled.build", "pipeline.tasks.datasets"]),
        ("import pipeline.tasks", ["pipeline.bundled.build", "pipeline.tasks.datasets"]),
        # the executors: Ray is imported only inside the ray executor's functions, the thread one never loads it
        ("from pipeline.settings.config import ExecutorConfig; from pipeline.run.executors import executor_for; "
         "executor_for(ExecutorConfig(kind='ray'))", ["ray"]),
        ("from pipeline.settings.config import ExecutorConfig; from pipeline.run.executors import executor_for; "
         "executor_for(ExecutorConfig())", ["ray", "pipeline.run.ray.executor"]),
    ],
)
def test_import_does_not_load(statement, unwanted):
    output = _python(f"import sys\n{statement}\nprint(*[m for m in {unwanted!r} if m in sys.modules])")
    assert not output.split(), f"`{statement}` loads {output.split()}"


def test_bundled_dataset_name_resolves_in_a_fresh_process():
    output = _python(
        "import sys\n"
        "from pipeline.tasks import load_tasks\n"
        "tasks = load_tasks('bundled')\n"
        "assert 'pipeline.bundled.build' not in sys.modules\n"
        "from pipeline.tasks.datasets import BUNDLED, BUNDLED_DATASET\n"
        "assert BUNDLED == 'bundled'\n"
        "assert [t.instance_id for t in tasks] == [t.instance_id for t in load_tasks(str(BUNDLED_DATASET))]\n"
        "print(len(tasks))"
    )
    assert int(output) > 0


def test_scripted_model_works_in_a_fresh_process_through_the_client(tmp_path):
    """The scripted provider registers itself with litellm when a client for a scripted model is made."""
    script = tmp_path / "script.yaml"
    script.write_text("principal:\n  - hello from the script\n", encoding="utf-8")
    output = _python(
        "import sys\n"
        "from pathlib import Path\n"
        "from pipeline.models.budget import Budget\n"
        "from pipeline.models.client import ModelClient\n"
        "from pipeline.models.ledger import Ledger\n"
        "from pipeline.settings.model_spec import ModelSpec\n"
        "spec = ModelSpec(model='scripted/' + sys.argv[1])\n"
        "client = ModelClient(spec, 'principal', Ledger(Path(sys.argv[2])))\n"
        "assert 'pipeline.models.scripted' in sys.modules\n"
        "print(client.complete([{'role': 'user', 'content': 'hi'}], Budget('test', 1.0)).content)",
        script.as_posix(), str(tmp_path / "ledger.jsonl"),
    )
    assert output.strip() == "hello from the script"
