"""Running a run's tasks on a Ray cluster (``swepipe run --executor ray``): one Ray task per swepipe task.

The stages do not know where they run: a Ray task calls the same ``run_one_task`` the thread executor
calls, in a scratch copy of the task's folder on its node. What it writes there also goes to the driver
(``pipeline.storage``'s mirror, through a Ray queue a driver thread drains), and the driver alone writes
the run directory, so no shared filesystem is needed. A task starts from what the driver holds of it (its
folder, shipped with the task), so a task whose node died is run again elsewhere and resumes from its
saved trajectories, paying no conversation position twice.

Ray resources express Docker capacity: each node declares ``docker_slots`` (``ray start
--resources='{"docker_slots": N}'``) and a task holds ``executor.slots_per_task`` of them (default its peak
containers, ``juniors.k``), so no node runs more containers than it declared. The run's budget
(``budgets.per_run``) is one Ray actor every task's budget reserves from; a stop (Ctrl-C, SIGTERM) on the
driver is a flag every worker watches, then the run's containers are removed on every node.

What a run and scoring (pipeline.run.ray_eval) share: ``on_node`` (a Ray task's scratch folder whose writes go to
the driver) and ``RayDriver`` (the write queue drained by the driver, lost nodes, progress, stops, cleanup). On
each node, container limits the config leaves unset are sized from that node (its machine and docker_slots,
recorded in the task's limits.json), and with ``containers.image_cache_gb`` the node prunes the run's finished
tasks' images after each task (``NodeImages``); before the first task, every node runs the image preflight
(``check_images_on_nodes``). Images are not prefetched on nodes: a task pulls its own when it starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import queue as queue_module
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pipeline import stopping
from pipeline.errors import SwepipeError
from pipeline.layout import RunLayout
from pipeline.models.budget import Budget, CostLimitExceeded
from pipeline.run.runner import RunSummary, plan, record_prediction
from pipeline.run.task import RunSettings, run_one_task, seeded_run_budget
from pipeline.runtime.limits import container_limits, fill_defaults
from pipeline.tasks import Task

INSTALL_HINT = "pip install 'swepipe[ray]'"
START_HINT = ("start a cluster first: on the head node `ray start --head --node-ip-address=<its address> "
              "--resources='{\"docker_slots\": N}'` (N: the containers the node can hold; on one machine "
              "`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head --node-ip-address=127.0.0.1 "
              "--resources='{\"docker_slots\": N}'` keeps it on loopback), then `ray start --address=<head>:6379 "
              "--resources='{\"docker_slots\": N}'` on every other node")
ATTEMPTS = 3  # runs of a task whose node died, before it is left unfinished (an infra error)
STOP_POLL = 0.5  # seconds between a worker's looks at the run's stop flag
STOP_GRACE = 15.0  # seconds running tasks get, once the run stops, to notice and send what they saved
CALL_TIMEOUT = 60.0  # seconds for one call to a run's actor (queue, budget, stop flag) before it is given up
RESOURCE = "docker_slots"
STAGE_FOLDERS = ("junior", "senior", "principal", "eval", "solo", "team", "analysis")
LOOPBACK = ("127.", "localhost", "::1", "[::1]")
_TEMP_SUFFIX = ".tmp"


# ---------------------------------------------------------------- connecting


def import_ray(address: str = "auto"):
    """The ray module (imported here only: the thread executor never needs it), or a clear error."""
    if _is_loopback(_resolve_auto(address) if address == "auto" else address):
        # Ray turns 127.0.0.1 into the machine's other address unless told it is a one-machine cluster;
        # a head started on 127.0.0.1 (tests, one machine) listens on loopback only, so stay there.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise SwepipeError(f"the ray executor needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


def connect(address: str = "auto"):
    """Join the cluster at ``address`` (auto: the one `ray start` began on this machine; host:port;
    ray://host:port); a clear error, within seconds, when none answers there."""
    ray = import_ray(address)
    if ray.is_initialized():
        return ray
    target = _resolve_auto(address) if address == "auto" else address
    if target is None:
        raise SwepipeError(f"no Ray cluster found on this machine (--ray-address auto); {START_HINT}, or give "
                           "--ray-address host:port or ray://host:port")
    host, port = _host_port(target)
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as error:
        raise SwepipeError(f"no Ray cluster answers at {target} ({error}); {START_HINT}") from None
    options: dict = {"address": target, "namespace": "swepipe", "log_to_driver": False,
                     "logging_level": "ERROR"}
    if not target.startswith("ray://") and _is_loopback(target):
        options["_node_ip_address"] = "127.0.0.1"
    try:
        ray.init(**options)
    except Exception as error:  # noqa: BLE001 - whatever Ray raises, the user needs the same advice
        raise SwepipeError(f"cannot join the Ray cluster at {target} ({type(error).__name__}: {error}); "
                           f"{START_HINT}") from None
    if stopping._installed:
        stopping.install(again=True)  # ray.init set its own SIGTERM handler, which would end the driver at once
    return ray


def _resolve_auto(address: str) -> str | None:
    if address != "auto":
        return address
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
    with contextlib.suppress(OSError):
        return current.read_text().strip() or None
    return None


def _host_port(address: str) -> tuple[str, int]:
    rest = address.removeprefix("ray://")
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        raise SwepipeError(f"--ray-address {address}: expected auto, host:port or ray://host:port")
    return host.strip("[]"), int(port)


def _is_loopback(address: str | None) -> bool:
    if not address:
        return False
    host = address.removeprefix("ray://").rpartition(":")[0] or address
    return host.startswith(LOOPBACK)


def alive_nodes(ray) -> list[dict]:
    return [node for node in ray.nodes() if node.get("Alive")]


def node_labels(nodes: list[dict]) -> dict[str, str]:
    """A short name per node id: its node name (by default its address), with the id's head when names repeat."""
    names = [node.get("NodeName") or node.get("NodeManagerAddress") or "?" for node in nodes]
    return {node["NodeID"]: name if names.count(name) == 1 else f"{name}:{node['NodeID'][:6]}"
            for node, name in zip(nodes, names)}


def _head_affinity() -> dict:
    """Actor options that keep the run's actors on the head node (it lives as long as the cluster)."""
    return {"num_cpus": 0, "resources": {"node:__internal_head__": 0.001}, "max_restarts": 0}


# ---------------------------------------------------------------- the run's actors


class RunBudgetKeeper:
    """The run's budget for every node (a Ray actor): reservations by owner (a task's attempt)."""

    def __init__(self, limit: float | None, spent: float):
        self.budget = Budget("run", limit)
        self.budget.seed(spent)
        self.holds: dict[int, tuple[str, object]] = {}
        self.count = 0

    def reserve(self, amount: float, owner: str):
        try:
            held = self.budget.reserve(amount)
        except CostLimitExceeded as refused:
            return None, [refused.scope, refused.limit, refused.spent, refused.needed, refused.reserved]
        self.count += 1
        self.holds[self.count] = (owner, held)
        return self.count, None

    def settle(self, token: int | None, cost: float) -> None:
        hold = self.holds.pop(token, None) if token is not None else None
        if hold is not None:
            hold[1].settle(cost)
        elif cost > 0:
            self.budget.seed(cost)  # spent with nothing held (a call reserved at 0)

    def abandon(self, owner: str) -> float:
        """A task's attempt died with calls in flight: they may have been paid, so each counts at its worst
        case. Returns the dollars so counted."""
        counted = 0.0
        for token, (who, held) in list(self.holds.items()):
            if who == owner:
                del self.holds[token]
                held.settle(held.amount)
                counted += held.amount
        return counted

    def left(self) -> float | None:
        return self.budget.left

    def spent(self) -> float:
        return self.budget.spent


class StopFlag:
    """Set when the driver stops the run (a Ray actor every worker polls)."""

    def __init__(self):
        self.stopped = False

    def set(self) -> None:
        self.stopped = True

    def is_set(self) -> bool:
        return self.stopped


class RemoteRunBudget:
    """The worker's side of RunBudgetKeeper: what its task budget's root forwards to (pipeline.models.budget)."""

    def __init__(self, keeper, owner: str):
        self.keeper, self.owner = keeper, owner

    def reserve(self, amount: float) -> object:
        import ray

        token, refused = ray.get(self.keeper.reserve.remote(amount, self.owner), timeout=CALL_TIMEOUT)
        if refused:
            raise CostLimitExceeded(*refused)
        return token

    def settle(self, token: object, amount: float, cost: float) -> None:
        import ray

        ray.get(self.keeper.settle.remote(token, cost), timeout=CALL_TIMEOUT)

    def left(self) -> float | None:
        import ray

        return ray.get(self.keeper.left.remote(), timeout=CALL_TIMEOUT)


# ---------------------------------------------------------------- the worker's side


@dataclasses.dataclass
class TaskShipment:
    """Everything one attempt of a task needs on its node, sent with the Ray task."""

    task: Task
    run: RunSettings  # as resolved on the driver; its layout is the driver's (only the run id is used)
    key: str  # "<instance id>#<attempt>": the writes it sends are dropped once another attempt replaces it
    files: dict[str, bytes]  # the task's folder as the driver holds it, relative to the run directory
    eval_files: dict[str, bytes]  # run scripts and Dockerfiles for scoring, relative to their folders
    queue: object  # ray.util.queue.Queue
    budget: object | None  # RunBudgetKeeper actor, None when the run has no budget
    run_limit: float | None
    stop: object  # StopFlag actor


@dataclasses.dataclass
class OnNode:
    """Where a Ray task works on its node: ``scratch`` stands for the driver's folder (the run directory, scoring's
    output folder); what is written under it through pipeline.storage goes to the driver as it is made."""

    node_id: str
    base: Path  # the scratch folder's parent, removed afterwards (shipped run scripts go here too)
    scratch: Path
    key: str
    put: Callable[[tuple], None]

    def log(self, line: str) -> None:
        self.put((self.key, "log", "", line.encode("utf-8")))


@contextlib.contextmanager
def on_node(run_id: str, key: str, queue, stop, files: dict[str, bytes], folder: str, name: str | None = None):
    """A Ray task's work on its node, for the driver's attempt ``key``: ``files`` (paths relative to the driver's
    folder) copied into a scratch folder named ``name`` (default ``run_id``), every write under it sent to the
    driver through ``queue`` as it is made, the driver's ``stop`` flag watched (a stop stops this process's work
    as a signal would); afterwards what else changed under ``folder`` is sent, and the scratch goes."""
    import ray

    from pipeline import storage

    put = _sender(queue)
    node_id = ray.get_runtime_context().get_node_id()
    base = Path(tempfile.mkdtemp(prefix=scratch_prefix(run_id)))
    scratch = base / (name or run_id)
    scratch.mkdir(parents=True, exist_ok=True)
    sent: dict[str, str] = {}  # what the driver holds: relative path -> sha256
    for relative, data in files.items():
        target = scratch / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        sent[relative] = _digest(data)

    def sink(op: str, relative: str, data: bytes) -> None:  # under the mirror's lock, after the local write
        put((key, op, relative, data))
        sent[relative] = _digest(data if op == "write" else (scratch / relative).read_bytes())

    if not ray.get(stop.is_set.remote(), timeout=CALL_TIMEOUT):
        stopping.STOP.clear()  # this worker process may have served a stopped run before
    watcher = _StopWatcher(stop)
    put((key, "start", node_id, str(os.getpid()).encode()))
    storage.set_mirror(scratch, sink)
    try:
        yield OnNode(node_id=node_id, base=base, scratch=scratch, key=key, put=put)
    finally:
        storage.clear_mirror()
        watcher.close()
        with contextlib.suppress(Exception):
            _reconcile(scratch, folder, sent, put, key)
        shutil.rmtree(base, ignore_errors=True)


def work_on_node(shipment: TaskShipment) -> dict:
    """A Ray task's body: run the task in a scratch copy of its folder, every write sent to the driver; container
    limits the config leaves unset sized from this node; with containers.image_cache_gb, the node's images of the
    run's finished tasks pruned afterwards."""
    task = shipment.task
    with on_node(shipment.run.layout.run_id, shipment.key, shipment.queue, shipment.stop, shipment.files,
                 f"tasks/{task.instance_id}") as node:
        run = _local_settings(shipment, node)
        remote = RemoteRunBudget(shipment.budget, shipment.key) if shipment.budget is not None else None
        run_budget = Budget("run", shipment.run_limit, remote=remote)
        images = NodeImages.for_task(run, task, node)
        started = time.monotonic()
        try:
            from pipeline.runtime import containers

            containers.install_cleanup_handlers()  # a stop removes this process's containers at once
            prediction = run_one_task(task, run, run_budget, log=node.log)
            prediction["wall_seconds"] = round(time.monotonic() - started, 2)
            return {"prediction": prediction, "node_id": node.node_id}
        except stopping.Stopped:
            return {"stopped": True, "node_id": node.node_id}
        finally:
            if images is not None:
                images.finish(node)


def _sender(queue) -> Callable[[tuple], None]:
    def put(item: tuple) -> None:
        queue.put(item, block=True, timeout=CALL_TIMEOUT)  # returns once the queue holds it: order kept
    return put


def _local_settings(shipment: TaskShipment, node: OnNode) -> RunSettings:
    """The run's settings pointing at the scratch copy; rollouts reused from another run were copied into the
    task's folder by the driver, and scoring's run scripts and Dockerfiles were shipped. Container limits the
    config leaves unset are sized here, from this node, and recorded in the task's ``limits.json``."""
    run = shipment.run
    config = run.config
    evaluation = local_eval_settings(run.evaluation, shipment.eval_files, node.base)
    if config.containers.impl is None:
        sizing = node_sizing(node.node_id)
        config = config.model_copy(update={"containers": fill_defaults(config.containers, sizing["docker_slots"])})
        limits = container_limits(config.containers)
        if evaluation is not None:
            evaluation = dataclasses.replace(evaluation, limits=limits)
        from pipeline.storage import write_json_atomic

        given = {field: getattr(run.config.containers, field) for field in LIMIT_FIELDS
                 if getattr(run.config.containers, field) is not None}
        write_json_atomic(node.scratch / "tasks" / shipment.task.instance_id / "limits.json",
                          {**sizing, "limits": limits.describe(), "given": given})
    return dataclasses.replace(run, config=config, layout=RunLayout(node.scratch), reuse_juniors_from=None,
                               evaluation=evaluation)


LIMIT_FIELDS = ("cpus", "memory", "pids_limit", "tmp_size", "file_size", "disk")


def node_sizing(node_id: str) -> dict:
    """What this node's container limits are sized from: its machine (CPUs, memory) and the docker_slots it
    declared (the containers it runs at once)."""
    import ray

    from pipeline.runtime.limits import format_size, machine_cpus, machine_memory

    slots = 1
    with contextlib.suppress(Exception):
        for found in ray.nodes():
            if found.get("NodeID") == node_id:
                slots = max(1, int(found.get("Resources", {}).get(RESOURCE, 1)))
    return {"node": socket.gethostname(), "docker_slots": slots, "node_cpus": machine_cpus(),
            "node_memory": format_size(machine_memory())}


def local_eval_settings(evaluation, eval_files: dict[str, bytes], base: Path):
    """Scoring's settings with the run scripts and Dockerfiles the driver shipped (written under ``base``)."""
    if evaluation is None or not eval_files:
        return evaluation
    for relative, data in eval_files.items():
        target = base / "eval-inputs" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return dataclasses.replace(
        evaluation,
        run_scripts=base / "eval-inputs" / "run_scripts" if evaluation.run_scripts else None,
        dockerfiles=base / "eval-inputs" / "dockerfiles" if evaluation.dockerfiles else None)


class NodeImages:
    """The run's task images on one node, pruned within ``containers.image_cache_gb`` after each task there.

    Ray tasks on a node run in separate processes, so the node's share of the run is a folder in its temporary
    directory: which tasks run there now (their worker's pid) and which finished there. After a task, the images
    of the run's tasks finished on the node (and their sanitised copies) are removed least recently used first
    until the run's images there take at most the budget, never one a task running there holds or a running
    swepipe container uses; each prune is a line of the run's ``image_cache.jsonl``, naming the node."""

    def __init__(self, run_id: str, instance_id: str, image: str, keep_bytes: int):
        self.state = node_state(run_id)
        self.instance_id, self.image, self.keep = instance_id, image, keep_bytes
        for folder in ("running", "finished"):
            (self.state / folder).mkdir(parents=True, exist_ok=True)
        self._write("running", {"image": self.image, "pid": os.getpid()})

    @classmethod
    def for_task(cls, run: RunSettings, task: Task, node: OnNode) -> NodeImages | None:
        containers_config = run.config.containers
        if containers_config.impl is not None or containers_config.image_cache_gb is None:
            return None
        from pipeline.runtime.image_cache import GB, run_image_names

        try:
            image = run_image_names([task], run.image_template)[0]
        except SwepipeError:
            return None  # a template the task cannot fill: the task itself records that error
        return cls(run.layout.run_id, task.instance_id, image, int(containers_config.image_cache_gb * GB))

    def _write(self, folder: str, record: dict) -> None:
        import json

        path = self.state / folder / f"{self.instance_id}.json"
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.write_text(json.dumps(record))
        temporary.replace(path)

    def _read(self, folder: str) -> list[dict]:
        import json

        found = []
        for path in sorted((self.state / folder).glob("*.json")):
            with contextlib.suppress(OSError, ValueError):
                found.append(json.loads(path.read_text()))
        return found

    def finish(self, node: OnNode) -> dict | None:
        """After the task (never fails it): this task's image counts as finished on the node, then the prune."""
        import fcntl

        from pipeline.runtime.image_cache import gb, prune, run_images_bytes, touch

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
        except Exception as exc:  # noqa: BLE001 - a Docker fault here is logged, never the task's result
            node.log(f"image cache on {socket.gethostname()}: could not prune after {self.instance_id}: {exc}")
            return None
        row = {"after_task": self.instance_id, "node": socket.gethostname(), "keep_bytes": self.keep,
               "run_images_bytes": used, "removed": result.removed, "kept_in_use": result.kept_in_use,
               "running": sorted(running), "time": round(time.time(), 3)}
        from pipeline.storage import append_jsonl

        append_jsonl(node.scratch / "image_cache.jsonl", row)  # to the driver's run directory
        if result.removed:
            node.log(f"image cache on {socket.gethostname()}: removed {len(result.removed)} image(s) of finished "
                     f"tasks; the run's images there take {gb(used)} (budget {gb(self.keep)})")
        return row


def node_state(run_id: str) -> Path:
    return Path(tempfile.gettempdir()) / f"swepipe-node-images-{run_id}"


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError):
        return False
    return True


