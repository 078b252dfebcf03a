"""swepipe replay in the task's image: a SWE-agent trajectory (function calls: str_replace_editor and bash, /testbed
paths, an edit of an executable file, a reply SWE-agent asked again for) replays to its recorded patch and resolves
the bundled tinyq task; a replay killed mid-way resumes without serving any reply twice."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import git
from live_runs import live_trajectory
from test_run_docker import swepipe
from test_trajectory_formats import swe_agent_file

from pipeline.models.ledger import Ledger
from pipeline.records import ReplayResult
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.tasks import load_tasks

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TASK = next(t for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))
QUEUE, WORKER = "/testbed/tinyq/queue.py", "/testbed/tinyq/worker.py"
DEFER = '''    def defer(self, job_id: str, run_at: float, reason: str = "") -> Job:
        """Put a reserved job back to run at `run_at` without counting the attempt.

        For handlers that could not do their work yet (RetryLater): unlike retry() this
        is not a failure, so the attempt is given back and last_error stays as it was.
        """
        job = self._take_reserved(job_id)
        job.attempts -= 1
        job.run_at = float(run_at)
        job.record(self.clock.now(), "deferred", reason)
        self._push(job)
        return job

'''
EXCEPT = '''            result = spec.func(*job.args, **job.kwargs)
        except RetryLater as exc:
            # Not a failure: the handler asks to run again later, whatever the retry policy.
            log.info("deferring %s by %.3gs: %s", job.id, exc.delay, exc)
            self.queue.defer(job.id, self.clock.now() + exc.delay, exc.reason)
'''
# (thought, tool name, arguments): the gold fix by editor calls, a script made executable and then edited
CALLS = [
    ("Look first.", "bash", {"command": "cd /testbed && ls tinyq"}),
    ("The import.", "str_replace_editor", {"command": "str_replace", "path": WORKER,
                                           "old_str": "from .errors import UnknownTaskError",
                                           "new_str": "from .errors import RetryLater, UnknownTaskError"}),
    ("The handler.", "str_replace_editor", {"command": "str_replace", "path": WORKER,
                                            "old_str": "            result = spec.func(*job.args, **job.kwargs)\n",
                                            "new_str": EXCEPT}),
    ("The queue.", "str_replace_editor", {"command": "insert", "path": QUEUE, "insert_line": 146, "new_str": DEFER}),
    ("A check script.", "bash", {"command": "printf '#!/bin/sh\\necho draft\\n' > /testbed/check.sh && "
                                            "chmod 755 /testbed/check.sh && sleep 4"}),
    ("Reword it.", "str_replace_editor", {"command": "str_replace", "path": "/testbed/check.sh",
                                          "old_str": "echo draft", "new_str": "echo final"}),
    ("Run it.", "bash", {"command": "/testbed/check.sh"}),
    ("Done.", "submit", {}),
]


def swe_agent_trajectory(path: Path, submission: str) -> Path:
    steps, ran = [], []
    for number, (thought, name, arguments) in enumerate(CALLS):
        if number == 1:  # a reply SWE-agent could not parse and asked again for: in trajectory, not in history
            steps.append({"action": "", "thought": "Let me think about the import."})
        action = arguments.get("command", "") if name == "bash" else name
        call = [{"id": f"c{number}", "type": "function",
                 "function": {"name": name, "arguments": json.dumps(arguments)}}]
        steps.append({"action": action, "thought": thought})
        ran.append({"action": action, "thought": thought, "tool_calls": call})
    data = swe_agent_file(steps, ran, submission=submission)
    config = json.loads(data["replay_config"])
    config["problem_statement"]["id"] = TASK.instance_id  # as SWE-agent records the task its file is named for
    path.write_text(json.dumps({**data, "replay_config": json.dumps(config)}))
    return path


def recorded_submission(tmp_path: Path) -> str:
    """What SWE-agent's submit would have produced for CALLS, made in a local clone of the task's repository."""
    from pipeline import bundled
    from pipeline.bundled.build import materialise_repo

    repo = tmp_path / "source"
    materialise_repo(Path(bundled.__file__).parent / "tasks" / TASK.instance_id, repo)
    worker, queue = repo / "tinyq/worker.py", repo / "tinyq/queue.py"
    text = worker.read_text().replace(CALLS[1][2]["old_str"], CALLS[1][2]["new_str"])
    worker.write_text(text.replace(CALLS[2][2]["old_str"], EXCEPT))
    lines = queue.read_text().splitlines(keepends=True)
    queue.write_text("".join(lines[:146]) + DEFER + "".join(lines[146:]))
    (repo / "check.sh").write_text("#!/bin/sh\necho final\n")
    (repo / "check.sh").chmod(0o755)
    git(repo, "add", "-A")
    return subprocess.run(["git", "-C", str(repo), "diff", "--cached", TASK.base_commit], capture_output=True,
                          text=True, check=True).stdout


def test_a_swe_agent_trajectory_replays_to_its_patch_and_resolves_in_the_tasks_image(tmp_path):
    submission = recorded_submission(tmp_path)
    assert "new file mode 100755" in submission and "def defer" in submission
    source = swe_agent_trajectory(tmp_path / f"{TASK.instance_id}.traj", submission)
    done = swepipe("replay", str(source), "--run-id", "swe", "--evaluate", cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / "swe")
    result = ReplayResult.read(layout.task(TASK.instance_id).replay_files.result)
    assert isinstance(result, ReplayResult), done.stdout[-3000:]
    assert result.patch_identical is True, (result.differing, result.only_replayed, result.only_recorded)
    assert result.source_format == "swe-agent" and result.replayed_steps == result.recorded_steps == len(CALLS) + 1
    prediction = finished_predictions(layout.predictions)[TASK.instance_id]
    assert prediction["resolved"] is True and "new file mode 100755" in prediction["model_patch"]
    assert ".traj: patch identical" in done.stdout and "yes (-)" in done.stdout  # replayed verdict, none recorded
    assert all(row.cost == 0 for row in Ledger.read(layout.task(TASK.instance_id).ledger))


def test_a_replay_killed_mid_way_resumes_without_serving_a_reply_twice(tmp_path):
    source = swe_agent_trajectory(tmp_path / f"{TASK.instance_id}.traj", recorded_submission(tmp_path))
    layout = RunLayout(tmp_path / "runs" / "killed")
    trajectory = layout.task(TASK.instance_id).solo_files.trajectory
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "replay", str(source), "--run-id", "killed"],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:  # kill during the script step's sleep, five replies in
            if len(live_trajectory(trajectory).get("steps", [])) >= 5:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the replay never reached its fifth step")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    served_before = len(Ledger.read(layout.task(TASK.instance_id).ledger))
    assert 5 <= served_before < len(CALLS) + 1 and not finished_predictions(layout.predictions)

    swepipe("replay", str(source), "--run-id", "killed", cwd=tmp_path)
    rows = Ledger.read(layout.task(TASK.instance_id).ledger)
    assert len(rows) == len(CALLS) + 1  # each recorded reply served once, across both sessions
    result = ReplayResult.read(layout.task(TASK.instance_id).replay_files.result)
    assert isinstance(result, ReplayResult) and result.patch_identical is True


def test_a_mini_swe_agent_trajectory_replays_to_the_gold_patch_in_the_tasks_image(tmp_path):
    """mini-swe-agent 1.x's text actions in a container: a heredoc written under /tmp and applied under /testbed, a
    reply mini refused (two blocks), and the submit echo followed by `git diff`."""
    from test_replay import SUBMIT, mini_trajectory

    write = f"cat <<'EOF' > /tmp/fix.diff\n{TASK.patch}EOF"
    source = mini_trajectory(tmp_path / f"{TASK.instance_id}.traj.json", TASK.instance_id,
                             [("ls /testbed/tinyq", 0), (None, None), (write, 0),
                              ("cd /testbed && git apply /tmp/fix.diff", 0), (SUBMIT, None)], TASK.patch)
    done = swepipe("replay", str(source), "--run-id", "mini", "--evaluate", cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / "mini")
    result = ReplayResult.read(layout.task(TASK.instance_id).replay_files.result)
    assert isinstance(result, ReplayResult), done.stdout[-3000:]
    assert result.patch_identical is True, (result.differing, result.only_replayed, result.only_recorded)
    assert result.exit_codes_differ == [] and result.replayed_steps == 5
    assert finished_predictions(layout.predictions)[TASK.instance_id]["resolved"] is True


def test_a_replay_s_container_has_no_network_even_when_the_config_gives_containers_one(tmp_path):
    """The recorded commands are untrusted: with containers.network: true in the config, the replay's container
    still has no interface but the loopback one."""
    from test_replay import SUBMIT, mini_trajectory

    (tmp_path / "config.yaml").write_text("containers:\n  network: true\n")
    source = mini_trajectory(tmp_path / f"{TASK.instance_id}.traj.json", TASK.instance_id,
                             [("ls /sys/class/net > /testbed/interfaces.txt", 0), (SUBMIT, None)], "")
    done = swepipe("replay", str(source), "--run-id", "sealed", "--config", "config.yaml", cwd=tmp_path)
    patch = finished_predictions(RunLayout(tmp_path / "runs" / "sealed").predictions)[TASK.instance_id]["model_patch"]
    added = [line[1:] for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added == ["lo"], patch
    assert "containers without the network, whatever containers.network says" in " ".join(done.stdout.split())
