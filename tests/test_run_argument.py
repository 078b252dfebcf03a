"""RUN on the command line: every command that reads a run takes it as a run id (under --runs-dir) or a run
directory (pipeline/cli/runs.py), and each is tried here with both; a name that is neither is refused naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_whatif import make_run
from typer.testing import CliRunner

from pipeline.cli import app, run_commands
from pipeline.cli.runs import run_directory, run_id_of, runs_or_repeats
from pipeline.errors import SwepipeError

NO_DATASET = "no-dataset.jsonl"  # the commands that read tasks say so and go on, or stop after reading the run


@pytest.fixture
def runs(tmp_path, monkeypatch) -> Path:
    """runs/demo and runs/other, two finished runs of one task, in the working directory."""
    monkeypatch.chdir(tmp_path)
    for name, resolved in (("demo", True), ("other", False)):
        make_run(tmp_path / "runs" / name, votes=["a", "a", "b"], verdicts={"a": True, "b": False},
                 principal_resolved=resolved)
    return tmp_path / "runs"


def forms(runs: Path, name: str = "demo") -> list[str]:
    """The run ``name`` by its id and by its directory."""
    return [name, str(runs / name)]


def swepipe(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "COLUMNS": "200"}, stdin=subprocess.DEVNULL, timeout=300)


def said(done: subprocess.CompletedProcess) -> str:
    return " ".join((done.stdout + done.stderr).split())


def test_an_id_and_a_directory_name_the_same_run(runs):
    assert run_directory("demo", Path("runs")) == Path("runs/demo")
    assert run_directory(str(runs / "demo"), Path("elsewhere")) == runs / "demo"
    assert run_id_of("demo") == run_id_of("runs/demo") == run_id_of(str(runs / "demo")) == "demo"
    assert run_id_of("gone-already") == "gone-already"  # cleanup: the containers may outlive the directory
    with pytest.raises(SwepipeError, match="unknown run 'nothing'"):
        run_directory("nothing", Path("runs"))


def test_a_group_of_repeats_is_named_by_its_id_or_its_path(runs):
    for number in (1, 2):
        make_run(runs / f"g-r{number}", votes=["a"], verdicts={"a": True}, principal_resolved=True)
    by_id, by_path = runs_or_repeats("g", Path("runs")), runs_or_repeats(str(runs / "g"), Path("runs"))
    assert [path.resolve() for path in by_id] == by_path == [runs / "g-r1", runs / "g-r2"]
    assert runs_or_repeats("demo", Path("runs")) == [Path("runs/demo")]


@pytest.mark.parametrize("form", [0, 1], ids=["id", "directory"])
def test_report_and_its_baseline(runs, form):
    run, baseline = forms(runs)[form], forms(runs, "other")[form]
    done = swepipe("report", run, "--baseline", baseline, "--dataset", NO_DATASET, cwd=runs.parent)
    assert done.returncode == 0, said(done)
    assert (runs / "demo" / "report.md").is_file()


@pytest.mark.parametrize("form", [0, 1], ids=["id", "directory"])
def test_compare(runs, form):
    done = swepipe("compare", forms(runs, "other")[form], forms(runs)[form], "--json", "--dataset", NO_DATASET,
                   cwd=runs.parent)
    assert done.returncode == 0, said(done)
    (pair,) = json.loads(done.stdout)["pairs"]
    assert (pair["a"], pair["b"]) == ("other", "demo")


@pytest.mark.parametrize("form", [0, 1], ids=["id", "directory"])
def test_whatif(runs, form):
    done = swepipe("whatif", forms(runs)[form], "--json", cwd=runs.parent)
    assert done.returncode == 0, said(done)
    assert [r["run"] for r in json.loads(done.stdout)["runs"]] == ["demo"]


@pytest.mark.parametrize("form", [0, 1], ids=["id", "directory"])
def test_export(runs, form):
    done = swepipe("export", forms(runs)[form], "--output", "official.json", cwd=runs.parent)
    assert done.returncode == 0, said(done)
    assert [p["prefix"] for p in json.loads((runs.parent / "official.json").read_text())] == ["demo"]


@pytest.mark.parametrize("form", [0, 1], ids=["id", "directory"])
def test_coverage(runs, form):
    done = swepipe("coverage", forms(runs)[form], "--no-by-task", cwd=runs.parent)
    assert done.returncode == 0, said(done)


@pytest.mark.parametrize("form", [0, 1], ids=["id", "directory"])
@pytest.mark.parametrize("what", [[], ["--candidates"]], ids=["predictions", "candidates"])
def test_eval_reads_the_run_before_the_tasks(runs, form, what):
    """Past the run, to the dataset (none here: scoring would need Docker); an unknown run stops before it."""
    done = swepipe("eval", forms(runs)[form], *what, "--dataset", NO_DATASET, cwd=runs.parent)
    assert done.returncode == 2 and NO_DATASET in said(done) and "unknown run" not in said(done), said(done)


@pytest.mark.parametrize("form", [0, 1], ids=["id", "directory"])
def test_sweep_baseline(runs, form):
    done = swepipe("sweep", "--baseline", forms(runs)[form], "--sizes", "1", "--limit", "1", "--dry-run",
                   cwd=runs.parent)
    assert done.returncode == 0, said(done)
    assert f"baseline: {(runs / 'demo').resolve()} (an existing run; no solo cell)" in said(done)


@pytest.mark.parametrize("form", [0, 1], ids=["id", "directory"])
def test_run_reuses_the_juniors_of_a_run(runs, form, monkeypatch):
    reused = []

    class Here:
        def connect(self):
            pass

    monkeypatch.setattr("pipeline.run.executors.executor_for", lambda config: Here())
    monkeypatch.setattr(run_commands, "_run_once", lambda request, *rest, **options: reused.append(request) or True)
    done = CliRunner().invoke(app, ["run", "--limit", "1", "--reuse-juniors-from", forms(runs)[form]])
    assert done.exit_code == 0, done.output
    assert Path(reused[0].reuse_juniors_from).resolve() == (runs / "demo").resolve()


@pytest.mark.parametrize("form", [0, 1], ids=["id", "directory"])
def test_cleanup(runs, form, monkeypatch):
    cleaned = []

    class Here:
        def cleanup(self, run_id, images, say):
            cleaned.append(run_id)

    monkeypatch.setattr("pipeline.run.executors.executor_for", lambda config: Here())
    done = CliRunner().invoke(app, ["cleanup", forms(runs)[form]])
    assert done.exit_code == 0, done.output
    assert cleaned == ["demo"]


@pytest.mark.parametrize("command", [["report"], ["coverage"], ["whatif"], ["compare", "demo"], ["export"],
                                     ["eval"], ["eval", "--candidates"], ["sweep", "--dry-run", "--baseline"]])
def test_a_name_that_is_no_run_is_refused_naming_it(runs, command):
    done = swepipe(*command, "nothing", cwd=runs.parent)
    assert done.returncode == 2 and "unknown run 'nothing'" in said(done), said(done)
