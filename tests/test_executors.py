"""The executor is an interface: chosen by name in pipeline.run.executors alone, the same operations on both."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import pytest
from pydantic import ValidationError

from pipeline.errors import SwepipeError
from pipeline.run.executors import REGISTRY, Executor, executor_class, executor_for
from pipeline.settings.config import ExecutorConfig, RunConfig

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = ROOT / "pipeline"
SKIPPED_DIRS = (PACKAGE_DIR / "bundled" / "tasks",)  # the bundled tasks' own projects, data
REGISTRY_FILE = PACKAGE_DIR / "run" / "executors.py"


def _names_in(node: ast.expr) -> set[str]:
    """The executor names ``node`` spells as a string constant, alone or in a tuple, list or set."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {item.value for item in items
            if isinstance(item, ast.Constant) and isinstance(item.value, str) and item.value in REGISTRY}


def executor_name_comparisons(path: Path) -> list[str]:
    """``file:line`` of every comparison (==, !=, in, is, ...) or match case in ``path`` with an executor's name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            names = set().union(*(_names_in(side) for side in [node.left, *node.comparators]))
        elif isinstance(node, ast.MatchValue):
            names = _names_in(node.value)
        else:
            continue
        if names:
            found.append(f"{where}:{node.lineno} compares with {', '.join(sorted(names))}")
    return found


def test_the_search_finds_every_kind_of_comparison(tmp_path):
    source = tmp_path / "x.py"
    source.write_text(
        'if kind == "ray":\n    pass\n'
        'ok = "threads" != kind\n'
        'ok = executor not in (None, "threads")\n'
        'match kind:\n    case "ray":\n        pass\n'
        'fine = {"ray": 1}["ray"], kind == "raygun", print("threads")\n',
        encoding="utf-8")
    assert [line.split(" ")[0].rsplit(":", 1)[1] for line in executor_name_comparisons(source)] == \
        ["1", "3", "4", "6"]


def test_no_executor_name_is_compared_outside_the_registry():
    found = [line for path in sorted(PACKAGE_DIR.rglob("*.py"))
             if path != REGISTRY_FILE and not any(path.is_relative_to(skipped) for skipped in SKIPPED_DIRS)
             for line in executor_name_comparisons(path)]
    if found:
        pytest.fail("executor chosen by name outside pipeline/run/executors.py (ask executor_for(config) and use "
                    "the Executor it returns):\n" + "\n".join(f"    {line}" for line in found), pytrace=False)


def test_the_registry_has_every_name_the_config_allows():
    kinds = typing.get_args(ExecutorConfig.model_fields["kind"].annotation)
    assert set(kinds) == set(REGISTRY) == {"threads", "ray"}
    assert RunConfig().executor.kind == "threads"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_each_executor_has_the_whole_interface(name):
    cls = executor_class(name)
    assert cls.name == name
    assert isinstance(cls.limits_per_node, bool)
    executor = executor_for(ExecutorConfig(kind=name))
    assert isinstance(executor, cls)
    for method in ("connect", "check_run_images", "require_images", "run_tasks", "evaluate_predictions",
                   "score_candidates", "cleanup"):
        wanted = inspect.signature(getattr(Executor, method))
        got = inspect.signature(getattr(cls, method))
        assert list(got.parameters) == list(wanted.parameters), f"{name}.{method}"


def test_limits_are_sized_here_for_threads_and_on_each_node_for_ray():
    assert executor_class("threads").limits_per_node is False
    assert executor_class("ray").limits_per_node is True


def test_an_unknown_executor_is_refused_naming_the_choices():
    with pytest.raises(SwepipeError, match=r"unknown executor 'slurm': use threads or ray"):
        executor_class("slurm")
    with pytest.raises(ValidationError, match=r"'threads' or 'ray'"):
        ExecutorConfig(kind="slurm")


def test_the_command_line_refuses_an_unknown_executor_naming_the_choices():
    from typer.testing import CliRunner

    from pipeline.cli import app

    for command in (["cleanup", "--executor", "slurm"], ["eval", "--predictions", "p.jsonl", "--executor", "slurm"]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code != 0
        assert isinstance(result.exception, SwepipeError), result.output
        assert "--executor/--ray-address" in str(result.exception) and "'threads' or 'ray'" in str(result.exception)


def test_the_thread_executor_cleans_up_here(monkeypatch):
    from pipeline.runtime import containers

    monkeypatch.setattr(containers, "remove_labelled", lambda run_id: [f"{run_id}-c1"])
    monkeypatch.setattr(containers, "remove_sanitised_images", lambda: ["img:1", "img:2"])
    said: list[str] = []
    executor_for(ExecutorConfig()).cleanup("r1", True, said.append)
    assert said == ["removed 1 container(s): r1-c1", "removed 2 sanitised image(s)"]


def test_the_ray_executor_needs_a_run_id_to_clean_up():
    with pytest.raises(SwepipeError, match="needs --run-id"):
        executor_for(ExecutorConfig(kind="ray")).cleanup(None, False, print)
