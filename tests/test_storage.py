"""Files that survive a kill: torn JSON Lines repaired, one process per run directory, no temporary files left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from pipeline.errors import DatasetError
from pipeline.interop.predictions import load_predictions
from pipeline.models.ledger import Ledger, LedgerRow
from pipeline.records.prediction import finished_predictions
from pipeline.run.lock import RunLocked, lock_run, repair_run, unlock_run
from pipeline.rundir.layout import RunLayout
from pipeline.rundir.storage import append_jsonl, repair_jsonl, write_json_atomic, write_text_atomic
from pipeline.tasks import load_tasks
from pipeline.text import patchtext

TESTS = Path(__file__).parent
PYTHONPATH = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
TASK = next(t for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))
OTHER = next(t for t in load_tasks("bundled") if t.repo.endswith("/pacer"))


def row(n: int) -> dict:
    return json.loads(json.dumps(LedgerRow(stage="junior", role="junior", model="m", cost=0.01 * n,
                                           agent=f"rollout-{n:02d}", time=1700000000.0 + n).__dict__))


def torn(line: dict) -> bytes:
    """What a kill -9 in the middle of appending ``line`` leaves: its first half, no newline."""
    text = json.dumps(line).encode()
    return text[: len(text) // 2]


# -- torn last lines ------------------------------------------------------------------------------


def test_the_next_ledger_append_does_not_glue_onto_a_torn_line(tmp_path, capsys):
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(b"".join(json.dumps(row(n)).encode() + b"\n" for n in (1, 2)) + torn(row(3)))
    Ledger(path).append(LedgerRow(**row(4)))
    assert path.read_bytes().endswith(b"\n")
    assert [r.agent for r in Ledger.read(path)] == ["rollout-01", "rollout-02", "rollout-04"]
    assert path.with_name("ledger.jsonl.torn").read_bytes() == torn(row(3)) + b"\n"
    said = capsys.readouterr().err
    assert said.count("cut short") == 1 and "ledger.jsonl.torn" in said
    Ledger(path).append(LedgerRow(**row(5)))  # said once: the file is whole now
    assert "cut short" not in capsys.readouterr().err and len(Ledger.read(path)) == 4


def test_a_whole_last_line_missing_only_its_newline_is_kept(tmp_path, capsys):
    path = tmp_path / "predictions.jsonl"
    path.write_text(json.dumps({"instance_id": "a", "model_patch": ""}))
    append_jsonl(path, {"instance_id": "b", "model_patch": ""})
    assert [json.loads(line)["instance_id"] for line in path.read_text().splitlines()] == ["a", "b"]
    assert not path.with_name("predictions.jsonl.torn").exists() and "kept" in capsys.readouterr().err


def test_a_file_that_is_only_a_torn_line_and_big_lines(tmp_path):
    path = tmp_path / "p.jsonl"
    big = {"instance_id": "x", "model_patch": "+" * 200_000}
    path.write_bytes(torn(big))
    assert "cut short" in repair_jsonl(path)
    assert path.read_bytes() == b"" and repair_jsonl(path) is None
    append_jsonl(path, big)
    path.write_bytes(path.read_bytes() + torn(big))
    repair_jsonl(path)
    assert [json.loads(line) for line in path.read_text().splitlines()] == [big]


def test_eval_reads_a_torn_predictions_file_and_a_torn_line_elsewhere_is_still_an_error(tmp_path, capsys):
    path = tmp_path / "predictions.jsonl"
    whole = json.dumps({"instance_id": "a", "model_patch": "P"}) + "\n"
    path.write_bytes(whole.encode() + torn({"instance_id": "b", "model_patch": "Q"}))
    assert [p.instance_id for p in load_predictions(path)] == ["a"]
    assert "line 2 was cut short" in capsys.readouterr().err
    path.write_bytes(torn({"instance_id": "b", "model_patch": "Q"}) + b"\n" + whole.encode())
    with pytest.raises(DatasetError, match="line 1 is not valid JSON"):
        load_predictions(path)


def scripted_config(tmp_path: Path, junior_replies: list) -> Path:
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"junior": [junior_replies]}))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "models": {"junior": {"model": f"scripted/{script}", "prices": {"input": 1.0, "output": 2.0}}},
        "juniors": {"k": 1}, "limits": {"max_steps": 4}, "containers": {"impl": "local_opener:open_local"}}))
    return config


def swepipe(*args: str, cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=timeout)


def test_the_next_run_repairs_a_torn_predictions_file_and_eval_accepts_it(tmp_path, leaky_repo):
    """kill -9 while a prediction was being appended; the next `swepipe run` of that run (nothing left to
    run) repairs the file, and `swepipe eval` reads it."""
    config = scripted_config(tmp_path, ["```bash\nsubmit\n```"])
    layout = RunLayout(tmp_path / "runs" / "torn")
    layout.root.mkdir(parents=True)
    finished = {"instance_id": TASK.instance_id, "model_patch": "", "strategy": "vote", "source": "none",
                "cost": {"junior": 0.0, "total": 0.0}}
    cut = torn({"instance_id": OTHER.instance_id, "model_patch": "diff --git a/x b/x\n", "strategy": "vote"})
    layout.predictions.write_bytes(json.dumps(finished).encode() + b"\n" + cut)
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "SWEPIPE_TEST_REPO": str(leaky_repo["path"]),
           "SWEPIPE_TEST_BASE": leaky_repo["base"], "SWEPIPE_TEST_REFUSE": "1"}  # nothing may run
    done = swepipe("run", "--strategy", "vote", "--instance-ids", TASK.instance_id, "--config", str(config),
                   "--run-id", "torn", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "cut short" in done.stderr
    assert layout.predictions.read_bytes() == json.dumps(finished).encode() + b"\n"
    assert (layout.root / "predictions.jsonl.torn").read_bytes() == cut + b"\n"

    result = {"instance_id": TASK.instance_id, "resolved": False, "category": "tests_failed",
              "patch_sha256": patchtext.digest("")}  # scored before the kill: its (empty) patch
    write_json_atomic(layout.root / "eval" / TASK.instance_id / "result.json", result)
    done = swepipe("eval", "--predictions", str(layout.predictions), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "cut short" not in done.stderr
    assert json.loads((layout.root / "eval" / "summary.json").read_text())["skipped_finished"] == [TASK.instance_id]


# -- one process per run directory -------------------------------------------------------------------

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from pipeline.rundir.layout import RunLayout
    from pipeline.run.lock import lock_run
    lock_run(RunLayout(Path(sys.argv[1])))
    print("locked", flush=True)
    time.sleep(120)
""")


