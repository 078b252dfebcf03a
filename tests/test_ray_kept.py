"""What a node keeps of an attempt until its driver applied it, and how the next driver takes it back
(pipeline.run.ray.kept), without a cluster: which kept folders are taken, which are stale and go, which still run;
the run directory brought to the kept state and no further; cleanups that leave kept folders to the rerun; the queue's
acknowledgement."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import pytest

from pipeline.run.ray.actors import WriteQueueActor
from pipeline.run.ray.kept import ATTEMPT, KeptCopy, forget_attempts, kept_attempts, marker, restore
from pipeline.run.ray.node import remove_scratch, run_folder, session_folder


@pytest.fixture
def node_tmp(tmp_path, monkeypatch):
    """This process's temporary directory (where a node keeps its scratch) inside the test's own."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "node-tmp"))
    (tmp_path / "node-tmp").mkdir()
    return tmp_path / "node-tmp"


def attempt(run_id: str, session: str, key: str, files: dict[str, bytes], written: dict[str, bytes | None],
            close: bool = True) -> tuple[Path, KeptCopy]:
    """An attempt folder as on_node leaves it: shipped ``files``, then ``written`` (None: removed) by the task."""
    item = key.rpartition("#")[0]
    base = session_folder(run_id, session) / f"attempt-{item}-{key.rpartition('#')[2]}"
    scratch = base / run_id
    scratch.mkdir(parents=True)
    for name, data in files.items():
        (scratch / name).parent.mkdir(parents=True, exist_ok=True)
        (scratch / name).write_bytes(data)
    kept = KeptCopy(base, run_id=run_id, session=session, key=key, item=item, folder=f"tasks/{item}",
                    scratch=scratch, shipped=list(files))
    for name, data in written.items():
        if data is None:
            (scratch / name).unlink()
            continue
        kept.wrote(name)
        (scratch / name).parent.mkdir(parents=True, exist_ok=True)
        (scratch / name).write_bytes(data)
    if close:
        kept.close()
    return base, kept


ROW1, ROW2 = b'{"cost": 0.1}\n', b'{"cost": 0.2}\n'


def test_the_attempt_a_task_last_went_to_is_taken_back_stale_ones_go_running_ones_stay(node_tmp):
    shipped = {"tasks/a/ledger.jsonl": ROW1, "tasks/a/junior/rollout-00.trajectory.jsonl": b'{"whole": {}}\n'}
    taken, _ = attempt("r", "old", "a#2", shipped, {"tasks/a/ledger.jsonl": ROW1 + ROW2,
                                                    "tasks/a/junior/rollout-00.trajectory.reply": b'{"key": "k"}',
                                                    "tasks/a/junior/rollout-00.json": b'{"steps": 2}',
                                                    "tasks/a/junior/rollout-00.trajectory.jsonl": None})
    stale, _ = attempt("r", "old", "a#1", {"tasks/a/ledger.jsonl": ROW1}, {})  # a went to a node again since
    done, _ = attempt("r", "older", "b#1", {"tasks/b/ledger.jsonl": ROW1}, {})  # b has no attempt on record: done
    running, held = attempt("r", "old", "c#1", {"tasks/c/ledger.jsonl": ROW1}, {}, close=False)
    mine, _ = attempt("r", "now", "d#1", {"tasks/d/ledger.jsonl": ROW1}, {})  # this driver's own session
    wanted = {"a": marker("old", "a#2"), "c": marker("old", "c#1"), "d": marker("now", "d#1")}

    found, still = kept_attempts("r", "now", False, wanted, wait=0.3)
    assert [k["item"] for k in found] == ["a"] and still == [str(running)]
    kept = found[0]
    assert kept["files"]["tasks/a/ledger.jsonl"] == ROW1 + ROW2
    assert "tasks/a/junior/rollout-00.trajectory.jsonl" not in kept["files"]
    assert set(kept["known"]) >= {"tasks/a/junior/rollout-00.trajectory.jsonl", "tasks/a/junior/rollout-00.json"}
    assert not stale.exists() and not done.exists()  # stale: removed on the node at once
    assert taken.exists() and running.exists() and mine.exists()  # taken ones go once the driver applied them
    held.close()
    assert [k["item"] for k in kept_attempts("r", "now", True, wanted, wait=0)[0]] == ["d"]  # the own session


def test_restoring_brings_the_task_folder_to_the_kept_state_and_touches_nothing_else(tmp_path, node_tmp):
    root = tmp_path / "run"
    for name, data in {"tasks/a/ledger.jsonl": ROW1, "tasks/a/junior/rollout-00.trajectory.jsonl": b"{}\n",
                       "tasks/a/junior/imported.json": b"theirs", "tasks/b/ledger.jsonl": ROW1,
                       "predictions.jsonl": b""}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    attempt("r", "old", "a#1", {"tasks/a/ledger.jsonl": ROW1, "tasks/a/junior/rollout-00.trajectory.jsonl": b"{}\n"},
            {"tasks/a/ledger.jsonl": ROW1 + ROW2, "tasks/a/junior/rollout-00.json": b'{"steps": 1}',
             "tasks/a/junior/rollout-00.trajectory.jsonl": None, "tasks/b/ledger.jsonl": b"not a's"})
    [kept], _ = kept_attempts("r", "now", False, {"a": marker("old", "a#1")}, wait=0)
    assert restore(root, kept) == 3
    assert (root / "tasks/a/ledger.jsonl").read_bytes() == ROW1 + ROW2
    assert json.loads((root / "tasks/a/junior/rollout-00.json").read_text()) == {"steps": 1}
    assert not (root / "tasks/a/junior/rollout-00.trajectory.jsonl").exists()  # the node folded it in
    assert (root / "tasks/a/junior/imported.json").read_bytes() == b"theirs"  # never the attempt's to remove
    assert (root / "tasks/b/ledger.jsonl").read_bytes() == ROW1  # another task's folder: not this attempt's
    assert restore(root, kept) == 0  # taken back twice (a driver killed before the node forgot it): no change
    forget_attempts([kept["attempt"]])
    assert not run_folder("r").exists()  # nothing of the run is left on the node


def test_a_cleanup_keeps_the_attempts_a_rerun_takes_back(node_tmp):
    kept, _ = attempt("r", "old", "a#1", {"tasks/a/ledger.jsonl": ROW1}, {})
    plain = session_folder("r", "old") / "attempt-plain" / "r"  # a scoring's scratch: nothing kept
    plain.mkdir(parents=True)
    (session_folder("r", "old") / "images" / "running").mkdir(parents=True)
    assert remove_scratch(run_folder("r")) == 1
    assert (kept / ATTEMPT).is_file() and not plain.parent.exists()
    assert not (session_folder("r", "old") / "images").exists()
    (kept / ATTEMPT).unlink()  # taken back: nothing holds the folder any more
    assert remove_scratch(run_folder("r")) == 0 and not run_folder("r").exists()


def test_the_queue_says_when_the_driver_applied_what_was_sent_before_an_ack():
    async def scenario() -> tuple[bool, bool, bool]:
        queue = WriteQueueActor()
        early = asyncio.ensure_future(queue.applied("t1", 5.0))
        await asyncio.sleep(0.05)
        await queue.acknowledge("t1")
        await queue.acknowledge("t2")  # before its node asks: still answered
        return await early, await queue.applied("t2", 0.1), await queue.applied("t3", 0.1)

    assert asyncio.run(scenario()) == (True, True, False)
