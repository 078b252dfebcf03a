"""The worker's side of a run or scoring on the cluster: a scratch folder whose writes go to the driver, the
run's stop flag watched, container limits sized from the node, and the node's image cache.

What a driver session leaves on a node is its own: scratch folders under ``session_folder(run_id, session)`` (the
run id one whole path component, the session a nonce of the driver) and containers labelled with the run id and
the session; its cleanup removes exactly those, never another run's whose id merely starts the same."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict
from urllib.parse import quote

from pipeline.control import stopping
from pipeline.errors import InfrastructureFault, RuntimeUnavailable, SwepipeError, describe, ignoring_errors
from pipeline.models.budget import Budget
from pipeline.records import EvalResult, Prediction
from pipeline.run.ray.actors import RemoteRunBudget, ask
from pipeline.run.ray.connect import CALL_TIMEOUT, RESOURCE
from pipeline.run.task import RunSettings, run_one_task
from pipeline.rundir.layout import RunLayout
from pipeline.runtime.limits import container_limits, fill_defaults
from pipeline.tasks import Task

if TYPE_CHECKING:
    from pipeline.evaluation.runner import EvalSettings
    from pipeline.run.ray.kept import KeptCopy

STOP_POLL = 0.5  # seconds between a worker's looks at the run's stop flag
TEMP_SUFFIX = ".tmp"

# An item of the run's write queue, worker to driver: (attempt key, op, path relative to the driver's folder, data).
Write = tuple[str, str, str, bytes]


class AttemptOutcome(TypedDict, total=False):
    """What a Ray task's body returns for one attempt (it never raises), for the driver (pipeline.run.ray.driver):
    the work done and the node that did it, or why there is none."""

    prediction: Prediction  # a run's task, finished
    result: EvalResult  # a scoring's result record
    node_id: str
    stopped: bool  # a stop ended it: the driver's, or a ``fault`` every task would meet (exit ``code``)
    fault: str | None
    code: int
    infra: str  # an infrastructure fault outside the work, described


class NodeSizing(TypedDict):
    """What a node's container limits are sized from (``node_sizing``), recorded in a task's limits.json."""

    node: str
    docker_slots: int
    node_cpus: int
    node_memory: str


@dataclasses.dataclass
class TaskShipment:
    """Everything one attempt of a task needs on its node, sent with the Ray task."""

    task: Task
    run: RunSettings  # as resolved on the driver; its layout is the driver's (only the run id is used)
    key: str  # "<instance id>#<attempt>": the writes it sends are dropped once another attempt replaces it
    session: str  # the driver's nonce: what this attempt leaves on the node is named by the run id and it
    files: dict[str, bytes]  # the task's folder as the driver holds it, relative to the run directory
    eval_files: dict[str, bytes]  # run scripts and Dockerfiles for scoring, relative to their folders
    queue: object  # pipeline.run.ray.actors.WriteQueue
    budget: object | None  # RunBudgetKeeper actor, None when the run has no budget
    run_limit: float | None
    stop: object  # StopFlag actor
    ack_timeout: float = 60.0  # seconds the attempt waits, at its end, for the driver to apply what it sent


@dataclasses.dataclass
class OnNode:
    """Where a Ray task works on its node: ``scratch`` stands for the driver's folder (the run directory, scoring's
    output folder); what is written under it through pipeline.rundir.storage goes to the driver as it is made."""

    node_id: str
    base: Path  # the scratch folder's parent, removed afterwards (shipped run scripts go here too)
    scratch: Path
    key: str
    session: str
    put: Callable[[Write], None]

    def log(self, line: str) -> None:
        self.put((self.key, "log", "", line.encode("utf-8")))


@contextlib.contextmanager
def on_node(run_id: str, session: str, key: str, queue: Any, stop: Any, files: dict[str, bytes], folder: str,
            name: str | None = None, keep_until_applied: float | None = None) -> Iterator[OnNode]:
    """A Ray task's work on its node, for the driver's attempt ``key``: ``files`` (paths relative to the driver's
    folder) copied into a scratch folder named ``name`` (default ``run_id``), every write under it sent to the
    driver through ``queue`` as it is made, the driver's ``stop`` flag watched (a stop stops this process's work
    as a signal would); afterwards what else changed under ``folder`` is sent, and the scratch goes. The scratch
    and the containers started meanwhile belong to the driver's ``session`` of ``run_id``.

    With ``keep_until_applied`` (seconds), the scratch goes only once the driver says it applied everything sent
    (waiting that long at most); until then it is kept, marked, for the next driver of the run to take back
    (pipeline.run.ray.kept), so nothing this attempt saved is lost with a driver or a queue that went away."""
    import ray

    from pipeline.rundir import storage
    from pipeline.runtime import containers

    put = sender(queue)
    node_id = ray.get_runtime_context().get_node_id()
    parent = session_folder(run_id, session)
    parent.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="attempt-", dir=parent))
    scratch = base / (name or run_id)
    scratch.mkdir(parents=True, exist_ok=True)
    sent: dict[str, hashlib._Hash] = {}  # what the driver holds: relative path -> its running sha256
    for relative, data in files.items():
        target = scratch / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        sent[relative] = hashlib.sha256(data)
    kept = None
    if keep_until_applied is not None:
        from pipeline.run.ray.kept import KeptCopy

        kept = KeptCopy(base, run_id=run_id, session=session, key=key, item=key.rpartition("#")[0], folder=folder,
                        scratch=scratch, shipped=list(files))

    def sink(op: str, relative: str, data: bytes) -> None:  # under the mirror's lock, after the local write
        if kept is not None and op != "unlink":
            kept.wrote(relative)
        put((key, op, relative, data))
        if op == "unlink":
            sent.pop(relative, None)
        elif op == "append" and relative in sent:
            sent[relative].update(data)  # a journal's line: never the whole file read again
        else:
            sent[relative] = hashlib.sha256(data if op == "write" else (scratch / relative).read_bytes())

    if not ask(stop.is_set, what="the run's stop flag (a Ray actor on the head)"):
        stopping.reset()  # this worker process may have served a stopped run before
    watcher = _StopWatcher(stop)
    put((key, "start", node_id, str(os.getpid()).encode()))
    storage.set_mirror(scratch, sink)
    containers.set_session(session)
    try:
        yield OnNode(node_id=node_id, base=base, scratch=scratch, key=key, session=session, put=put)
    finally:
        containers.set_session(None)
        storage.clear_mirror()
        watcher.close()
        with contextlib.suppress(Exception):  # a fault too
            _reconcile(scratch, folder, sent, put, key, kept)
        done = kept is None or applied(queue, put, key, keep_until_applied or 0.0)
        if kept is not None:
            kept.close()  # the attempt is over: a take-back may have what it kept from here on
        if done:
            left = remove_tree(base)
            if left:
                with contextlib.suppress(Exception):  # a fault too
                    put((key, "log", "", f"ray: could not remove this attempt's scratch {base}: {left}".encode()))


def applied(queue: Any, put: Callable[[Write], None], key: str, timeout: float) -> bool:
    """Whether the driver has applied every write attempt ``key`` sent (an ack put after them comes back), within
    ``timeout`` seconds; False also when the queue or the driver is gone."""
    token = f"{key}@{uuid.uuid4().hex}"
    try:
        put((key, "ack", token, b""))
        return bool(ask(queue.actor.applied, token, timeout, what="the run's write queue (a Ray actor on the head)",
                        timeout=timeout + CALL_TIMEOUT))
    except Exception:  # noqa: BLE001 - gone (a fault too): the scratch stays for the next driver
        return False


def work_on_node(shipment: TaskShipment) -> AttemptOutcome:
    """A Ray task's body: run the task in a scratch copy of its folder, every write sent to the driver; container
    limits the config leaves unset sized from this node; with containers.image_cache_gb, the node's images of the
    run's finished tasks pruned afterwards. Its value says how it ended (``ended_by``): never by raising."""
    from pipeline.control.outages import BREAKERS
    from pipeline.models.client import charge_abandoned_calls
    from pipeline.runtime import containers

    task = shipment.task
    try:
        with on_node(shipment.run.layout.run_id, shipment.session, shipment.key, shipment.queue, shipment.stop,
                     shipment.files, f"tasks/{task.instance_id}", keep_until_applied=shipment.ack_timeout) as node:
            run = _local_settings(shipment, node)
            remote = RemoteRunBudget(shipment.budget, shipment.key) if shipment.budget is not None else None
            run_budget = Budget("run", shipment.run_limit, remote=remote)
            images = NodeImages.for_task(run, task, node)
            started = time.monotonic()
            BREAKERS.announce = node.log  # an endpoint's pause and recovery, in the driver's log
            try:
                containers.install_cleanup_handlers()  # a stop removes this process's containers at once
                prediction = run_one_task(task, run, run_budget, log=node.log)
                prediction = prediction.model_copy(update={"wall_seconds": round(time.monotonic() - started, 2)})
                return {"prediction": prediction, "node_id": node.node_id}
            except stopping.Stopped:
                charge_abandoned_calls()  # their rows reach the driver with the task's other writes
                return stopped_here(node.node_id)
            finally:
                BREAKERS.announce = None
                if images is not None:
                    images.finish(node)
    except (stopping.Stopped, InfrastructureFault) as error:  # before or after the task: no answer either way
        return ended_by(error)


