"""The senior end to end on a bundled task, replying as real models do: free text, /app/... paths."""

import json

import pytest
from scripted_pipeline import bash, edits_from_patch, patch_per_file, reply
from test_run_docker import TWO_FILES, pipeline_script, setup, swepipe

from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# Spans written the ways a senior told "the repository is at /app" writes them: absolute, ./, a diff's a/, an
# L-range in backticks, a malformed line and a path outside the repository among them.
BRIEF = """I have read both candidates and the code around them.

ANALYSIS:
The worker treats every exception from a handler as a failure ("_handle_failure(job, exc)"), so a
handler raising RetryLater burns an attempt. The queue needs a defer() that puts a reserved job back
with attempts -= 1 and a "deferred" history record; the worker must catch RetryLater (defined in
tinyq/errors.py, with .delay and .reason) before the generic `except Exception`.

Candidate 1 and candidate 2 each do one half: both are needed.

SPANS:
- /app/tinyq/queue.py:120-160 JobQueue.retry and _push, where defer() goes
- `./tinyq/worker.py` L55-L80: the handler call and its except clauses
- /app/tinyq/worker.py 1-15 - the imports: RetryLater must be added
- a/tinyq/errors.py:1-40 RetryLater and its fields
- the rest of the package does not matter
- /etc/passwd:1-3 not the repository

CANDIDATE: 1
```bash
submit
```
"""


def test_a_senior_writing_free_text_with_app_paths_gives_every_file_and_a_resolved_run(tmp_path):
    task = TWO_FILES
    script = pipeline_script(task, [reply(edits_from_patch(task.patch))])
    explore = bash("grep -n 'def \\|^from\\|^import' tinyq/worker.py tinyq/queue.py | head -60")
    script["senior"] = [explore, explore, reply(BRIEF)]  # the third and last reply, asked for the brief
    setup(tmp_path, script, senior={"max_steps": 3})
    swepipe("run", "--instance-ids", task.instance_id, "--config", "config.yaml", "--run-id", "free",
            "--evaluate", cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / "free")
    prediction = finished_predictions(layout.predictions)[task.instance_id]
    assert prediction["source"] == "principal" and prediction["resolved"] is True, prediction

    paths = layout.task(task.instance_id)
    brief = json.loads((paths.senior / "brief.json").read_text())
    assert brief["source"] == "senior" and brief["senior_exit"] == "submitted" and brief["candidate"] == 1
    assert [(s["file"], s["start"]) for s in brief["spans"]] == [
        ("tinyq/queue.py", 120), ("tinyq/worker.py", 55), ("tinyq/worker.py", 1), ("tinyq/errors.py", 1)]
    assert any("no line range" in p for p in brief["problems"])
    assert any("/etc/passwd" in p and "outside the repository" in p for p in brief["problems"])
    assert "RetryLater burns an attempt" in brief["analysis"] and '"deferred"' in brief["analysis"]

    context = (paths.senior / "context.md").read_text()
    for path in patch_per_file(task.patch):
        assert f"### {path}:" in context
    assert "### tinyq/worker.py:1-" in context and "from __future__ import annotations" in context  # the header
    assert "/app/" not in context
    trajectory = json.loads((paths.senior / "trajectory.json").read_text())
    assert "Write your brief now" in trajectory["messages"][-2]["content"]