class _StopWatcher:
    """Polls the run's stop flag; when the driver stops the run, stops this process's work as a signal would."""

    def __init__(self, flag):
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
            except Exception:  # noqa: BLE001 - the head is unreachable: the driver decides what happens
                continue

    def close(self) -> None:
        self.done.set()


def _reconcile(scratch: Path, folder: str, sent: dict[str, str], put, key: str) -> None:
    """After the task: files changed by other means than pipeline.storage (scoring logs, patch files) are
    sent whole, and files that went (a trajectory folded into its rollout record) are removed there too."""
    root = scratch / folder
    seen = set()
    for path in sorted(root.rglob("*")) if root.is_dir() else []:
        if not path.is_file() or (path.name.startswith(".") and path.name.endswith(_TEMP_SUFFIX)):
            continue
        relative = path.relative_to(scratch).as_posix()
        seen.add(relative)
        data = path.read_bytes()
        if sent.get(relative) != _digest(data):
            put((key, "write", relative, data))
    for relative in sorted(set(sent) - seen):
        if relative.startswith(folder + "/"):
            put((key, "unlink", relative, b""))


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def scratch_prefix(run_id: str) -> str:
    return f"swepipe-task-{run_id}-"


def remove_run_containers(run_id: str) -> tuple[str, list[str]]:
    """A Ray task pinned to one node: the run's containers there removed, and the scratch folders a worker that
    was killed left (call it when none of the run's tasks runs there)."""
    from pipeline.runtime import containers

    for left in Path(tempfile.gettempdir()).glob(scratch_prefix(run_id) + "*"):
        shutil.rmtree(left, ignore_errors=True)
    shutil.rmtree(node_state(run_id), ignore_errors=True)
    try:
        return socket.gethostname(), containers.remove_labelled(run_id)
    except Exception as error:  # noqa: BLE001 - a node without Docker: say so, the others go on
        return socket.gethostname(), [f"(failed: {type(error).__name__}: {error})"]


