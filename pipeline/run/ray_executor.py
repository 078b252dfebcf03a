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


def work_on_node(shipment: TaskShipment) -> dict:
    """A Ray task's body: run the task in a scratch copy of its folder, every write sent to the driver."""
    import ray

    from pipeline import storage

    key, put = shipment.key, _sender(shipment.queue)
    node_id = ray.get_runtime_context().get_node_id()
    base = Path(tempfile.mkdtemp(prefix=scratch_prefix(shipment.run.layout.run_id)))
    scratch = base / shipment.run.layout.run_id
    sent: dict[str, str] = {}  # what the driver holds: relative path -> sha256
    for relative, data in shipment.files.items():
        target = scratch / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        sent[relative] = _digest(data)

    def sink(op: str, relative: str, data: bytes) -> None:  # under the mirror's lock, after the local write
        put((key, op, relative, data))
        sent[relative] = _digest(data if op == "write" else (scratch / relative).read_bytes())

    if not ray.get(shipment.stop.is_set.remote(), timeout=CALL_TIMEOUT):
        stopping.STOP.clear()  # this worker process may have served a stopped run before
    watcher = _StopWatcher(shipment.stop)
    run = _local_settings(shipment, scratch, base)
    remote = RemoteRunBudget(shipment.budget, key) if shipment.budget is not None else None
    run_budget = Budget("run", shipment.run_limit, remote=remote)
    put((key, "start", node_id, str(os.getpid()).encode()))
    storage.set_mirror(scratch, sink)
    started = time.monotonic()
    try:
        from pipeline.runtime import containers

        containers.install_cleanup_handlers()  # a stop removes this process's containers at once
        prediction = run_one_task(shipment.task, run, run_budget,
                                  log=lambda line: put((key, "log", "", line.encode("utf-8"))))
        prediction["wall_seconds"] = round(time.monotonic() - started, 2)
        result = {"prediction": prediction, "node_id": node_id}
    except stopping.Stopped:
        result = {"stopped": True, "node_id": node_id}
    finally:
        storage.clear_mirror()
        watcher.close()
        with contextlib.suppress(Exception):
            _reconcile(scratch, f"tasks/{shipment.task.instance_id}", sent, put, key)
        shutil.rmtree(base, ignore_errors=True)
    return result


def _sender(queue) -> Callable[[tuple], None]:
    def put(item: tuple) -> None:
        queue.put(item, block=True, timeout=CALL_TIMEOUT)  # returns once the queue holds it: order kept
    return put


def _local_settings(shipment: TaskShipment, scratch: Path, base: Path) -> RunSettings:
    """The run's settings pointing at the scratch copy; rollouts reused from another run were copied into the
    task's folder by the driver, and scoring's run scripts and Dockerfiles were shipped."""
    run = shipment.run
    evaluation = run.evaluation
    if evaluation is not None and shipment.eval_files:
        for relative, data in shipment.eval_files.items():
            target = base / "eval-inputs" / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        evaluation = dataclasses.replace(
            evaluation,
            run_scripts=base / "eval-inputs" / "run_scripts" if evaluation.run_scripts else None,
            dockerfiles=base / "eval-inputs" / "dockerfiles" if evaluation.dockerfiles else None)
    return dataclasses.replace(run, layout=RunLayout(scratch), reuse_juniors_from=None, evaluation=evaluation)


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


def eval_inputs(task: Task, run: RunSettings) -> dict[str, bytes]:
    """Scoring's run scripts and Dockerfiles of ``task``, when the run names folders of them (a node need not
    have them)."""
    files: dict[str, bytes] = {}
    evaluation = run.evaluation
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


