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
