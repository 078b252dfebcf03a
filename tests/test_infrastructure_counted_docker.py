"""A resolved patch that changes test infrastructure, scored in a real container by `swepipe eval`: counted and named
in its summary (issue 42); tests/test_infrastructure_counted.py reads recorded results without Docker."""

import json
import os
import subprocess
import sys

import pytest

from pipeline.tasks import load_tasks
from pipeline.tasks.datasets import BUNDLED

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TINYQ = next(t for t in load_tasks(BUNDLED) if t.repo.endswith("/tinyq"))
HARMLESS_CONFTEST = ("diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n"
                     "+++ b/conftest.py\n@@ -0,0 +1 @@\n+# collected first by pytest, and does nothing\n")


def test_eval_names_the_conftest_a_resolved_patch_adds(tmp_path):
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text(json.dumps({"instance_id": TINYQ.instance_id,
                                       "model_patch": TINYQ.patch + HARMLESS_CONFTEST}) + "\n")
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "eval", "--predictions", str(predictions),
                           "--output", "out"], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "COLUMNS": "400"}, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    shown = " ".join(done.stdout.split())
    result = json.loads((tmp_path / "out" / TINYQ.instance_id / "result.json").read_text())
    assert result["resolved"] is True and result["test_infrastructure"] == ["conftest.py: pytest configuration"]
    assert "resolved 1 of 1 scored predictions (100.0%; 1 changes test infrastructure: conftest.py)" in shown
    assert f"test infrastructure changed by {TINYQ.instance_id} (resolved; read its verdict with care): " \
           "conftest.py: pytest configuration" in shown
