"""The driver's side shared by a run and a scoring on the cluster (``RayDriver``): the write queue it alone
applies to the run directory, lost nodes run again from what it holds, progress per node, stops and cleanup on
every node."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pipeline.control import stopping
from pipeline.errors import ClusterFault, InfrastructureFault, SwepipeError, describe, ignoring_errors
from pipeline.run.ray.actors import StopFlag, WriteQueue, ask, ray_reason
from pipeline.run.ray.connect import CALL_TIMEOUT, RESOURCE, alive_nodes, head_affinity, node_labels
from pipeline.run.ray.node import AttemptOutcome, Write, remove_run_containers, snapshot
from pipeline.run.task import RunSettings
from pipeline.settings.model_spec import Role
from pipeline.tasks import Task

if TYPE_CHECKING:
    from pipeline.evaluation.runner import EvalSettings

ATTEMPTS = 3  # runs of a task whose node died, before it is left unfinished (an infra error)
STOP_GRACE = 15.0  # seconds running tasks get, once the run stops, to notice and send what they saved
FLUSH_TIMEOUT = CALL_TIMEOUT  # seconds a finished item's writes may take to reach the driver before it reruns
STOP_FLUSH_TIMEOUT = 10.0  # the same, once the run is stopping
DRAIN_BATCH = 1000  # writes the driver takes from the queue in one call at most
OWN_ATTEMPTS_WAIT = 10.0  # seconds the session's end waits for its attempts cancelled at a stop to end
STAGE_FOLDERS = ("junior", "senior", "principal", "eval", "solo", "team", "analysis")


def eval_inputs(task: Task, evaluation: EvalSettings | None) -> dict[str, bytes]:
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
    1 for a strategy without juniors), as Run.open (pipeline.run.lifecycle) sizes container limits."""
    if run.config.executor.slots_per_task:
        return run.config.executor.slots_per_task
    return max(1, run.config.juniors.k) if Role.JUNIOR in run.roles else 1


SYSTEM_ERRORS_NAMES = ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "RaySystemError",
                       "ObjectLostError", "OwnerDiedError", "ActorDiedError", "ActorUnavailableError",
                       "OutOfMemoryError", "TaskUnschedulableError")

Item = TypeVar("Item")  # what one Ray task does: a run's task, a scoring