# ---------------------------------------------------------------- the driver's side


def snapshot(root: Path, prefix: str) -> dict[str, bytes]:
    """Every file under ``root`` (temporary files left out), keyed by ``prefix``/its path under root."""
    files = {}
    if root.is_dir():
        for path in sorted(root.rglob("*")):
            if path.is_file() and not (path.name.startswith(".") and path.name.endswith(_TEMP_SUFFIX)):
                files[f"{prefix}/{path.relative_to(root).as_posix()}"] = path.read_bytes()
    return files


def eval_inputs(task: Task, evaluation) -> dict[str, bytes]:
    """Scoring's run scripts and Dockerfiles of ``task``, when ``evaluation`` (EvalSettings or None) names folders
    of them (a node need not have them)."""
    files: dict[str, bytes] = {}
    if evaluation is None:
        return files
    if evaluation.run_scripts:
        files.update(snapshot(Path(evaluation.run_scripts) / task.instance_id, f"run_scripts/{task.instance_id}"))
    if evaluation.dockerfiles:
        for kind in ("base_dockerfile", "instance_dockerfile"):
            files.update(snapshot(Path(evaluation.dockerfiles) / kind / task.instance_id,
                                  f"dockerfiles/{kind}/{task.instance_id}"))
    return files


def slots_per_task(run: RunSettings) -> int:
    """The docker_slots a task holds: the config's, else its most containers at once (K rollouts side by side;
    1 for a strategy without juniors), as prepare_run sizes container limits."""
    if run.config.executor.slots_per_task:
        return run.config.executor.slots_per_task
    return max(1, run.config.juniors.k) if "junior" in run.roles else 1