def stopped_here(node_id: str) -> AttemptOutcome:
    """A Ray task's value when the work on its node was stopped: by the driver's stop flag, or by a fault this
    process met that every task would meet (its reason and exit code, for the driver to stop the run with)."""
    return {"stopped": True, "node_id": node_id, "fault": stopping.reason(), "code": stopping.exit_code()}


def ended_by(error: BaseException) -> AttemptOutcome:
    """A Ray task's value when a stop or an infrastructure fault ended it outside its work (joining the run's
    actors, sending its writes): its value says so rather than a Ray task error."""
    if isinstance(error, stopping.Stopped):
        return stopped_here("")
    return {"infra": describe(error)}


def sender(queue: Any) -> Callable[[Write], None]:
    def put(item: Write) -> None:  # returns once the queue holds it: order kept
        ask(queue.actor.put, item, what="the run's write queue (a Ray actor on the head)")
    return put


def _local_settings(shipment: TaskShipment, node: OnNode) -> RunSettings:
    """The run's settings pointing at the scratch copy; rollouts reused from another run were copied into the
    task's folder by the driver, and scoring's run scripts and Dockerfiles were shipped. Container limits the
    config leaves unset are sized here, from this node, and recorded in the task's ``limits.json``."""
    run = shipment.run
    config = run.config
    evaluation = None if run.evaluation is None else local_eval_settings(run.evaluation, shipment.eval_files,
                                                                         node.base)
    if config.containers.impl is None:
        sizing = node_sizing(node.node_id)
        config = config.model_copy(update={"containers": fill_defaults(config.containers, sizing["docker_slots"])})
        limits = container_limits(config.containers)
        if evaluation is not None:
            evaluation = dataclasses.replace(evaluation, limits=limits)
        from pipeline.rundir.storage import write_json_atomic

        given = {field: getattr(run.config.containers, field) for field in LIMIT_FIELDS
                 if getattr(run.config.containers, field) is not None}
        write_json_atomic(RunLayout(node.scratch).task(shipment.task.instance_id).limits,
                          {**sizing, "limits": limits.describe(), "given": given})
    return dataclasses.replace(run, config=config, layout=RunLayout(node.scratch), reuse_juniors_from=None,
                               evaluation=evaluation)


