"""ATIF in the task's image: a Harbor trial (mini-swe-agent's bash_command calls, /testbed paths, the diff its submit
printed) replays to its recorded patch and resolves the bundled tinyq task; a swepipe solo run in the image, exported
as ATIF and replayed, gives the same patch (the round trip)."""

from __future__ import annotations

import pytest
import yaml
from atif_fixtures import harbor_mini_trial
from scripted_pipeline import apply_patch_command, editor_calls_from_patch, patch_per_file
from test_run_docker import swepipe

from pipeline.records import ReplayResult
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.tasks import load_tasks

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TASK = next(t for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))


def test_a_harbor_trial_replays_to_its_printed_diff_and_resolves_in_the_tasks_image(tmp_path):
    write = f"cat <<'EOF' > /tmp/fix.diff\n{TASK.patch}EOF"
    harbor_mini_trial(tmp_path / "job", TASK.instance_id,
                      [("ls /testbed/tinyq", "queue.py\nworker.py\n"), (write, ""),
                       ("cd /testbed && git apply /tmp/fix.diff", "")], TASK.patch)
    done = swepipe("replay", "job", "--run-id", "harbor", "--evaluate", cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / "harbor")
    result = ReplayResult.read(layout.task(TASK.instance_id).replay_files.result)
    assert isinstance(result, ReplayResult), done.stdout[-3000:]
    assert result.source_format == "atif" and result.patch_identical is True, (result.differing,
                                                                                 result.only_replayed)
    assert result.recorded_resolved is True and result.replayed_steps == 4
    assert finished_predictions(layout.predictions)[TASK.instance_id]["resolved"] is True


def test_a_swepipe_run_exported_as_atif_replays_to_the_same_patch_in_the_tasks_image(tmp_path):
    """The round trip: a solo run that fixes one file with a bash command and the other with the editor (tool-call
    format), exported as ATIF, replayed in the same image."""
    first, second = list(patch_per_file(TASK.patch).values())
    calls = [{"content": "Apply half.", "tool_calls": [{"name": "bash",
                                                        "arguments": {"command": apply_patch_command(first)}}]},
             *editor_calls_from_patch(second),
             {"content": "", "tool_calls": [{"name": "submit", "arguments": {}}]}]
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"solo": [calls]}))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "models": {"solo": {"model": f"scripted/{tmp_path / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}}},
        "limits": {"action_format": "tools"}}))
    swepipe("run", "--strategy", "solo", "--instance-ids", TASK.instance_id, "--config", "config.yaml",
            "--run-id", "orig", cwd=tmp_path)
    original = finished_predictions(RunLayout(tmp_path / "runs" / "orig").predictions)[TASK.instance_id]
    assert original["model_patch"] and set(patch_per_file(original["model_patch"])) == set(patch_per_file(TASK.patch))
    swepipe("export", "orig", "--format", "atif", "--output", "atif", cwd=tmp_path)

    done = swepipe("replay", "atif", "--run-id", "again", "--evaluate", cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / "again")
    result = ReplayResult.read(layout.task(TASK.instance_id).replay_files.result)
    assert isinstance(result, ReplayResult), done.stdout[-3000:]
    assert result.source_format == "atif" and result.patch_identical is True, (result.differing,
                                                                                 result.only_replayed)
    replayed = finished_predictions(layout.predictions)[TASK.instance_id]
    assert replayed["model_patch"] == original["model_patch"] and replayed["resolved"] is True