SYSTEM_ERRORS_NAMES = ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "RaySystemError",
                       "ObjectLostError", "OwnerDiedError", "ActorDiedError", "ActorUnavailableError",
                       "OutOfMemoryError", "TaskUnschedulableError")


class RayDriver:
    """Driving Ray tasks that each hold ``slots`` docker_slots, whatever they do (a run's tasks: ``RayRun``;
    scorings: pipeline.run.ray_eval): the writes they send applied under ``root`` by one driver thread (the driver
    alone writes there), a lost node's work run again elsewhere (``ATTEMPTS`` runs at most), progress per node and
    stage, and a stop that stops every node's work and removes the run's containers there (labelled ``run_id``).

    A subclass names its items (``item_id``), sends one attempt (``ship``), and records a result (``completed``)
    or an item given up on (``give_up``)."""

    noun = "task"  # what one item is called in messages
    label = "run"  # the progress bar's

    def __init__(self, ray, root: Path, run_id: str, slots: int, show_progress: bool, log, *, has_work: bool,
                 hint: str = ""):
        from ray.util.queue import Queue

        self.ray, self.root, self.run_id, self.slots, self.log = ray, root, run_id, slots, log
        self.say = log or (lambda text: print(text, flush=True))
        self.show = show_progress
        self.system_errors = tuple(getattr(ray.exceptions, name) for name in SYSTEM_ERRORS_NAMES
                                   if hasattr(ray.exceptions, name))
        nodes = alive_nodes(ray)
        self.labels = node_labels(nodes)
        self.capacity = sum(int(node.get("Resources", {}).get(RESOURCE, 0)) // slots for node in nodes)
        if has_work and self.capacity == 0:
            offered = ", ".join(f"{self.labels[n['NodeID']]}: {n.get('Resources', {}).get(RESOURCE, 0):g}"
                                for n in nodes)
            raise SwepipeError(f"no node of the Ray cluster offers the {slots} {RESOURCE} a {self.noun} holds "
                               f"({offered or 'no node'}); start nodes with --resources='{{\"{RESOURCE}\": N}}' "
                               f"(N >= {slots}){hint}")
        self.window = self.capacity + 1  # items submitted at once: the cluster's room, and one queued
        self.queue = Queue(actor_options=_head_affinity())
        self.stop_flag = ray.remote(StopFlag).options(**_head_affinity()).remote()
        self.attempts: dict[str, int] = {}
        self.current: dict[str, str] = {}  # item id -> key of its live attempt
        self.pending: dict = {}  # object ref -> item
        self.started: dict[str, str] = {}  # item id -> node label, once its attempt began
        self.stage: dict[str, str] = {}
        self.stopped = False
        self.lock = threading.Lock()
        self.flushes: dict[str, threading.Event] = {}
        self.draining = threading.Event()
        self.drainer = threading.Thread(target=self._drain, name="ray writes", daemon=True)
        self.say(f"ray: {len(nodes)} node(s), {sum(n.get('Resources', {}).get(RESOURCE, 0) for n in nodes):g} "
                 f"{RESOURCE}, {slots} per {self.noun}: up to {self.capacity} {self.noun}(s) at once")

    # ---- what a subclass says

    def item_id(self, item) -> str:
        raise NotImplementedError

    def ship(self, item, key: str):
        """Start one attempt of ``item`` (its writes keyed ``key``); its object ref."""
        raise NotImplementedError

    def completed(self, item, result: dict) -> None:
        raise NotImplementedError

    def give_up(self, item, error: str) -> None:
        raise NotImplementedError

    def lost(self, key: str) -> str:
        """An attempt's node died: what the subclass did about it, for the message (e.g. spend counted)."""
        return ""

    def stage_of(self, parts: list[str]) -> str | None:
        """The stage a write under ``root`` (its path's parts) says its item is at."""
        return None

    def summary_line(self) -> str:
        return ""

    # ---- writes from the workers

    def _drain(self) -> None:
        while not self.draining.is_set():
            try:
                item = self.queue.get(block=True, timeout=0.5)
            except queue_module.Empty:
                continue
            except Exception:  # noqa: BLE001 - the queue's actor went away: nothing more will come
                if self.draining.wait(0.5):
                    return
                continue
            try:
                self._apply(item)
            except Exception as error:  # noqa: BLE001 - one bad write must not stop the others
                self.say(f"ray: could not apply a write from a worker ({type(error).__name__}: {error})")

    def _apply(self, item: tuple) -> None:
        from pipeline.storage import apply_mirrored

        key, op, relative, data = item
        if op == "flush":
            self.flushes.pop(key).set()
            return
        item_id = key.rpartition("#")[0]
        with self.lock:
            if self.current.get(item_id) != key:
                return  # a replaced attempt (its node was given up on): what it still sends is not kept
            if op == "start":
                self.started[item_id] = self.labels.get(relative) or relative[:8]
                self.stage[item_id] = "starting"
                return
        if op == "log":
            if self.log:
                self.log(data.decode("utf-8", errors="replace"))
            return
        stage = self.stage_of(relative.split("/"))
        if stage:
            self.stage[item_id] = stage
        apply_mirrored(self.root, op, relative, data)

    def flush(self, timeout: float = CALL_TIMEOUT) -> bool:
        """Wait until every write already in the queue is applied (a marker put after them comes back)."""
        token = f"flush-{time.monotonic_ns()}"
        event = self.flushes[token] = threading.Event()
        try:
            self.queue.put((token, "flush", "", b""), block=True, timeout=timeout)
        except Exception:  # noqa: BLE001 - the queue is gone: nothing to wait for
            return False
        return event.wait(timeout)

    # ---- items

    def submit(self, item) -> None:
        item_id = self.item_id(item)
        self.attempts[item_id] = attempt = self.attempts.get(item_id, 0) + 1
        key = f"{item_id}#{attempt}"
        with self.lock:
            self.current[item_id] = key
            self.started.pop(item_id, None)
            self.stage[item_id] = "queued"
        self.pending[self.ship(item, key)] = item

    def describe(self) -> str:
        by_node: dict[str, list[str]] = {}
        with self.lock:
            for item_id, node in self.started.items():
                by_node.setdefault(node, []).append(self.stage.get(item_id, "?"))
        nodes = "; ".join(f"{node}: {len(stages)} ({', '.join(sorted(stages))})"
                          for node, stages in sorted(by_node.items()))
        return " | ".join(part for part in (self.summary_line(), nodes) if part)

    def execute(self, todo: list, total: int, done_already: int = 0) -> bool:
        """Run every item of ``todo``; False when a stop (Ctrl-C, SIGTERM) cut it short."""
        from pipeline.parallel import progress_bar

        self.drainer.start()
        queue = list(todo)
        try:
            with progress_bar(self.label, self.show) as progress:
                bar = progress.add_task(self.describe(), total=total, completed=done_already)
                try:
                    while queue or self.pending:
                        while queue and len(self.pending) < self.window:
                            self.submit(queue.pop(0))
                        stopping.check()
                        ready, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=0.5)
                        for ref in ready:
                            if self.finish(ref):
                                progress.update(bar, advance=1)
                        progress.update(bar, description=self.describe())
                except (KeyboardInterrupt, stopping.Stopped):
                    self.stopped = True
                    self.stop_cluster()
            if not self.stopped:
                self.cleanup_nodes()  # containers left by a worker whose node was given up on
        finally:
            self.draining.set()
            self.drainer.join(timeout=2)
        return not self.stopped

    def finish(self, ref) -> bool:
        """Handle one returned Ray task; True when its item is done with (a result, or given up on)."""
        item = self.pending.pop(ref)
        item_id = self.item_id(item)
        key = self.current[item_id]
        try:
            result = self.ray.get(ref)
        except self.system_errors as error:
            self.flush()  # what the dead attempt sent is in place before the next one starts
            note = self.lost(key)
            node = self.started.get(item_id, "its node")
            reason = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:200] if str(error) else ''}"
            if self.attempts[item_id] < ATTEMPTS and not stopping.requested():
                self.say(f"{self.noun} {item_id}: {node} was lost ({reason}); running it again from what the "
                         f"driver holds (attempt {self.attempts[item_id] + 1} of {ATTEMPTS})" + note)
                self.submit(item)
                return False
            self._done(item, error=f"its node was lost {ATTEMPTS} times; last: {reason}")
            return True
        except self.ray.exceptions.TaskCancelledError:
            return False  # cancelled by a stop
        except self.ray.exceptions.RayError as error:
            self.flush()
            self._done(item, error=f"the Ray task failed: {type(error).__name__}: {error}")
            return True
        self.flush()
        if result.get("stopped"):
            return False
        self._done(item, result=result)
        return True

    def _done(self, item, result: dict | None = None, error: str | None = None) -> None:
        item_id = self.item_id(item)
        with self.lock:
            self.current.pop(item_id, None)
            self.started.pop(item_id, None)
            self.stage.pop(item_id, None)
        if result is None:
            self.give_up(item, error or "")
        else:
            self.completed(item, result)

    def node_label(self, node_id: str | None) -> str | None:
        if node_id is None:
            return None
        if node_id not in self.labels:
            self.labels = node_labels(alive_nodes(self.ray)) | self.labels
        return self.labels.get(node_id, node_id[:8])

    # ---- stopping

    def stop_cluster(self) -> None:
        """The whole cluster's work stops: the flag every worker watches, queued Ray tasks cancelled, running ones
        given a few seconds to save and say so, then the run's containers removed on every node."""
        ray = self.ray
        with contextlib.suppress(Exception):
            ray.get(self.stop_flag.set.remote(), timeout=10)
        with self.lock:
            started = set(self.started)
        for ref, item in list(self.pending.items()):
            if self.item_id(item) not in started:
                with contextlib.suppress(Exception):
                    ray.cancel(ref)
        deadline = time.monotonic() + STOP_GRACE
        while self.pending and time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=0.5)
                for ref in ready:
                    with contextlib.suppress(Exception):
                        self.finish(ref)
        for ref in list(self.pending):
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)  # still blocked after the grace: its worker goes
        self.cleanup_nodes()
        self.flush(timeout=10)

    def cleanup_nodes(self) -> dict[str, list[str]]:
        removed = cleanup_nodes(self.ray, self.run_id)
        for node, names in removed.items():
            if names:
                self.say(f"ray: removed {len(names)} container(s) of run {self.run_id} on {node}")
        return removed