LIMIT_FIELDS = ("cpus", "memory", "pids_limit", "tmp_size", "file_size", "disk")


def node_sizing(node_id: str) -> NodeSizing:
    """What this node's container limits are sized from: its machine (CPUs, memory) and the docker_slots it
    declared (the containers it runs at once)."""
    import ray

    from pipeline.runtime.limits import format_size, machine_cpus, machine_memory

    slots = 1
    listed: Callable[[], list[dict[str, Any]]] = ray.nodes  # Ray leaves it unannotated
    with ignoring_errors():
        for found in listed():
            if found.get("NodeID") == node_id:
                slots = max(1, int(found.get("Resources", {}).get(RESOURCE, 1)))
    return {"node": socket.gethostname(), "docker_slots": slots, "node_cpus": machine_cpus(),
            "node_memory": format_size(machine_memory())}


def local_eval_settings(evaluation: EvalSettings, eval_files: dict[str, bytes], base: Path) -> EvalSettings:
    """Scoring's settings with the run scripts and Dockerfiles the driver shipped (written under ``base``)."""
    if not eval_files:
        return evaluation
    for relative, data in eval_files.items():
        target = base / "eval-inputs" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return dataclasses.replace(
        evaluation,
        run_scripts=base / "eval-inputs" / "run_scripts" if evaluation.run_scripts else None,
        dockerfiles=base / "eval-inputs" / "dockerfiles" if evaluation.dockerfiles else None)


class _ImageState(TypedDict, total=False):
    """A task's image on the node, as NodeImages keeps it: running (with its process) or finished (when)."""

    image: str
    pid: int
    time: float


class ImageCacheRow(TypedDict):
    """A line of the run's image_cache.jsonl: a node's prune after a task."""

    after_task: str
    node: str
    keep_bytes: int
    run_images_bytes: int
    removed: list[str]
    kept_in_use: list[str]
    running: list[str]
    time: float