class RayRun:
    """The driver of one run on the cluster: submits tasks, applies their writes, records predictions."""

    def __init__(self, ray, tasks: list[Task], run: RunSettings, show_progress: bool, log):
        from ray.util.queue import Queue

        self.ray, self.run, self.log = ray, run, log
        self.say = log or (lambda text: print(text, flush=True))
        self.summary, self.todo = plan(tasks, run)
        self.total = len(tasks)
        self.show = show_progress
        self.slots = slots_per_task(run)
        self.system_errors = tuple(getattr(ray.exceptions, name) for name in SYSTEM_ERRORS_NAMES
                                   if hasattr(ray.exceptions, name))
        nodes = alive_nodes(ray)
        self.labels = node_labels(nodes)
        capacity = sum(int(node.get("Resources", {}).get(RESOURCE, 0)) // self.slots for node in nodes)
        if self.todo and capacity == 0:
            offered = ", ".join(f"{self.labels[n['NodeID']]}: {n.get('Resources', {}).get(RESOURCE, 0):g}"
                                for n in nodes)
            raise SwepipeError(f"no node of the Ray cluster offers the {self.slots} {RESOURCE} a task holds "
                               f"({offered or 'no node'}); start nodes with --resources='{{\"{RESOURCE}\": N}}' "
                               f"(N >= {self.slots}), or set executor.slots_per_task")
        self.window = capacity + 1  # tasks submitted at once: the cluster's room, and one queued
        self.queue = Queue(actor_options=_head_affinity())
        self.stop_flag = ray.remote(StopFlag).options(**_head_affinity()).remote()
        limit = run.config.budgets.per_run
        self.keeper = None
        if limit is not None:  # no budget, no actor: no call is made for it
            self.keeper = ray.remote(RunBudgetKeeper).options(**_head_affinity()).remote(
                limit, seeded_run_budget(run).spent)
        self.remote_task = ray.remote(work_on_node).options(
            num_cpus=0, resources={RESOURCE: self.slots}, max_retries=0, retry_exceptions=False,
            scheduling_strategy="SPREAD")
        self.attempts: dict[str, int] = {}
        self.current: dict[str, str] = {}  # instance id -> key of its live attempt
        self.pending: dict = {}  # object ref -> task
        self.started: dict[str, str] = {}  # instance id -> node label, once its attempt began
        self.stage: dict[str, str] = {}
        self.lock = threading.Lock()
        self.flushes: dict[str, threading.Event] = {}
        self.draining = threading.Event()
        self.drainer = threading.Thread(target=self._drain, name="ray writes", daemon=True)
        self.say(f"ray: {len(nodes)} node(s), {sum(n.get('Resources', {}).get(RESOURCE, 0) for n in nodes):g} "
                 f"{RESOURCE}, {self.slots} per task: up to {capacity} task(s) at once")

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
        instance_id = key.rpartition("#")[0]
        with self.lock:
            if self.current.get(instance_id) != key:
                return  # a replaced attempt (its node was given up on): what it still sends is not kept
            if op == "start":
                self.started[instance_id] = self.labels.get(relative) or relative[:8]
                self.stage[instance_id] = "starting"
                return
        if op == "log":
            if self.log:
                self.log(data.decode("utf-8", errors="replace"))
            return
        parts = relative.split("/")
        if len(parts) > 3 and parts[0] == "tasks" and parts[2] in STAGE_FOLDERS:
            self.stage[instance_id] = parts[2]
        apply_mirrored(self.run.layout.root, op, relative, data)

    def flush(self, timeout: float = CALL_TIMEOUT) -> bool:
        """Wait until every write already in the queue is applied (a marker put after them comes back)."""
        token = f"flush-{time.monotonic_ns()}"
        event = self.flushes[token] = threading.Event()
        try:
            self.queue.put((token, "flush", "", b""), block=True, timeout=timeout)
        except Exception:  # noqa: BLE001 - the queue is gone: nothing to wait for
            return False
        return event.wait(timeout)

    # ---- tasks

    def submit(self, task: Task) -> None:
        instance_id = task.instance_id
        self.attempts[instance_id] = attempt = self.attempts.get(instance_id, 0) + 1
        key = f"{instance_id}#{attempt}"
        if self.run.reuse_juniors_from is not None and attempt == 1:
            from pipeline.juniors.stage import copy_rollouts

            # Another run's rollouts are copied here, where they are, so no node needs that run.
            copy_rollouts(self.run.reuse_juniors_from.task(instance_id).junior,
                          self.run.layout.task(instance_id).junior, self.run.config.juniors.k)
        paths = self.run.layout.task(instance_id)
        shipment = TaskShipment(task=task, run=self.run, key=key, files=snapshot(paths.root, f"tasks/{instance_id}"),
                                eval_files=eval_inputs(task, self.run), queue=self.queue, budget=self.keeper,
                                run_limit=self.run.config.budgets.per_run, stop=self.stop_flag)
        with self.lock:
            self.current[instance_id] = key
            self.started.pop(instance_id, None)
            self.stage[instance_id] = "queued"
        self.pending[self.remote_task.remote(shipment)] = task

    def describe(self) -> str:
        by_node: dict[str, list[str]] = {}
        with self.lock:
            for instance_id, node in self.started.items():
                by_node.setdefault(node, []).append(self.stage.get(instance_id, "?"))
        nodes = "; ".join(f"{node}: {len(stages)} ({', '.join(sorted(stages))})"
                          for node, stages in sorted(by_node.items()))
        return " | ".join(part for part in (self.summary.line(), nodes) if part)

    def execute(self) -> RunSummary:
        from pipeline.parallel import progress_bar

        self.drainer.start()
        queue = list(self.todo)
        try:
            with progress_bar("run", self.show) as progress:
                bar = progress.add_task(self.describe(), total=self.total, completed=len(self.summary.skipped))
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
                    self.summary.stopped = True
                    self.stop_cluster()
            if not self.summary.stopped:
                self.cleanup_nodes()  # containers left by a worker whose node was given up on
        finally:
            self.draining.set()
            self.drainer.join(timeout=2)
        return self.summary

    def finish(self, ref) -> bool:
        """Handle one returned Ray task; True when the task is done with (a prediction or an infra error)."""
        task = self.pending.pop(ref)
        instance_id = task.instance_id
        key = self.current[instance_id]
        try:
            result = self.ray.get(ref)
        except self.system_errors as error:
            self.flush()  # what the dead attempt sent is in the run directory before the next one starts
            counted = self._abandon(key)
            node = self.started.get(instance_id, "its node")
            reason = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:200] if str(error) else ''}"
            if self.attempts[instance_id] < ATTEMPTS and not stopping.requested():
                self.say(f"task {instance_id}: {node} was lost ({reason}); running it again from what the driver "
                         f"holds (attempt {self.attempts[instance_id] + 1} of {ATTEMPTS})"
                         + (f"; ${counted:.4f} of calls in flight counted as spent" if counted else ""))
                self.submit(task)
                return False
            self._record(self._infra_error(task, f"its node was lost {ATTEMPTS} times; last: {reason}"), None)
            return True
        except self.ray.exceptions.TaskCancelledError:
            return False  # cancelled by a stop
        except self.ray.exceptions.RayError as error:
            self.flush()
            self._record(self._infra_error(task, f"the Ray task failed: {type(error).__name__}: {error}"), None)
            return True
        self.flush()
        if result.get("stopped"):
            return False
        self._record(result["prediction"], result.get("node_id"))
        return True

    def _abandon(self, key: str) -> float:
        if self.keeper is None:
            return 0.0
        try:
            return self.ray.get(self.keeper.abandon.remote(key), timeout=CALL_TIMEOUT)
        except Exception:  # noqa: BLE001
            return 0.0

    def _record(self, prediction: dict, node_id: str | None) -> None:
        instance_id = prediction["instance_id"]
        if node_id is not None:
            if node_id not in self.labels:
                self.labels = node_labels(alive_nodes(self.ray)) | self.labels
            prediction["node"] = self.labels.get(node_id, node_id[:8])
        with self.lock:
            self.current.pop(instance_id, None)
            self.started.pop(instance_id, None)
            self.stage.pop(instance_id, None)
        record_prediction(self.summary, self.run, prediction, self.log)

    def _infra_error(self, task: Task, error: str) -> dict:
        return {"instance_id": task.instance_id, "model_patch": "", "strategy": self.run.config.strategy,
                "source": "none", "models": self.run.models, "error": error, "infra_error": True}

    # ---- stopping

    def stop_cluster(self) -> None:
        """The whole cluster's work for the run stops: the flag every worker watches, queued tasks cancelled,
        running ones given a few seconds to save and say so, then the run's containers removed on every node."""
        ray = self.ray
        with contextlib.suppress(Exception):
            ray.get(self.stop_flag.set.remote(), timeout=10)
        with self.lock:
            started = set(self.started)
        for ref, task in list(self.pending.items()):
            if task.instance_id not in started:
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
        removed = cleanup_nodes(self.ray, self.run.layout.run_id)
        for node, names in removed.items():
            if names:
                self.say(f"ray: removed {len(names)} container(s) of run {self.run.layout.run_id} on {node}")
        return removed


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
