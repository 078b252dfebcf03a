"""SWE-agent trajectories of both shapes SWE-agent publishes, written here in its format, replay in the bundled tinyq
task's image to their recorded submissions and resolve it: a 0.x run (``trajectory`` with its state as JSON text,
the repository at ``/acme__tinyq``) that finds, opens, searches and edits line ranges with the windowed tools, and a
1.x demonstration (``history`` alone, function calls) that edits by search and replace in the window, inserts at a
line, and whose submission is what its submit step printed."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import git
from test_replay_docker import DEFER, EXCEPT, TASK
from test_run_docker import swepipe

from pipeline.records import ReplayResult
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout

pytestmark = [pytest.mark.docker, pytest.mark.slow]
IMPORT_OLD, IMPORT_NEW = "from .errors import UnknownTaskError", "from .errors import RetryLater, UnknownTaskError"
CALL = "            result = spec.func(*job.args, **job.kwargs)"
ROOT = "/acme__tinyq"


def base_repo(tmp_path: Path) -> Path:
    from pipeline import bundled
    from pipeline.bundled.build import materialise_repo

    repo = tmp_path / "source"
    materialise_repo(Path(bundled.__file__).parent / "tasks" / TASK.instance_id, repo)
    return repo


def line_of(path: Path, text: str) -> int:
    return next(number for number, line in enumerate(path.read_text().split("\n"), 1) if line == text)


def submission_of(repo: Path, notes: str) -> str:
    """The fix made by hand in ``repo`` (what the trajectories' edits make), with ``notes`` as notes.txt."""
    worker, queue = repo / "tinyq/worker.py", repo / "tinyq/queue.py"
    worker.write_text(worker.read_text().replace(IMPORT_OLD, IMPORT_NEW).replace(CALL + "\n", EXCEPT))
    lines = queue.read_text().splitlines(keepends=True)
    queue.write_text("".join(lines[:146]) + DEFER + "".join(lines[146:]))
    (repo / "notes.txt").write_text(notes)
    git(repo, "add", "-A")
    return subprocess.run(["git", "-C", str(repo), "diff", "--cached", TASK.base_commit], capture_output=True,
                          text=True, check=True).stdout


def replayed(tmp_path: Path, source: Path, run_id: str) -> tuple[ReplayResult, dict]:
    done = swepipe("replay", str(source), "--run-id", run_id, "--evaluate", cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / run_id)
    result = ReplayResult.read(layout.task(TASK.instance_id).replay_files.result)
    assert isinstance(result, ReplayResult), done.stdout[-3000:]
    return result, finished_predictions(layout.predictions)[TASK.instance_id]


def test_a_0_x_trajectory_with_windowed_tools_replays_to_its_submission_and_resolves(tmp_path):
    repo = base_repo(tmp_path)
    call_line = line_of(repo / "tinyq/worker.py", CALL)
    import_line = line_of(repo / "tinyq/worker.py", IMPORT_OLD)
    actions = [
        ("Where is the worker?", "find_file worker.py\n"),
        ("Open it.", "open tinyq/worker.py\n"),
        ("Where is the call?", "search_file 'spec.func'\n"),
        ("The import.", f"edit {import_line}:{import_line}\n{IMPORT_NEW}\nend_of_edit\n"),
        ("A bad edit first.", f"edit {call_line}:{call_line - 1}\n  broken(\nend_of_edit\n"),  # would insert a line
        ("The handler.", f"edit {call_line}:{call_line}\n{EXCEPT}end_of_edit\n"),
        ("The queue.", f"open {ROOT}/tinyq/queue.py 140\n"),
        ("Look lower.", "scroll_down\n"),
        ("Back.", "goto 146\n"),
        ("Add defer.", f"edit 147:146\n{DEFER}end_of_edit\n"),
        ("Notes.", "create notes.txt\n"),
        ("Write them.", "edit 1:1\nfixed\nend_of_edit\n"),
        ("Done.", "submit\n"),
    ]
    submission = submission_of(base_repo(tmp_path / "made"), "fixed\n")  # 0.x writes every line with a newline
    turned_back = ("Your proposed edit has introduced new syntax error(s). Please read this error message carefully "
                   "and then retry editing the file.\n...\nYour changes have NOT been applied.")
    steps, history = [], [{"role": "system", "content": "SETTING", "agent": "primary"},
                          {"role": "user", "content": "Fix the worker.", "agent": "primary"}]
    for thought, action in actions:
        observation = turned_back if thought == "A bad edit first." else "(output)"
        state = json.dumps({"open_file": "n/a", "working_dir": ROOT})
        steps.append({"action": action, "observation": observation, "response": f"{thought}\n```\n{action}```",
                      "state": state, "thought": thought})
        history += [{"role": "assistant", "content": f"{thought}\n```\n{action}```", "thought": thought,
                     "action": action, "agent": "primary"},
                    {"role": "user", "content": observation, "agent": "primary"}]
    data = {"environment": "swe_main", "trajectory": steps, "history": history,
            "info": {"exit_status": "submitted", "submission": "\n" + submission,
                     "model_stats": {"instance_cost": 0.5, "api_calls": len(actions)}}}
    source = tmp_path / "zero" / f"{TASK.instance_id}.traj"
    source.parent.mkdir()
    source.write_text(json.dumps(data))

    result, prediction = replayed(tmp_path, source, "zero")
    assert result.patch_identical is True, (result.differing, result.only_replayed, result.only_recorded)
    assert result.source_format == "swe-agent" and result.replayed_steps == len(actions)
    assert prediction["resolved"] is True


def test_a_1_x_demonstration_of_history_alone_replays_to_what_its_submit_printed_and_resolves(tmp_path):
    repo = base_repo(tmp_path)
    call_line = line_of(repo / "tinyq/worker.py", CALL)
    submission = submission_of(base_repo(tmp_path / "made"), "fixed")  # 1.x's insert into an empty file
    calls = [
        ("Open the worker.", 'open "tinyq/worker.py"', "open", {"path": "tinyq/worker.py"}),
        ("The import.", f"edit {shlex.quote(IMPORT_OLD)} {shlex.quote(IMPORT_NEW)}", "edit",
         {"search": IMPORT_OLD, "replace": IMPORT_NEW}),
        ("The handler.", f"edit {call_line}:{call_line}\n{EXCEPT}end_of_edit", "edit",
         {"start_line": call_line, "end_line": call_line, "replacement_text": EXCEPT}),
        ("The queue.", 'open "tinyq/queue.py" 146', "open", {"path": "tinyq/queue.py", "line_number": 146}),
        ("Add defer.", f"insert {shlex.quote(DEFER)} 146", "insert", {"text": DEFER, "line": 146}),
        ("Notes.", "create notes.txt", "create", {"filename": "notes.txt"}),
        ("Write them.", "insert fixed", "insert", {"text": "fixed"}),
        ("Done.", "submit", "submit", {}),
    ]
    footer = f"\n(Open file: {ROOT}/notes.txt)\n(Current directory: {ROOT})\nbash-$"
    history = [{"role": "system", "content": "SETTING", "agent": "main", "message_type": "system_prompt"},
               {"role": "user", "content": "Fix the worker.", "agent": "main", "message_type": "observation"}]
    for number, (thought, action, name, arguments) in enumerate(calls):
        printed = ("\r\n" + submission.replace("\n", "\r\n")) if name == "submit" else "(output)"
        history += [{"role": "assistant", "content": thought, "thought": thought, "action": action, "agent": "main",
                     "message_type": "action",
                     "tool_calls": [{"id": f"call_{number}", "type": "function",
                                     "function": {"name": name, "arguments": json.dumps(arguments)}}]},
                    {"role": "tool", "content": printed + footer, "agent": "main", "message_type": "observation",
                     "tool_call_ids": [f"call_{number}"]}]
    source = tmp_path / "demo" / f"{TASK.instance_id}.traj"
    source.parent.mkdir()
    source.write_text(json.dumps({"history": history}))

    result, prediction = replayed(tmp_path, source, "demo")
    assert result.patch_identical is True, (result.differing, result.only_replayed, result.only_recorded)
    assert result.replayed_steps == len(calls) and prediction["resolved"] is True
