"""What `swepipe eval` scores: RUN or --predictions, one of the two, each refused in words when it names nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def swepipe(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=cwd,
                          stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "200"}, timeout=300)


def test_an_empty_run_is_refused_as_no_run_directory_not_read_as_a_predictions_file(tmp_path):
    # An empty RUN once fell through to the --predictions branch with no file and died in a traceback.
    done = swepipe("eval", "", cwd=tmp_path)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0
    assert "Traceback" not in said and "is not a run directory" in said


def test_two_predictions_files_of_one_name_are_scored_under_two_run_ids(tmp_path, monkeypatch):
    # Both were once run "eval-preds": one folder of results, one container label, one cleanup for the two.
    from pipeline.cli.eval_command import predictions_run_id

    first, second = tmp_path / "a" / "preds.jsonl", tmp_path / "b" / "preds.jsonl"
    assert predictions_run_id(first) != predictions_run_id(second)
    assert predictions_run_id(first).startswith("eval-preds-")
    monkeypatch.chdir(tmp_path / "..")
    assert predictions_run_id(Path(tmp_path.name) / "a" / "preds.jsonl") == predictions_run_id(first)  # resumes