class NodeImages:
    """The run's task images on one node, pruned within ``containers.image_cache_gb`` after each task there.

    Ray tasks on a node run in separate processes, so the node's share of the run is a folder in its temporary
    directory: which tasks run there now (their worker's pid) and which finished there. After a task, the images
    of the run's tasks finished on the node (and their sanitised copies) are removed least recently used first
    until the run's images there take at most the budget, never one a task running there holds or a running
    swepipe container uses; each prune is a line of the run's ``image_cache.jsonl``, naming the node."""

    def __init__(self, run_id: str, session: str, instance_id: str, image: str, keep_bytes: int) -> None:
        self.state = session_folder(run_id, session) / "images"
        self.instance_id, self.image, self.keep = instance_id, image, keep_bytes
        for folder in ("running", "finished"):
            (self.state / folder).mkdir(parents=True, exist_ok=True)
        self._write("running", {"image": self.image, "pid": os.getpid()})

    @classmethod
    def for_task(cls, run: RunSettings, task: Task, node: OnNode) -> NodeImages | None:
        containers_config = run.config.containers
        if containers_config.impl is not None or containers_config.image_cache_gb is None:
            return None
        from pipeline.runtime.images.disk import GB
        from pipeline.runtime.images.names import run_image_names

        try:
            image = run_image_names([task], run.image_template)[0]
        except SwepipeError:
            return None  # a template the task cannot fill: the task itself records that error
        return cls(run.layout.run_id, node.session, task.instance_id, image,
                   int(containers_config.image_cache_gb * GB))

    def _write(self, folder: str, record: _ImageState) -> None:
        import json

        path = self.state / folder / f"{self.instance_id}.json"
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.write_text(json.dumps(record))
        temporary.replace(path)

    def _read(self, folder: str) -> list[_ImageState]:
        import json

        found = []
        for path in sorted((self.state / folder).glob("*.json")):
            with contextlib.suppress(OSError, ValueError):
                found.append(json.loads(path.read_text()))
        return found

    def finish(self, node: OnNode) -> ImageCacheRow | None:
        """After the task (never fails it): this task's image counts as finished on the node, then the prune."""
        import fcntl

        from pipeline.runtime.images.disk import gb, run_images_bytes, touch
        from pipeline.runtime.images.prune import prune

        (self.state / "running" / f"{self.instance_id}.json").unlink(missing_ok=True)
        if stopping.requested():
            return None  # a stop: no Docker work now
        self._write("finished", {"image": self.image, "time": time.time()})
        try:
            with open(self.state / ".lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # one prune at a time on the node
                running = {r["image"] for r in self._read("running") if _alive(r.get("pid"))}
                finished = self._read("finished")
                for record in finished:  # least recently used first: when each finished on this node
                    touch(record["image"], record.get("time"))
                names = list(dict.fromkeys(r["image"] for r in finished))
                result = prune([n for n in names if n not in running], self.keep, protect=running)
                used = run_images_bytes([*running, *names])
        except RuntimeUnavailable as exc:  # a Docker fault here is logged, never the task's result
            node.log(f"image cache on {socket.gethostname()}: could not prune after {self.instance_id}: {exc}")
            return None
        except InfrastructureFault:
            raise
        except Exception as exc:  # noqa: BLE001 - nor is anything else the prune meets
            node.log(f"image cache on {socket.gethostname()}: could not prune after {self.instance_id}: {exc}")
            return None
        row: ImageCacheRow = {
            "after_task": self.instance_id, "node": socket.gethostname(), "keep_bytes": self.keep,
            "run_images_bytes": used, "removed": result.removed, "kept_in_use": result.kept_in_use,
            "running": sorted(running), "time": round(time.time(), 3)}
        from pipeline.rundir.storage import append_jsonl

        append_jsonl(RunLayout(node.scratch).image_cache, row)  # to the driver's run directory
        if result.removed:
            node.log(f"image cache on {socket.gethostname()}: removed {len(result.removed)} image(s) of finished "
                     f"tasks; the run's images there take {gb(used)} (budget {gb(self.keep)})")
        return row


def _alive(pid: Any) -> bool:
    """Whether process ``pid`` runs; ``pid`` as a node's file holds it, any JSON value."""
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError):
        return False
    return True