class RayRun(RayDriver):
    """The driver of one run on the cluster: submits tasks, applies their writes, records predictions."""

    def __init__(self, ray, tasks: list[Task], run: RunSettings, show_progress: bool, log):
        self.run = run
        self.summary, self.todo = plan(tasks, run)
        self.total = len(tasks)
        super().__init__(ray, run.layout.root, run.layout.run_id, slots_per_task(run), show_progress, log,
                         has_work=bool(self.todo), hint=", or set executor.slots_per_task")
        limit = run.config.budgets.per_run
        self.keeper = None
        if limit is not None:  # no budget, no actor: no call is made for it
            self.keeper = ray.remote(RunBudgetKeeper).options(**_head_affinity()).remote(
                limit, seeded_run_budget(run).spent)
        self.remote_task = ray.remote(work_on_node).options(
            num_cpus=0, resources={RESOURCE: self.slots}, max_retries=0, retry_exceptions=False,
            scheduling_strategy="SPREAD")

    def item_id(self, task: Task) -> str:
        return task.instance_id

    def ship(self, task: Task, key: str):
        instance_id = task.instance_id
        if self.run.reuse_juniors_from is not None and self.attempts[instance_id] == 1:
            from pipeline.juniors.stage import copy_rollouts

            # Another run's rollouts are copied here, where they are, so no node needs that run.
            copy_rollouts(self.run.reuse_juniors_from.task(instance_id).junior,
                          self.run.layout.task(instance_id).junior, self.run.config.juniors.k)
        paths = self.run.layout.task(instance_id)
        shipment = TaskShipment(task=task, run=self.run, key=key, files=snapshot(paths.root, f"tasks/{instance_id}"),
                                eval_files=eval_inputs(task, self.run.evaluation), queue=self.queue,
                                budget=self.keeper, run_limit=self.run.config.budgets.per_run, stop=self.stop_flag)
        return self.remote_task.remote(shipment)

    def stage_of(self, parts: list[str]) -> str | None:
        return parts[2] if len(parts) > 3 and parts[0] == "tasks" and parts[2] in STAGE_FOLDERS else None

    def summary_line(self) -> str:
        return self.summary.line()

    def execute(self) -> RunSummary:  # type: ignore[override]
        self.summary.stopped = not super().execute(self.todo, self.total, len(self.summary.skipped))
        return self.summary

    def lost(self, key: str) -> str:
        if self.keeper is None:
            return ""
        try:
            counted = self.ray.get(self.keeper.abandon.remote(key), timeout=CALL_TIMEOUT)
        except Exception:  # noqa: BLE001
            return ""
        return f"; ${counted:.4f} of calls in flight counted as spent" if counted else ""

    def completed(self, task: Task, result: dict) -> None:
        prediction = result["prediction"]
        node = self.node_label(result.get("node_id"))
        if node is not None:
            prediction["node"] = node
        record_prediction(self.summary, self.run, prediction, self.log)

    def give_up(self, task: Task, error: str) -> None:
        record_prediction(self.summary, self.run, {
            "instance_id": task.instance_id, "model_patch": "", "strategy": self.run.config.strategy,
            "source": "none", "models": self.run.models, "error": error, "infra_error": True}, self.log)