class RayDriver(Generic[Item]):
    """Driving Ray tasks that each hold ``slots`` docker_slots, whatever they do (a run's tasks: ``RayRun``;
    scorings: pipeline.run.ray.scoring): the writes they send applied under ``root`` by one driver thread (the driver
    alone writes there), a lost node's work run again elsewhere (``ATTEMPTS`` runs at most), progress per node and
    stage, and a stop that stops every node's work and removes the run's containers there (labelled ``run_id``).

    A subclass names its items (``item_id``), sends one attempt (``ship``), and records a result (``completed``)
    or an item given up on (``give_up``)."""

    noun = "task"  # what one item is called in messages
    label = "run"  # the progress bar's

    def __init__(self, ray: Any, root: Path, run_id: str, slots: int, show_progress: bool,
                 log: Callable[[str], None] | None, *, has_work: bool, hint: str = "") -> None:
        self.ray, self.root, self.run_id, self.slots, self.log = ray, root, run_id, slots, log
        # What this session leaves on the nodes (scratch, containers) is named by the run id and this nonce: its
        # cleanup removes exactly that, never another run's, nor another driver's run of the same id.
        self.session = uuid.uuid4().hex[:12]
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
        self.queue = WriteQueue(ray, head_affinity())
        self.stop_flag = ray.remote(StopFlag).options(**head_affinity()).remote()
        self.attempts: dict[str, int] = {}
        self.current: dict[str, str] = {}  # item id -> key of its live attempt
        self.pending: dict[Any, Item] = {}  # object ref -> item
        self.started: dict[str, str] = {}  # item id -> node label, once its attempt began
        self.stage: dict[str, str] = {}
        self.stopped = False
        self.lock = threading.Lock()
        self.flushes: dict[str, threading.Event] = {}
        self.behind = False  # a flush timed out: writes may still be queued
        self.draining = threading.Event()
        self.drainer = threading.Thread(target=self._drain, name="ray writes", daemon=True)
        self.say(f"ray: {len(nodes)} node(s), {sum(n.get('Resources', {}).get(RESOURCE, 0) for n in nodes):g} "
                 f"{RESOURCE}, {slots} per {self.noun}: up to {self.capacity} {self.noun}(s) at once")

    # ---- what a subclass says

    def item_id(self, item: Item) -> str:
        raise NotImplementedError

    def ship(self, item: Item, key: str) -> Any:
        """Start one attempt of ``item`` (its writes keyed ``key``); its object ref."""
        raise NotImplementedError

    def completed(self, item: Item, result: AttemptOutcome) -> None:
        raise NotImplementedError

    def give_up(self, item: Item, error: str) -> None:
        raise NotImplementedError

    def lost(self, key: str) -> str:
        """An attempt's node died: what the subclass did about it, for the message (e.g. spend counted)."""
        return ""

    def stage_of(self, parts: list[str]) -> str | None:
        """The stage a write under ``root`` (its path's parts) says its item is at."""
        return None

    def summary_line(self) -> str:
        return ""

    # Nodes keep what an attempt wrote until the driver applied it (pipeline.run.ray.kept): a subclass that has
    # them do so names the attempt each item was last sent as (item id -> marker), and takes back what they kept.
    keeps_attempts = False

    def recorded_attempts(self) -> dict[str, str]:
        return {}

    def take_back(self, own: bool, wait: float | None = None) -> list[str]:
        """What the nodes kept of attempts whose writes may not have reached this run directory, taken back: of the
        run's other driver sessions (before anything is sent), or of this one (once its writes stopped coming)."""
        from pipeline.run.ray.kept import WAIT_FOR_ENDED, take_back

        return take_back(self.ray, self.root, self.run_id, self.session, self.recorded_attempts(), own=own,
                         say=self.say, wait=WAIT_FOR_ENDED if wait is None else wait)

    # ---- writes from the workers

    def _drain(self) -> None:
        while not self.draining.is_set():
            try:
                # No timeout here: a batch taken by a call given up on would be lost. The actor answers within
                # half a second, and a dead or killed one raises.
                batch = self.ray.get(self.queue.actor.take.remote(DRAIN_BATCH, 0.5))
            except InfrastructureFault:
                raise
            except Exception:  # noqa: BLE001 - the queue's actor went away: nothing more will come
                if self.draining.wait(0.5):
                    return
                continue
            for item in batch:
                try:
                    self._apply(item)
                except InfrastructureFault:
                    raise
                except Exception as error:  # noqa: BLE001 - one bad write must not stop the others
                    self.say(f"ray: could not apply a write from a worker ({type(error).__name__}: {error})")

    def _apply(self, item: Write) -> None:
        from pipeline.rundir.storage import apply_mirrored

        key, op, relative, data = item
        if op == "flush":
            self.flushes.pop(key).set()
            return
        if op == "ack":  # a node's writes before it are applied: it may drop its own copy (pipeline.run.ray.kept)
            self.queue.actor.acknowledge.remote(relative)
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

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every write already in the queue is applied (a marker put after them comes back); False
        when that took longer than ``timeout`` (default: FLUSH_TIMEOUT, or STOP_FLUSH_TIMEOUT at a stop)."""
        if timeout is None:
            timeout = STOP_FLUSH_TIMEOUT if stopping.requested() else FLUSH_TIMEOUT
        token = f"flush-{time.monotonic_ns()}"
        event = self.flushes[token] = threading.Event()
        try:
            ask(self.queue.actor.put, (token, "flush", "", b""), what="the run's write queue", timeout=timeout)
        except ClusterFault:  # the queue is gone or the head does not answer
            self.behind = True
            return False
        except InfrastructureFault:
            raise
        except Exception:  # noqa: BLE001 - the queue's own code failed: its writes are as far behind
            self.behind = True
            return False
        if not event.wait(timeout):
            self.behind = True
            return False
        return True

    # ---- items

    def submit(self, item: Item) -> None:
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

    def execute(self, todo: list[Item], total: int, done_already: int = 0) -> bool:
        """Run every item of ``todo``; False when a stop (Ctrl-C, SIGTERM) cut it short."""
        from pipeline.control.parallel import progress_bar

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
                    stopping.check()  # the last item may have stopped the run (a fault on its node)
                except (KeyboardInterrupt, stopping.Stopped):
                    self.stopped = True
                    self.stop_cluster()
            if not self.stopped:
                self.cleanup_nodes()  # containers left by a worker whose node was given up on
                if self.behind:  # what is still queued lets the rerun of those items resume from it
                    self.flush()
        finally:
            self.draining.set()
            self.drainer.join(timeout=2)
            if self.keeps_attempts and not self.drainer.is_alive():  # no write of this session can come after it
                try:
                    self.take_back(own=True, wait=OWN_ATTEMPTS_WAIT)
                except InfrastructureFault:
                    raise
                except Exception as error:  # noqa: BLE001 - the next session of the run takes them back
                    self.say(f"ray: could not take back what the nodes kept ({describe(error)}); the next session "
                             "of the run does")
        return not self.stopped

    def finish(self, ref: Any) -> bool:
        """Handle one returned Ray task; True when its item is done with (a result, or given up on)."""
        item = self.pending.pop(ref)
        item_id = self.item_id(item)
        key = self.current[item_id]
        try:
            result: AttemptOutcome = self.ray.get(ref)
        except self.system_errors as error:
            self.flush()  # what the dead attempt sent is in place before the next one starts
            note = self.lost(key)
            node = self.started.get(item_id, "its node")
            reason = ray_reason(error)
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
            cause = getattr(error, "cause", None)  # a body raised what it should have returned: the same verdict
            if isinstance(cause, stopping.Stopped):
                result = {"stopped": True}
            elif isinstance(cause, InfrastructureFault):
                result = {"infra": describe(cause)}
            else:
                self.flush()
                self._done(item, error=f"the Ray task failed: {type(error).__name__}: {error}")
                return True
        flushed = self.flush()
        if result.get("stopped"):
            if fault := result.get("fault"):  # a fault every task would meet stopped that node's work: the run stops
                stopping.fault(fault, result.get("code") or 1)
            elif not stopping.requested():
                self._done(item, error=f"its node stopped the {self.noun} with no stop asked")
                return True
            return False
        if result.get("infra"):
            self._done(item, error=result["infra"])
            return True
        if not flushed:
            # Its last records (ledger rows, scores) may be lost: it is no result, and a rerun runs it again.
            self.say(f"{self.noun} {item_id}: its last writes did not reach the driver in time (the Ray head is "
                     "behind); not recorded, a rerun runs it again")
            self._done(item, error="its last writes did not reach the driver in time (the Ray head is behind)")
            return True
        self._done(item, result=result)
        return True

    def _done(self, item: Item, result: AttemptOutcome | None = None, error: str | None = None) -> None:
        item_id = self.item_id(item)
        with self.lock:  # its writes still queued, if any, are applied: ``current`` keeps its key
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
        with ignoring_errors():
            ray.get(self.stop_flag.set.remote(), timeout=10)
        with self.lock:
            started = set(self.started)
        for ref, item in list(self.pending.items()):
            if self.item_id(item) not in started:
                with ignoring_errors():
                    ray.cancel(ref)
        deadline = time.monotonic() + STOP_GRACE
        while self.pending and time.monotonic() < deadline:
            with ignoring_errors():
                ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=0.5)
                for ref in ready:
                    with ignoring_errors():
                        self.finish(ref)
        for ref in list(self.pending):
            with ignoring_errors():
                ray.cancel(ref, force=True)  # still blocked after the grace: its worker goes
        self.cleanup_nodes()
        self.flush(timeout=10)

    def cleanup_nodes(self) -> dict[str, tuple[list[str], int]]:
        removed = cleanup_nodes(self.ray, self.run_id, session=self.session)
        for node, (names, _) in removed.items():
            if names:
                self.say(f"ray: removed {len(names)} container(s) of run {self.run_id} on {node}")
        return removed




def cleanup_nodes(ray: Any, run_id: str, timeout: float = 120.0,
                  session: str | None = None) -> dict[str, tuple[list[str], int]]:
    """The run's containers and scratch removed on every alive node (a Ray task pinned to each), of one driver
    session when given, else of every session of the run (`swepipe cleanup`); node label -> (container names,
    attempt folders kept there for the next driver of the run: pipeline.run.ray.kept)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = alive_nodes(ray)
    labels = node_labels(nodes)
    remote = ray.remote(remove_run_containers)
    refs = {remote.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
        node["NodeID"], soft=False)).remote(run_id, session): labels[node["NodeID"]] for node in nodes}
    removed: dict[str, tuple[list[str], int]] = {}
    for ref, label in refs.items():
        try:
            _, names, kept = ray.get(ref, timeout=timeout)
        except Exception as error:  # noqa: BLE001 - one node that does not answer: say so, go on
            names, kept = [f"(no answer: {type(error).__name__})"], 0
        removed[label] = (names, kept)
    return removed