class _StopWatcher:
    """Polls the run's stop flag; when the driver stops the run, stops this process's work as a signal would."""

    def __init__(self, flag: Any) -> None:
        self.flag, self.done = flag, threading.Event()
        self.thread = threading.Thread(target=self._watch, name="stop watcher", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        import ray

        while not self.done.wait(STOP_POLL):
            try:
                if ray.get(self.flag.is_set.remote(), timeout=CALL_TIMEOUT):
                    stopping.request()
                    return
            except InfrastructureFault:
                raise
            except Exception:  # noqa: BLE001 - the head is unreachable: the driver decides what happens
                continue

    def close(self) -> None:
        self.done.set()


def _reconcile(scratch: Path, folder: str, sent: dict[str, hashlib._Hash], put: Callable[[Write], None], key: str,
               kept: KeptCopy | None = None) -> None:
    """After the task: files changed by other means than pipeline.rundir.storage (scoring logs, patch files) are
    sent whole, and files that went (a trajectory folded into its rollout record) are removed there too;
    ``kept`` is told the names sent."""
    if not scratch.is_dir():
        return  # removed under the task by someone else: what it wrote went already, and the driver keeps it
    root = scratch / folder
    seen = set()
    for path in sorted(root.rglob("*")) if root.is_dir() else []:
        if not path.is_file() or (path.name.startswith(".") and path.name.endswith(TEMP_SUFFIX)):
            continue
        relative = path.relative_to(scratch).as_posix()
        seen.add(relative)
        data = path.read_bytes()
        held = sent.get(relative)
        if held is None or held.hexdigest() != _digest(data):
            if kept is not None:
                kept.wrote(relative)
            put((key, "write", relative, data))
    for relative in sorted(set(sent) - seen):
        if relative.startswith(folder + "/"):
            put((key, "unlink", relative, b""))


def snapshot(root: Path, prefix: str) -> dict[str, bytes]:
    """Every file under ``root`` (temporary files left out), keyed by ``prefix``/its path under root."""
    files: dict[str, bytes] = {}
    if root.is_dir():
        for path in sorted(root.rglob("*")):
            if path.is_file() and not (path.name.startswith(".") and path.name.endswith(TEMP_SUFFIX)):
                files[f"{prefix}/{path.relative_to(root).as_posix()}"] = path.read_bytes()
    return files


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


SCRATCH_ROOT = "swepipe-ray"  # in the node's temporary directory: <run id>/<session>/ below it


def run_folder(run_id: str) -> Path:
    """Where every driver session of ``run_id`` keeps its scratch on this node: the id is one path component,
    escaped, so no other run's folder is inside it or named after it."""
    return Path(tempfile.gettempdir()) / SCRATCH_ROOT / quote(run_id, safe="").replace(".", "%2E")


def remove_tree(path: Path, tries: int = 3) -> str:
    """``path`` removed, tried again a moment later while something is still there (another node of this machine
    removing the same session folder, a file closed late); what is left, named, or "" when it is gone."""
    for attempt in range(tries):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return ""
        time.sleep(0.2 * (attempt + 1))
    left = sorted(str(p.relative_to(path)) for p in path.rglob("*"))
    return f"{len(left)} path(s) left, first {left[:5]}"


def session_folder(run_id: str, session: str) -> Path:
    return run_folder(run_id) / quote(session, safe="").replace(".", "%2E")


def remove_run_containers(run_id: str, session: str | None = None) -> tuple[str, list[str], int]:
    """A Ray task pinned to one node: the containers of the run there removed (of one driver session, when given)
    and the scratch folders a worker that was killed left (call it when none of those tasks runs there), but those
    kept with writes the driver may not have applied (pipeline.run.ray.kept: the next driver of the run takes them
    back). Returns the node's host name, the containers removed and how many kept folders stay."""
    from pipeline.runtime import containers

    kept = remove_scratch(session_folder(run_id, session) if session else run_folder(run_id))
    with contextlib.suppress(OSError):
        run_folder(run_id).rmdir()  # when no other session of the run has scratch here
    try:
        return socket.gethostname(), containers.remove_labelled(run_id, session), kept
    except RuntimeUnavailable as error:  # a node without Docker: say so, the others go on
        return socket.gethostname(), [f"(failed: {type(error).__name__}: {error})"], kept
    except InfrastructureFault:
        raise
    except Exception as error:  # noqa: BLE001 - nor does anything else stop the others
        return socket.gethostname(), [f"(failed: {type(error).__name__}: {error})"], kept


def remove_scratch(folder: Path) -> int:
    """``folder`` (a run's or a session's scratch) removed, but for the attempt folders kept for the next driver
    (each with its record); returns how many stay."""
    from pipeline.run.ray.kept import ATTEMPT

    kept = {path.parent for path in folder.glob(f"**/attempt-*/{ATTEMPT}")}

    def prune(directory: Path) -> None:
        for child in list(directory.iterdir()):
            if child in kept:
                continue
            if any(child in attempt.parents for attempt in kept):
                prune(child)
            elif child.is_dir() and not child.is_symlink():
                remove_tree(child)
            else:
                with contextlib.suppress(OSError):
                    child.unlink()

    if not kept:
        remove_tree(folder)
    else:
        with contextlib.suppress(OSError):
            prune(folder)
    return len(kept)