def cleanup_nodes(ray, run_id: str, timeout: float = 120.0) -> dict[str, list[str]]:
    """The run's containers removed on every alive node (a Ray task pinned to each); node label -> names."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = alive_nodes(ray)
    labels = node_labels(nodes)
    remote = ray.remote(remove_run_containers)
    refs = {remote.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
        node["NodeID"], soft=False)).remote(run_id): labels[node["NodeID"]] for node in nodes}
    removed: dict[str, list[str]] = {}
    for ref, label in refs.items():
        try:
            _, names = ray.get(ref, timeout=timeout)
        except Exception as error:  # noqa: BLE001 - one node that does not answer: say so, go on
            names = [f"(no answer: {type(error).__name__})"]
        removed[label] = names
    return removed


def run_tasks_on_ray(tasks: list[Task], run: RunSettings, show_progress: bool = True,
                     log: Callable[[str], None] | None = None) -> RunSummary:
    """``run_tasks`` on the cluster at ``executor.ray_address``; the same summary, predictions and files."""
    ray = connect(run.config.executor.ray_address)
    return RayRun(ray, tasks, run, show_progress, log).execute()


# ---------------------------------------------------------------- images on every node

PREFLIGHT_TIMEOUT = 120.0  # seconds a node's preflight may take past the registry's timeout before it is left out


def node_preflight(names: list[str], budget_gb: float | None, registry_timeout: float) -> dict:
    """A Ray task pinned to one node: `swepipe images check`'s preflight there (its Docker engine, its registry
    credentials), as a plain record."""
    from pipeline.runtime.image_cache import preflight

    host = socket.gethostname()
    try:
        check = preflight(names, budget_gb, registry_timeout=registry_timeout)
    except Exception as error:  # noqa: BLE001 - a node without a working Docker: said, by the driver
        return {"host": host, "error": f"Docker cannot be asked there ({type(error).__name__}: {error})"}
    return {"host": host, "line": check.line(), "problem": None if check.ok else check.problem(),
            "present": [i.name for i in check.images if i.present],
            "missing": {i.name: i.registry for i in check.missing}, "needed_bytes": check.needed_bytes,
            "free_bytes": check.free_bytes}


def check_images_on_nodes(ray, names, budget_gb: float | None = None, announce=print,
                          registry_timeout: float | None = None, slots: int = 1) -> dict[str, dict]:
    """The preflight on every alive node that can run a task (one that offers ``slots`` docker_slots), in
    parallel, one line per node; RuntimeUnavailable naming the nodes and images when an image is missing on a
    node and no registry confirmed it has it (or a node's Docker cannot be asked), so the run stops in its first
    minute with nothing spent. Missing images a registry has are only reported: their tasks pull them. A node
    that does not answer in time is reported and left out. Returns node label -> its report."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from pipeline.errors import RuntimeUnavailable
    from pipeline.runtime.image_cache import REGISTRY_TIMEOUT

    registry_timeout = REGISTRY_TIMEOUT if registry_timeout is None else registry_timeout
    names = list(dict.fromkeys(names))
    everyone = alive_nodes(ray)
    labels = node_labels(everyone)
    nodes = [n for n in everyone if n.get("Resources", {}).get(RESOURCE, 0) >= slots]
    if not names or not nodes:
        return {}  # no image to check, or no node to run on (the executor says so next)
    remote = ray.remote(node_preflight)
    refs = {remote.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
        node["NodeID"], soft=False)).remote(names, budget_gb, registry_timeout): labels[node["NodeID"]]
        for node in nodes}
    deadline = time.monotonic() + registry_timeout + PREFLIGHT_TIMEOUT
    reports: dict[str, dict] = {}
    for ref, label in refs.items():
        try:
            reports[label] = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
        except Exception as error:  # noqa: BLE001 - a node that does not answer: said, not fatal
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
            reports[label] = {"unanswered": True, "error": f"no answer ({type(error).__name__}); its tasks find out "
                                                           "when they start"}
    announce(f"images on {len(reports)} node(s):")
    for label, report in sorted(reports.items()):
        announce(f"  {label}: {report.get('line') or report.get('error')}")
    problems: dict[str, list[str]] = {}
    for label, report in sorted(reports.items()):
        text = None if report.get("unanswered") else (report.get("problem") or report.get("error"))
        if text:
            problems.setdefault(text, []).append(label)
    if problems:
        raise RuntimeUnavailable("; ".join(f"on {', '.join(where)}: {text}" for text, where in problems.items())
                                 + "; or pass --skip-image-check")
    return reports


def check_run_images_on_nodes(tasks: list[Task], settings: RunSettings, announce=print,
                              registry_timeout: float | None = None) -> dict[str, dict]:
    """``check_run_images`` for ``run --executor ray``: the images of the run's unfinished tasks, on every node."""
    from pipeline.runtime.image_cache import run_image_names

    finished = settings.layout.finished()
    todo = [t for t in tasks if t.instance_id not in finished]
    return check_images_on_nodes(connect(settings.config.executor.ray_address),
                                 run_image_names(todo, settings.image_template),
                                 settings.config.containers.image_cache_gb, announce, registry_timeout,
                                 slots=slots_per_task(settings))