def hold_lock(root: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_a_second_process_on_a_run_is_refused_until_the_holder_dies(tmp_path):
    root = tmp_path / "runs" / "busy"
    holder = hold_lock(root)
    try:
        with pytest.raises(RunLocked, match=rf"in use by another swepipe process \(pid {holder.pid} on "):
            lock_run(RunLayout(root))
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    layout = RunLayout(root)
    lock_run(layout)  # the killed holder's .lock file blocks nobody
    try:
        lock_run(layout)  # again in the same process: no-op
        assert json.loads(layout.lock_file.read_text())["pid"] == os.getpid()
    finally:
        unlock_run(layout)


@pytest.mark.slow
def test_swepipe_run_and_rollouts_on_a_busy_run_exit_2_naming_the_holder(tmp_path, leaky_repo):
    slow_reply = {"content": "```bash\necho looking\n```", "delay": 120}  # the model call the kill lands in
    config = scripted_config(tmp_path, [slow_reply, "```bash\nsubmit\n```"])
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "SWEPIPE_TEST_REPO": str(leaky_repo["path"]),
           "SWEPIPE_TEST_BASE": leaky_repo["base"]}
    command = [sys.executable, "-m", "pipeline.cli", "run", "--strategy", "vote", "--instance-ids", TASK.instance_id,
               "--config", str(config), "--run-id", "busy"]
    first = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lock_file = tmp_path / "runs" / "busy" / ".lock"
    try:
        deadline = time.monotonic() + 120
        while not (lock_file.exists() and lock_file.read_text().strip()):
            assert time.monotonic() < deadline and first.poll() is None, "the first run never took its lock"
            time.sleep(0.1)
        second = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                                stdin=subprocess.DEVNULL, timeout=120)
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"pid {first.pid}" in second.stderr and "in use" in second.stderr
        rollouts = swepipe("rollouts", "--task", TASK.instance_id, "--config", str(config), "--run-id", "busy",
                           cwd=tmp_path, env=env, timeout=120)
        assert rollouts.returncode == 2 and f"pid {first.pid}" in rollouts.stderr
        assert first.poll() is None  # the first run was not disturbed
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    scripted_config(tmp_path, ["```bash\necho looking\n```", "```bash\nsubmit\n```"])  # no delay now
    third = swepipe(*command[3:], cwd=tmp_path, env=env)
    assert third.returncode == 0, third.stdout[-2000:] + third.stderr[-2000:]
    assert TASK.instance_id in finished_predictions(RunLayout(tmp_path / "runs" / "busy").predictions)


