"""Rollouts that change the repository only through the editor, in a real container of a bundled task, scored
by its hidden tests: the ```edit block (text format) and str_replace_editor calls (tool format)."""

import json

import pytest

from pipeline.layout import RunLayout
from pipeline.models.ledger import Ledger
from pipeline.tasks import load_tasks
from scripted_pipeline import SUBMIT, edit_block_from_patch, editor_calls_from_patch, patch_per_file, reply
from test_run_docker import setup, swepipe

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TASK = next(t for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))
VIEW = reply(f"First the file.\n```view\n{next(iter(patch_per_file(TASK.patch)))} 1-20\n```")


@pytest.mark.parametrize("action_format", ["text", "tools"])
def test_a_rollout_that_only_edits_resolves_the_task(tmp_path, action_format):
    if action_format == "text":
        replies = [VIEW, reply(edit_block_from_patch(TASK.patch)), SUBMIT]
    else:
        replies = [*editor_calls_from_patch(TASK.patch), {"content": "", "tool_calls": [{"name": "submit",
                                                                                       "arguments": {}}]}]
    setup(tmp_path, {"junior": [replies]}, juniors={"k": 1}, limits={"action_format": action_format})
    run_id = f"edits-{action_format}"
    done = swepipe("run", "--strategy", "vote", "--instance-ids", TASK.instance_id, "--config", "config.yaml",
                   "--run-id", run_id, "--evaluate", cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / run_id)
    prediction = layout.finished()[TASK.instance_id]
    assert prediction["resolved"] is True, (prediction, done.stdout[-2000:])
    paths = layout.task(TASK.instance_id)
    steps = json.loads((paths.junior / "rollout-00.json").read_text())["trajectory"]["steps"]
    assert not [s for s in steps if s["action"] == "bash"]  # no command ran: every change was an edit
    edits = [e for s in steps for e in s["edits"]]
    assert edits and all(e["ok"] for e in edits), edits
    assert {s["action"] for s in steps} <= {"view", "edit", "str_replace_editor", "submit"}
    rows = Ledger.read(paths.ledger)
    assert len(rows) == len(replies)  # one paid call per reply
