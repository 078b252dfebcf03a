"""A run's images on one machine (the thread executor): the next queued task's image prefetched while tasks run,
and the finished tasks' images pruned down to the run's disk budget after each task.
"""

from __future__ import annotations

import threading
import time

from docker.errors import DockerException

from pipeline.control import stopping
from pipeline.errors import RuntimeUnavailable, SwepipeError
from pipeline.runtime.images.disk import GB, gb, run_images_bytes, touch
from pipeline.runtime.images.names import local_image, run_image_names
from pipeline.runtime.images.prefetch import prefetch_image
from pipeline.runtime.images.prune import PruneResult, prune


class RunImageCache:
    """A run's images on this machine (thread executor).

    Prefetch: while tasks run, the image of the next queued task is pulled in the background (``prefetch_image``,
    one at a time, once the running tasks have their own images, within the budget), so that task rarely waits on
    a pull.

    The budget (``containers.image_cache_gb``, optional): after each task, the images of the run's finished tasks
    (and their sanitised copies) are pruned least recently used first down to the budget, never those of tasks
    running at that moment nor any a running swepipe container uses; a prefetched image whose task has not started
    goes too if that is not enough (its task pulls it again). Each prune and each prefetch is a line of
    ``image_cache.jsonl`` in the run directory, a prune's with the disk all the run's images present take after it.
    """

    def __init__(self, image_template: str, budget_gb: float | None, record_path=None, log=None,
                 queue=(), platform: str | None = None):
        self.template = image_template
        self.keep = None if budget_gb is None else int(budget_gb * GB)
        self.record_path = record_path
        self.log = log
        self.platform = platform
        self.running: dict[str, str] = {}  # instance id -> image name
        self.finished: dict[str, str] = {}
        self.prefetched: dict[str, str] = {}  # instance id of a task not started yet -> its image, pulled ahead
        self.queue = list(queue)  # tasks not started yet, in the order they start
        self.tried: set[str] = set()  # image names a prefetch was tried for
        self.lock = threading.RLock()
        self.prune_lock = threading.Lock()
        self.wake = threading.Event()
        self.closed = threading.Event()
        self.thread: threading.Thread | None = None

    @classmethod
    def for_run(cls, run, log=None, queue=()) -> RunImageCache | None:
        containers_config = run.config.containers
        if containers_config.impl is not None:
            return None  # a runtime that does not use the run's images
        return cls(run.image_template, containers_config.image_cache_gb, run.layout.image_cache, log,
                   queue=queue, platform=containers_config.platform)

    def _name(self, task) -> str | None:
        try:
            return run_image_names([task], self.template)[0]
        except SwepipeError:
            return None  # a template the task cannot fill: the task itself records that error

    def start(self, task) -> None:
        name = self._name(task)
        with self.lock:
            if name is not None:
                self.running[task.instance_id] = name
            self.finished.pop(task.instance_id, None)
            self.prefetched.pop(task.instance_id, None)
            self.queue = [t for t in self.queue if t.instance_id != task.instance_id]
            if self.thread is None and self.queue and not self.closed.is_set():
                self.thread = threading.Thread(target=self._prefetch_loop, name="image prefetch", daemon=True)
                self.thread.start()
        self.wake.set()

    def close(self) -> None:
        """Stop prefetching (a pull in flight is abandoned: its task is not going to start)."""
        self.closed.set()
        self.wake.set()
        if self.thread is not None:
            self.thread.join(timeout=1.0)

    # ---------------------------------------------------------------- prefetch

    def _next(self):
        """The next queued task and its image, when a prefetch is due for it: while tasks run, once they have their
        own images (a running task's pull goes first)."""
        with self.lock:
            if not self.running or not self.queue:
                return None
            task, running = self.queue[0], set(self.running.values())
        name = self._name(task)
        if name is None or name in self.tried or name in running:
            return None
        if any(local_image(n) is None for n in running):
            return None
        return task, name

    def _prefetch_loop(self) -> None:
        while not self.closed.is_set() and not stopping.requested():
            with self.lock:
                if not self.queue:
                    return  # every task has started
            self.wake.wait(1.0)
            self.wake.clear()
            target = self._next()
            if target is None or self.closed.is_set():
                continue
            task, name = target
            self.tried.add(name)
            try:
                record = self._prefetch(task, name)
            except stopping.Stopped:
                return
            if record["outcome"] == "present" or self.closed.is_set():
                continue
            if record["outcome"] == "pulled":
                with self.lock:
                    if any(t.instance_id == task.instance_id for t in self.queue):
                        self.prefetched[task.instance_id] = name
            self._record({"for_task": task.instance_id, **record})
            if self.log and record["outcome"] == "failed":
                self.log(f"image prefetch of {name} failed (its task pulls it itself): {record.get('reason')}")

    def __enter__(self):  # held by a prefetch while it makes room and checks the budget: both locks, in the order
        self.prune_lock.acquire()  # finish() takes them
        self.lock.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.lock.release()
        self.prune_lock.release()

    def _prefetch(self, task, name) -> dict:
        with self.lock:
            counted = [*self.running.values(), *self.finished.values(), *self.prefetched.values()]
            prunable = [n for n in self.finished.values() if n not in self._busy()]
        return prefetch_image(name, self.platform, keep_bytes=self.keep, counted=counted, prunable=prunable,
                              protect=self._busy, lock=self)

    def _busy(self) -> set[str]:
        with self.lock:
            return {*self.running.values(), *self.prefetched.values()}

    def _record(self, row: dict) -> None:
        if self.record_path is not None:
            from pipeline.rundir.storage import append_jsonl

            append_jsonl(self.record_path, {**row, "time": round(time.time(), 3)})

    # ---------------------------------------------------------------- the budget

    def finish(self, task) -> PruneResult | None:
        """Prune after ``task`` (with a budget); a Docker fault here is logged, never the task's result."""
        with self.lock:
            name = self.running.pop(task.instance_id, None) or self._name(task)
            if name is None:
                self.wake.set()
                return None
            self.finished[task.instance_id] = name
        touch(name)
        self.wake.set()
        if self.keep is None:
            return None
        try:
            with self.prune_lock:
                with self.lock:
                    busy = self._busy()
                    candidates = [n for n in self.finished.values() if n not in busy]
                    everything = [*self.running.values(), *self.finished.values(), *self.prefetched.values()]
                result = prune(candidates, self.keep, protect=busy)
                used = run_images_bytes(everything)
                if used > self.keep:
                    with self.lock:  # not enough: images pulled ahead for tasks not started yet go too
                        for instance_id, pulled in list(self.prefetched.items()):
                            if used <= self.keep:
                                break
                            if pulled in self.running.values():
                                continue
                            dropped = prune([pulled], 0, protect=set(self.running.values()))
                            result.removed.extend(dropped.removed)
                            if dropped.removed:
                                del self.prefetched[instance_id]  # not prefetched again: its task pulls it
                            used = run_images_bytes(everything)
                with self.lock:
                    running, ahead = sorted(set(self.running.values())), sorted(set(self.prefetched.values()))
        except (DockerException, OSError, RuntimeUnavailable) as exc:  # a prune is never a task's result
            if self.log:
                self.log(f"image cache: could not prune after {task.instance_id}: {exc}")
            return None
        self._record({"after_task": task.instance_id, "keep_bytes": self.keep, "run_images_bytes": used,
                      "removed": result.removed, "kept_in_use": result.kept_in_use, "running": running,
                      "prefetched": ahead})
        if self.log and result.removed:
            self.log(f"image cache: removed {len(result.removed)} image(s) of finished tasks; the run's images "
                     f"take {gb(used)} (budget {gb(self.keep)})")
        return result
