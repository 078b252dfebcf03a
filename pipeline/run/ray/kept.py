"""What a node keeps of a task's attempt until its driver has applied it, and how the next driver takes it back.

A node hands each write to the run's queue actor, which holds it in memory until the driver applies it to the run
directory; a driver killed meanwhile takes the queue (and any batch it had taken) with it. So a task's attempt on
a node keeps its scratch folder, where every write landed first, until the driver says it applied everything the
attempt sent (pipeline.run.ray.actors.WriteQueueActor.applied); a kill of the driver, of the queue or of the worker
leaves the folder in place, with the attempt's record beside it (``ATTEMPT``: the run, the driver session, the
attempt's key, its process) and every file name the attempt was shipped or wrote (``NAMES``).

The driver records the attempt it last sent each task to (pipeline.rundir.layout.TaskPaths.ray_attempt). The next driver
of the run, before it sends anything (``take_back``), asks every node for the kept folders of the run's other
sessions whose process has ended: the one a task's record names is still that task's latest state, so the task's
folder in the run directory is brought to it (files written, files the attempt removed removed), and the kept
folder goes; one no record names is stale (its task went on elsewhere, or finished) and goes. A driver that lives
on does the same for its own session when it ends (a queue actor that died under it, an attempt cut short at a
stop), so a rerun resumes from every reply that was paid, and pays none twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from pipeline.run.ray.node import remove_tree, run_folder, snapshot

ATTEMPT = "attempt.json"  # in an attempt's folder, beside its scratch
NAMES = "names.txt"  # beside it: every file name the attempt was shipped or wrote, one a line
WAIT_FOR_ENDED = 30.0  # seconds a take-back waits for a killed driver's attempts to end on their node


class KeptAttempt(TypedDict):
    """A kept attempt, as a node reports it to the driver."""

    attempt: str  # its folder on the node
    item: str  # the task (its instance id)
    marker: str  # "<session>/<key>": which attempt it was
    folder: str  # the task's folder, relative to the scratch (and to the run directory)
    files: dict[str, bytes]  # what the scratch holds under ``folder``, relative to the scratch
    known: list[str]  # every name the attempt was shipped or wrote (relative to the scratch)


def marker(session: str, key: str) -> str:
    return f"{session}/{key}"


class KeptCopy:
    """The node's side: an attempt's folder marked as holding writes the driver may not have applied yet (its record,
    locked while the attempt runs, so a take-back can tell a running attempt from one whose process is gone), and
    the names it was shipped and wrote, kept as they come (under the mirror's lock: one writer)."""

    def __init__(self, base: Path, *, run_id: str, session: str, key: str, item: str, folder: str, scratch: Path,
                 shipped: list[str]) -> None:
        self.base, self.known = base, set(shipped)
        record = {"run_id": run_id, "session": session, "key": key, "item": item, "folder": folder,
                  "scratch": scratch.name, "pid": os.getpid()}
        (base / NAMES).write_text("".join(f"{name}\n" for name in sorted(self.known)), encoding="utf-8")
        (base / ATTEMPT).write_text(json.dumps(record), encoding="utf-8")
        self.lock = open(base / ATTEMPT, "rb")  # noqa: SIM115 - held while the attempt runs; never inherited
        fcntl.flock(self.lock, fcntl.LOCK_EX)

    def wrote(self, relative: str) -> None:
        """A write to ``relative`` is about to be sent: its name is on record first."""
        if relative not in self.known:
            self.known.add(relative)
            with open(self.base / NAMES, "a", encoding="utf-8") as names:
                names.write(f"{relative}\n")

    def close(self) -> None:
        """The attempt ended (its process goes on, serving other tasks)."""
        self.lock.close()


def _running(record_path: Path) -> bool:
    """Whether the attempt whose record is ``record_path`` still runs: its process holds the record's lock."""
    with open(record_path, "rb") as record:
        try:
            fcntl.flock(record, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(record, fcntl.LOCK_UN)
    return False


def kept_attempts(run_id: str, session: str, own: bool, wanted: dict[str, str],
                  wait: float = WAIT_FOR_ENDED) -> tuple[list[KeptAttempt], list[str]]:
    """On one node (a Ray task pinned there): the kept attempts of ``run_id`` of every driver session but
    ``session`` (or, ``own``, of ``session`` alone) whose process has ended, waiting up to ``wait`` seconds for
    those still running. An attempt ``wanted`` names for its task (item -> marker) comes back with its files (the
    driver removes it once applied: ``forget_attempts``); any other is stale and removed here. Also returns the
    folders of attempts still running after the wait (left alone)."""
    found: list[KeptAttempt] = []
    running: list[str] = []
    deadline = time.monotonic() + wait
    root = run_folder(run_id)
    for record_path in sorted(root.glob(f"*/attempt-*/{ATTEMPT}")):
        base = record_path.parent
        if (base.parent.name == session) != own:
            continue
        try:
            while _running(record_path) and time.monotonic() < deadline:
                time.sleep(0.5)
            if _running(record_path):
                running.append(str(base))
                continue
            record = json.loads(record_path.read_text(encoding="utf-8"))
            item, folder = str(record["item"]), str(record["folder"])
            mark = marker(str(record["session"]), str(record["key"]))
            if wanted.get(item) != mark:
                remove_tree(base)  # stale: its task was sent again since, or is done
                continue
            scratch = base / str(record["scratch"])
            names = (base / NAMES).read_text(encoding="utf-8").splitlines()
            found.append(KeptAttempt(attempt=str(base), item=item, marker=mark, folder=folder,
                                     files=snapshot(scratch / folder, folder), known=names))
        except (OSError, ValueError, KeyError):
            continue  # removed meanwhile by another node of this machine, or half written by a killed process
    return found, running


def forget_attempts(attempts: list[str]) -> None:
    """On one node: kept attempt folders the driver has applied, removed (those of another machine are not here),
    then their session's and run's folders when nothing else is left in them."""
    paths = [Path(attempt) for attempt in attempts]
    for path in paths:
        if (path / ATTEMPT).is_file():
            remove_tree(path)
    for folder in sorted({p.parent for p in paths} | {p.parent.parent for p in paths}, key=lambda f: -len(f.parts)):
        with contextlib.suppress(OSError):
            folder.rmdir()


def restore(root: Path, kept: KeptAttempt) -> int:
    """The task's folder under ``root`` (the run directory) brought to what the kept attempt holds: files that
    differ written, files the attempt removed removed (nothing outside the task's folder, nothing the attempt never
    knew). Returns how many files changed."""
    from pipeline.rundir.storage import apply_mirrored

    prefix = kept["folder"].rstrip("/") + "/"
    changed = 0
    for name in kept["known"]:
        if name.startswith(prefix) and name not in kept["files"] and (root / name).is_file():
            apply_mirrored(root, "unlink", name, b"")
            changed += 1
    for name, data in kept["files"].items():
        if not name.startswith(prefix):
            continue
        try:
            same = (root / name).read_bytes() == data
        except OSError:
            same = False
        if not same:
            apply_mirrored(root, "write", name, data)
            changed += 1
    return changed


def take_back(ray: Any, root: Path, run_id: str, session: str, wanted: dict[str, str], *, own: bool,
              say: Callable[[str], None], wait: float = WAIT_FOR_ENDED) -> list[str]:
    """The driver's side: what kept attempts of the run hold that the run directory ``root`` lacks, taken back
    (``own``: this session's; else every other session's) for the tasks ``wanted`` names (item -> marker of the
    attempt last sent), stale ones dropped, on every alive node. Returns the tasks taken back."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from pipeline.run.ray.connect import CALL_TIMEOUT, alive_nodes, node_labels

    nodes = alive_nodes(ray)
    labels = node_labels(nodes)

    def on_each(function: Callable[..., Any], *args: Any) -> dict[Any, str]:
        remote = ray.remote(function)
        return {remote.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            node["NodeID"], soft=False)).remote(*args): labels[node["NodeID"]] for node in nodes}

    taken: dict[str, KeptAttempt] = {}
    for ref, label in on_each(kept_attempts, run_id, session, own, wanted, wait).items():
        try:
            found, running = ray.get(ref, timeout=wait + CALL_TIMEOUT)
        except Exception as error:  # noqa: BLE001 - a node that does not answer keeps its copies for a later run
            say(f"ray: {label} did not say what it kept of run {run_id} ({type(error).__name__}); a later session "
                "of the run takes it back")
            continue
        for path in running:
            say(f"ray: {label}: an attempt of run {run_id} still runs ({path}); a later session takes it back")
        for kept in found:
            if wanted.get(kept["item"]) == kept["marker"]:
                taken.setdefault(kept["marker"], kept)  # nodes of one machine see the same folders
    for kept in taken.values():
        changed = restore(root, kept)
        if changed:
            say(f"ray: task {kept['item']}: took back {changed} file(s) its node wrote that the driver had not "
                "applied (a driver or its write queue went away first)")
    if taken:
        for ref in on_each(forget_attempts, [kept["attempt"] for kept in taken.values()]):
            with contextlib.suppress(Exception):
                ray.get(ref, timeout=CALL_TIMEOUT)
    return sorted({kept["item"] for kept in taken.values()})
