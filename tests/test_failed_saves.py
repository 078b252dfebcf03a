"""A save of an agent's trajectory that fails (the disk full, an I/O error) never puts its journal out of step: the
journal then holds exactly what the last good save held, the next good save brings it level with the agent, and
the failure says what the write met. An agent whose save fails stops there (an infrastructure fault, no result),
and the rerun resumes with every paid reply, none paid twice: on a real filesystem that fills up (a tmpfs the test
mounts) and with the error injected at every save of a rollout."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from test_junior_rollouts import SUBMIT, bash, run_scripts, shop_repo  # noqa: F401 - shop_repo: a fixture
from test_trajectory_journal import OPERATIONS, _act

from pipeline.agent import journal as journal_module
from pipeline.agent.agent import Agent, prompt
from pipeline.agent.agent_run import AgentRun
from pipeline.agent.journal import TrajectoryJournal
from pipeline.agent.settings import AgentSettings
from pipeline.agent.transcript import Transcript
from pipeline.errors import InfrastructureFault, StorageFault
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.models.ledger import Ledger
from pipeline.records.trajectory import read_trajectory
from pipeline.rundir import storage
from pipeline.rundir.layout import JuniorFiles, TaskPaths, trajectory_journal
from pipeline.runtime.local import LocalRuntime
from pipeline.settings.config import Limits
from pipeline.settings.model_spec import ModelSpec

SAVE_FAILED = (OSError, InfrastructureFault)  # what a failed save may raise (a StorageFault: infrastructure)
FAILURES = {errno.ENOSPC: "disk full (ENOSPC: No space left on device)",
            errno.EIO: "I/O error (EIO: Input/output error)"}


def _failing_append(real, failing: set[int], half_line: bool, counter: list[int]):
    """``append_jsonl`` whose calls numbered in ``failing`` fail with ENOSPC (odd) or EIO (even): before writing
    anything, or (``half_line``) after the first half of the line reached the file, as a process that could not
    undo it leaves it."""
    def append(path: Path, record: dict) -> None:
        number = counter[0]
        counter[0] += 1
        if number not in failing:
            return real(path, record)
        if half_line:
            line = json.dumps(record).encode()
            with open(path, "ab") as handle:
                handle.write(line[:len(line) // 2])
        code = errno.ENOSPC if number % 2 else errno.EIO
        raise OSError(code, os.strerror(code))
    return append


@settings(deadline=None)  # each example writes files: its time is the disk's, not the code's
@given(operations=OPERATIONS, failing=st.sets(st.integers(0, 24), max_size=12), half_line=st.booleans(),
       whole_at_end=st.booleans())
def test_after_any_mix_of_failed_and_good_saves_the_journal_folds_to_what_was_saved(
        tmp_path_factory, operations, failing, half_line, whole_at_end):
    path = tmp_path_factory.mktemp("t") / "trajectory.json"
    journal = TrajectoryJournal(path, whole_at_end=whole_at_end)
    transcript = Transcript(AgentRun(name="a", messages=[{"role": "system", "content": "s"}]))
    saved, counter, said = None, [0], []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(journal_module, "append_jsonl", _failing_append(storage.append_jsonl, failing, half_line,
                                                                      counter))
        for operation in operations:
            _act(transcript, operation)
            try:
                journal.save(transcript, 1.5)
            except SAVE_FAILED as failed:
                # The journal holds what the last good save left, nothing made up, nothing lost before it.
                assert read_trajectory(path).data == saved or (saved is None and read_trajectory(path).problem)
                said.append(str(failed))
                continue
            saved = transcript.record.to_dict()
            assert read_trajectory(path).data == saved
            resumed = TrajectoryJournal(path, whole_at_end=whole_at_end).load()
            assert resumed is not None and resumed.to_dict() == {**saved, "resumed": True}
    journal.end_session(transcript, 2.0)  # the disk is back: the session's last save brings it level
    assert read_trajectory(path).data == transcript.record.to_dict()
    assert all(any(failure in text for failure in FAILURES.values()) for text in said), said  # what it met


# ---------------------------------------------------------------- a real filesystem that fills up


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KB tmpfs mounted for the test (CI runs as root), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root): this test did not run")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """``disk`` filled to its last byte by one file, returned (remove it to free the space)."""
    filler = disk / "filler"
    with open(filler, "ab", buffering=0) as handle, contextlib.suppress(OSError):
        while True:
            handle.write(b"\0" * 4096)
    with open(filler, "ab", buffering=0) as handle, contextlib.suppress(OSError):
        while True:
            handle.write(b"\0")
    return filler


def test_a_disk_full_at_step_1_then_freed_leaves_every_step_in_the_journal(small_disk, capsys):
    path = small_disk / "trajectory.json"
    journal = TrajectoryJournal(path, whole_at_end=False)
    transcript = Transcript(AgentRun(name="a", messages=[{"role": "system", "content": "s"}]))
    failures = []
    for number in range(3):
        if number == 1:
            filler = fill(small_disk)
        _act(transcript, ("reply", f"step {number}", 1))
        _act(transcript, ("answer", f"output of step {number} " * 400, 1))  # ~7 KB: more than a page's slack
        try:
            journal.save(transcript, 1.0)
        except SAVE_FAILED as failed:
            failures.append((number, str(failed)))
            # Cut back to its last whole line: nothing half written is left for a later repair to guess about.
            assert trajectory_journal(path).read_bytes().endswith(b"\n")
            assert [s["reply"] for s in read_trajectory(path).data["steps"]] == ["step 0"]
            filler.unlink()
    assert len(transcript.record.steps) == 3
    assert [s["reply"] for s in read_trajectory(path).data["steps"]] == ["step 0", "step 1", "step 2"]
    assert read_trajectory(path).data == transcript.record.to_dict()
    resumed = TrajectoryJournal(path, whole_at_end=False).load()
    assert resumed is not None and [s.reply for s in resumed.steps] == ["step 0", "step 1", "step 2"]
    assert resumed.to_dict() == {**transcript.record.to_dict(), "resumed": True}
    assert not list(small_disk.glob("*.torn")) and "killed" not in capsys.readouterr().err
    assert [number for number, _ in failures] == [1]
    assert "disk full (ENOSPC" in failures[0][1] and str(trajectory_journal(path)) in failures[0][1]


def test_a_half_line_a_failed_write_could_not_take_back_is_named_as_that(tmp_path, monkeypatch, capsys):
    """When even cutting the file back fails, the repair of the half line says what the write met, not a kill."""
    path = tmp_path / "ledger.jsonl"
    storage.append_jsonl(path, {"n": 1})

    class Failing:
        """The file object of the append: half the line written, then EIO; cutting back fails too."""

        def __init__(self, handle):
            self.handle = handle

        def __getattr__(self, name):
            return getattr(self.handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.handle.__exit__(*exc)

        def write(self, data):
            self.handle.write(data[:len(data) // 2])
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        def truncate(self, size):
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: Failing(real_open(*a, **k)) if a[0] == path else
                        real_open(*a, **k))
    with pytest.raises(OSError) as failed:
        storage.append_jsonl(path, {"n": 2, "text": "x" * 100})
    assert storage.write_failure(failed.value) == "I/O error (EIO: Input/output error)"
    monkeypatch.undo()
    storage.append_jsonl(path, {"n": 3})
    assert [json.loads(line)["n"] for line in path.read_text().splitlines()] == [1, 3]
    said = " ".join(capsys.readouterr().err.split())
    assert "cut short by a write that failed (I/O error (EIO: Input/output error))" in said, said


# ---------------------------------------------------------------- an agent whose save fails


def _agent(script: Path, runtime, trajectory: Path, ledger: Ledger, max_steps: int = 6) -> Agent:
    client = ModelClient(ModelSpec(model=f"scripted/{script}", free=True), "junior", ledger, task="t")
    messages = prompt("agent_system.md.j2", "agent_instance.md.j2", workdir=str(runtime.workdir),
                      command_timeout=60, max_steps=max_steps, task_text="fix it", tools=False, editor=False)
    return Agent(AgentSettings("rollout-00", client, runtime, Budget("r"), Limits(max_steps=max_steps),
                               messages=messages, trajectory_path=trajectory, whole_trajectory=False))


def test_an_agent_whose_disk_fills_at_step_1_stops_as_a_fault_and_resumes_with_every_step(
        small_disk, tmp_path, leaky_repo):
    marker = tmp_path / "filled-once"
    commands = ["echo looking", f"test -e {marker} || head -c 400000 /dev/zero > {small_disk}/filler; "
                f"touch {marker}; seq 1 2000", "echo after", "submit"]
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"junior": [[f"```bash\n{c}\n```" for c in commands]]}))
    trajectory, ledger = small_disk / "rollout-00.trajectory.json", Ledger(tmp_path / "ledger.jsonl")
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime:
        agent = _agent(script, runtime, trajectory, ledger)
        with pytest.raises(SAVE_FAILED) as failed:
            agent.run()
    assert "disk full (ENOSPC" in str(failed.value)
    assert agent.record.exit_reason == ""  # no outcome was made of it (runtime_error would be one)
    (small_disk / "filler").unlink()
    saved = read_trajectory(trajectory).data
    assert [s["command"] for s in saved["steps"]] == [commands[0], None]  # step 1's reply saved, not its answer
    assert [s["reply"] for s in saved["steps"]] == [s.reply for s in agent.record.steps]
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime:
        again = _agent(script, runtime, trajectory, ledger)
        assert again.resume()
        run = again.run()
    assert run.exit_reason == "submitted" and [s.command for s in run.steps] == commands
    assert read_trajectory(trajectory).data == run.to_dict()
    rows = Ledger.read(tmp_path / "ledger.jsonl")
    assert len(rows) == len(run.steps) == 4 and all(row.error is None for row in rows)  # each reply paid once
    assert not list(small_disk.glob("*.torn"))


def test_a_fault_between_the_first_reply_and_its_row_costs_nothing_again_in_a_new_workspace(
        tmp_path, leaky_repo, monkeypatch):
    """The first reply is journaled, then its ledger row cannot be written (a kill, a queue gone): the rerun opens a
    new workspace at another path (the local runtime's clone, a node's scratch) and still pays that reply once,
    since the opening it was asked with is on disk before the call."""
    served = tmp_path / "served.jsonl"
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"junior": [["```bash\necho one\n```", "```bash\nsubmit\n```"]],
                                      "served": str(served)}))
    trajectory, ledger = tmp_path / "rollout-00.trajectory.json", Ledger(tmp_path / "ledger.jsonl")
    real, failed = Ledger.append, []

    def append(self, row):
        if not failed:
            failed.append(row)
            raise StorageFault("the ledger could not be written (injected)")
        real(self, row)

    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime, monkeypatch.context() as patch:
        first = runtime.workdir
        patch.setattr(Ledger, "append", append)
        with pytest.raises(StorageFault):
            _agent(script, runtime, trajectory, ledger).run()
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime:
        assert runtime.workdir != first
        again = _agent(script, runtime, trajectory, ledger)
        assert again.resume()
        run = again.run()
    assert run.exit_reason == "submitted" and len(run.steps) == 2
    positions = [json.loads(line)["position"] for line in served.read_text().splitlines()]
    assert positions == [0, 1]  # each reply paid once
    assert len(Ledger.read(tmp_path / "ledger.jsonl")) == 2


def _rollout_scripts() -> list:
    return [[bash("echo one > one.txt"), bash("cat one.txt && echo two >> one.txt"), SUBMIT]]


def _outcome(paths: TaskPaths) -> dict:
    record = json.loads(JuniorFiles(paths.junior).rollout(0).read_text())
    steps = record["trajectory"]["steps"]
    return {"exit": record["exit_reason"], "patch": record["patch"], "steps": record["steps"],
            "commands": [s["command"] for s in steps], "outputs": [s["output"] for s in steps],
            "replies": [s["reply"] for s in steps]}


@pytest.mark.slow
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_a_write_error_at_any_save_of_a_rollout_is_a_fault_and_the_rerun_loses_and_repays_nothing(
        shop_repo, tmp_path, run_id, monkeypatch, code):  # noqa: F811
    clean = tmp_path / "clean"
    clean.mkdir()
    real = storage.append_jsonl
    saves = {"made": 0, "failing": 0}  # the journal's appends so far; the one to fail (0: none)

    def append(path: Path, record: dict) -> None:
        saves["made"] += 1
        if saves["made"] == saves["failing"]:
            raise OSError(code, os.strerror(code))
        real(path, record)

    monkeypatch.setattr(journal_module, "append_jsonl", append)
    run_scripts(shop_repo, clean, run_id, monkeypatch, _rollout_scripts(), k=1)
    total, expected = saves["made"], _outcome(TaskPaths(clean))
    assert total == 7 and expected["exit"] == "submitted" and expected["steps"] == 3  # opening, reply, answer, end
    for failing in range(1, total + 1):
        work = tmp_path / f"save-{failing}"
        work.mkdir()
        saves.update(made=0, failing=failing)
        with pytest.raises(SAVE_FAILED) as failed:
            run_scripts(shop_repo, work, run_id, monkeypatch, _rollout_scripts(), k=1)
        assert FAILURES[code] in str(failed.value), (failing, failed.value)
        paths = TaskPaths(work)
        assert not JuniorFiles(paths.junior).rollout(0).exists()  # no result was made of the fault
        saves.update(failing=0)
        run_scripts(shop_repo, work, run_id, monkeypatch, _rollout_scripts(), k=1)  # the same command again
        assert _outcome(paths) == expected, failing
        answered = [row for row in Ledger.read(paths.ledger) if row.error is None]
        assert len(answered) == 3, (failing, answered)  # each reply paid once
        assert not list(work.rglob("*.torn")) and not list(paths.junior.glob("*.trajectory.*")), failing


# ---------------------------------------------------------------- a paid reply whose journal or row cannot be written


@pytest.mark.parametrize("full", ["reply", "row"])
def test_a_paid_reply_whose_journal_or_ledger_row_meets_a_full_disk_is_a_fault_with_its_spend_on_record(
        small_disk, tmp_path, full):
    """The reply was paid whatever the disk says: its cost is settled, its row written where the ledger can be
    written, the caller stops with a StorageFault that says which write failed (never an outcome of its own), and
    the rerun pays only what was not saved. Every reply paid is one ledger row."""
    served = tmp_path / "served.jsonl"
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"served": str(served), "junior": [[
        {"content": "paid", "usage": {"prompt_tokens": 100, "completion_tokens": 10}}]]}))
    place = {"reply": small_disk if full == "reply" else tmp_path, "row": small_disk if full == "row" else tmp_path}
    journal, ledger_path = place["reply"] / "reply.journal", place["row"] / "ledger.jsonl"
    spec = ModelSpec(model=f"scripted/{script}", prices={"input": 1.0, "output": 2.0})
    messages = [{"role": "user", "content": "hi"}]
    budget = Budget("task")
    filler = fill(small_disk)
    with pytest.raises(StorageFault) as failed:
        ModelClient(spec, "junior", Ledger(ledger_path), task="t").complete(messages, budget, journal=journal)
    said = str(failed.value)
    assert "a junior call was paid" in said and "disk full (ENOSPC" in said, said
    assert budget.spent == pytest.approx(100 / 1e6 + 10 * 2 / 1e6)  # settled at its cost, not released
    if full == "reply":
        assert "its reply could not be saved" in said and "its cost is in the ledger" in said
        assert not journal.exists() and len(Ledger.read(ledger_path)) == 1
    else:
        assert "its reply is saved" in said and "its ledger row could not be written" in said
        assert json.loads(journal.read_text())["completion"]["content"] == "paid"
        assert Ledger.read(ledger_path) == []
    filler.unlink()
    again = ModelClient(spec, "junior", Ledger(ledger_path), task="t").complete(messages, Budget("task"),
                                                                                  journal=journal)
    assert again.content == "paid"
    paid = served.read_text().splitlines()
    assert len(paid) == (2 if full == "reply" else 1)  # a reply that could not be saved is asked again
    assert len([row for row in Ledger.read(ledger_path) if row.error is None]) == len(paid)