# -- atomic writes -----------------------------------------------------------------------------------


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != "result.json")


def test_files_written_atomically_get_the_mode_of_every_other_file_of_a_run(tmp_path):
    """mkstemp makes 0600 files: eval_results.json (and every file written by rename) had that mode, unlike a file
    made by open (predictions.jsonl)."""
    from pipeline.evaluation.batch import EvalSummary, finish_eval
    from pipeline.rundir.storage import redact_file

    append_jsonl(tmp_path / "predictions.jsonl", {"instance_id": "x"})
    finish_eval(tmp_path, EvalSummary())
    write_text_atomic(tmp_path / "error.txt", "Traceback")
    (tmp_path / "stdout.log").write_text("Authorization: Bearer 4f9d8c7b6a5e4d3c2b1a0f9e8d7c6b5a\n")
    redact_file(tmp_path / "stdout.log")
    mode = (tmp_path / "predictions.jsonl").stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask
    for name in ("eval_results.json", "infra_errors.json", "summary.json", "error.txt", "stdout.log"):
        assert (tmp_path / name).stat().st_mode & 0o777 == mode, name


def test_a_failing_atomic_write_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "result.json"
    write_json_atomic(path, {"ok": 1})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"ok": object()})  # not serialisable
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(path, "half a surrogate \udc80")  # fails in the middle of writing
    assert json.loads(path.read_text()) == {"ok": 1} and leftovers(tmp_path) == []


def test_a_full_disk_during_an_atomic_write_leaves_no_temporary_file(tmp_path):
    """RLIMIT_FSIZE makes the write fail as a full disk does (EFBIG instead of ENOSPC), in a child process."""
    script = textwrap.dedent("""
        import resource, signal, sys
        from pathlib import Path
        from pipeline.rundir.storage import write_json_atomic
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            write_json_atomic(Path(sys.argv[1]), {"big": "x" * 100_000})
        except OSError as error:
            print("failed:", error.errno)
    """)
    path = tmp_path / "result.json"
    path.write_text('{"ok": 1}')
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith("failed:"), done.stdout + done.stderr
    assert path.read_text() == '{"ok": 1}' and leftovers(tmp_path) == []


def test_temporary_files_a_killed_process_left_are_removed_on_the_next_start(tmp_path):
    layout = RunLayout(tmp_path / "run")
    old = layout.root / "tasks" / "t" / "junior" / ".rollout-00.json.ab12cd34.tmp"
    fresh = layout.root / ".config.yaml.zz99yy88.tmp"  # another writer's, mid-write
    keep = layout.root / "tasks" / "t" / "notes.tmp"
    for path in (old, fresh, keep):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    repair_run(layout)
    assert not old.exists() and fresh.exists() and keep.exists()
