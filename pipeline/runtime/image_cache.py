"""The image lifecycle: which task images a run needs and whether they can be had (the preflight), the disk
they take, and pruning them (least recently used first) down to a disk budget, never one a running container uses.

Disk is counted as Docker stores it: by layer, each layer once, however many images share it (a task image's
sanitised copy adds only its own top layer).
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from pipeline import stopping
from pipeline.errors import RuntimeUnavailable
from pipeline.runtime import containers
from pipeline.runtime.image_names import (REGISTRY_TIMEOUT, error_text, local_image, registry_host, registry_status,
                                          run_image_names)

GB = 10 ** 9  # as `docker images` counts

_used: dict[str, float] = {}  # image id -> when this process last used it (prepare_image, a finished task)
_used_lock = threading.Lock()


def touch(ref: str, when: float | None = None) -> None:
    """Record that the image ``ref`` (an id or a name) was just used, or at ``when`` (as another process on this
    machine recorded it): the least-recently-used order for pruning."""
    with _used_lock:
        _used[ref] = time.time() if when is None else when


def last_used(image) -> float:
    """When ``image`` was last used: in this process if it was, else when it was created or last tagged."""
    with _used_lock:
        used = [_used[ref] for ref in (image.id, *image.tags) if ref in _used]
    if used:
        return max(used)
    stamps = [_epoch(image.attrs.get("Created")), _epoch((image.attrs.get("Metadata") or {}).get("LastTagTime"))]
    return max(stamps)


def _epoch(stamp: str | None) -> float:
    if not stamp or stamp.startswith("0001-"):
        return 0.0
    from datetime import datetime

    text = stamp.rstrip("Z").split(".")[0]
    try:
        return datetime.fromisoformat(text + "+00:00").timestamp()
    except ValueError:
        return 0.0


# ---------------------------------------------------------------- disk


_layers: dict[str, list[tuple[object, int]]] = {}


def layers(image_id: str) -> list[tuple[object, int]]:
    """The layers of an image as (identity, bytes); an identity is the chain of layers up to it, so two images
    that share a base share its identities."""
    if image_id in _layers:
        return _layers[image_id]
    api = containers.client().api
    diff_ids = (api.inspect_image(image_id).get("RootFS") or {}).get("Layers") or []
    sizes = [entry.get("Size", 0) for entry in reversed(api.history(image_id))]  # oldest first
    nonzero = [s for s in sizes if s]
    if len(nonzero) == len(diff_ids):
        found = [(tuple(diff_ids[:i + 1]), size) for i, size in enumerate(nonzero)]
    else:
        # Empty layers (0 bytes) cannot be told from metadata-only history entries: pair the sizes with the
        # newest layers, whose chain identities are unique to this image, so nothing shared is undercounted.
        found = [((image_id, i), size) for i, size in enumerate(nonzero)]
    _layers[image_id] = found
    return found


def disk_bytes(image_ids: Iterable[str]) -> int:
    """Bytes the images take together, each shared layer counted once."""
    seen: dict[object, int] = {}
    for image_id in set(image_ids):
        try:
            seen.update(layers(image_id))
        except (NotFound, ImageNotFound):
            continue
    return sum(seen.values())


def docker_free_bytes() -> int | None:
    """Free disk under Docker's data root, when that folder is on this machine (None for a remote engine)."""
    try:
        root = containers.client().info().get("DockerRootDir")
        return shutil.disk_usage(root).free if root else None
    except (OSError, DockerException):
        return None


def gb(size: int | float | None) -> str:
    return "?" if size is None else f"{size / GB:.2f} GB"


# ---------------------------------------------------------------- preflight


@dataclass
class ImageStatus:
    name: str
    image_id: str | None = None
    size: int = 0  # bytes of its own layers, alone
    registry: str | None = None  # for a missing image: available | missing (...) | unknown (...)

    @property
    def present(self) -> bool:
        return self.image_id is not None

    @property
    def obtainable(self) -> bool:
        return self.present or self.registry == "available"


@dataclass
class Preflight:
    images: list[ImageStatus]
    needed_bytes: int  # every image the tasks need, shared layers once (missing ones: unknown, not counted)
    free_bytes: int | None
    budget_bytes: int | None

    @property
    def missing(self) -> list[ImageStatus]:
        return [i for i in self.images if not i.present]

    @property
    def unobtainable(self) -> list[ImageStatus]:
        return [i for i in self.images if not i.obtainable]

    @property
    def ok(self) -> bool:
        return not self.unobtainable

    def line(self) -> str:
        parts = [f"images: {len(self.images) - len(self.missing)} of {len(self.images)} present "
                 f"({gb(self.needed_bytes)})"]
        pullable = [i for i in self.missing if i.obtainable]
        if pullable:
            parts.append(f"{len(pullable)} to pull")
        if self.unobtainable:
            parts.append(f"{len(self.unobtainable)} cannot be had")
        if self.budget_bytes is not None:
            parts.append(f"cache budget {gb(self.budget_bytes)}")
        if self.free_bytes is not None:
            parts.append(f"{gb(self.free_bytes)} free for Docker")
        return ", ".join(parts)

    def problem(self) -> str:
        """Why the run cannot have its images, naming them (the first few)."""
        shown = self.unobtainable[:5]
        more = len(self.unobtainable) - len(shown)
        names = "; ".join(f"{i.name}: {i.registry}" for i in shown) + (f"; and {more} more" if more else "")
        return (f"{len(self.unobtainable)} image(s) are missing locally and no registry confirmed it has them: "
                f"{names}. Build them (bundled tasks: `swepipe images build`), `docker login` to their registry, "
                "or fix --image-template")


def preflight(names: Iterable[str], budget_gb: float | None = None, registry_timeout: float = REGISTRY_TIMEOUT,
              ask_registry: bool = True) -> Preflight:
    """Which of the images ``names`` are present, their sizes and total, and for missing ones whether the
    registry has them (asked in parallel, each query bounded by ``registry_timeout``)."""
    statuses = []
    for name in dict.fromkeys(names):
        image = local_image(name)
        status = ImageStatus(name)
        if image is not None:
            status.image_id = image.id
            status.size = disk_bytes([image.id])
        statuses.append(status)
    missing = [s for s in statuses if not s.present]
    if missing and ask_registry:
        threads = []
        given_up: dict[str, str] = {}  # registry host -> why it could not be asked: the rest of its images are not
        for status in missing:
            def ask(status=status):
                host = registry_host(status.name)
                if host in given_up:  # unreachable or rate-limited: asking each of 731 images would take minutes
                    status.registry = f"{given_up[host]} (not asked again)"
                    return
                status.registry = registry_status(status.name, registry_timeout)
                if status.registry.startswith("unknown ("):
                    given_up.setdefault(host, status.registry)
            threads.append(threading.Thread(target=ask, daemon=True))
        for thread in threads[:16]:
            thread.start()
        for index, thread in enumerate(threads):
            thread.join()
            if index + 16 < len(threads):
                threads[index + 16].start()
    elif missing:
        for status in missing:
            status.registry = "unknown (registry not asked)"
    return Preflight(statuses, disk_bytes(s.image_id for s in statuses if s.present), docker_free_bytes(),
                     None if budget_gb is None else int(budget_gb * GB))


# ---------------------------------------------------------------- pruning


def images_in_use() -> set[str]:
    """Ids of the images a running swepipe container (any run, any process) was started from."""
    # ignore_removed: a container another task removes between the listing and its inspection is simply gone
    found = containers.client().containers.list(filters={"label": containers.LABEL, "status": "running"},
                                                ignore_removed=True)
    return {c.attrs.get("Image") for c in found if c.attrs.get("Image")}


def sanitised_images(sources: set[str] | None = None) -> list:
    """swepipe's cached sanitised images (of the task images ``sources``, by id, when given)."""
    found = containers.client().images.list(name=containers.SANITISED_REPOSITORY)
    if sources is None:
        return found
    return [i for i in found if (i.labels or {}).get("swepipe.source_image") in sources]


@dataclass
class PruneResult:
    before: int
    after: int
    removed: list[str] = field(default_factory=list)
    kept_in_use: list[str] = field(default_factory=list)


def prune(task_images: Iterable[str], keep_bytes: int, *, all_sanitised: bool = False,
          protect: Iterable[str] = ()) -> PruneResult:
    """Remove the task images named ``task_images`` and their sanitised copies (every cached sanitised image too
    with ``all_sanitised``), least recently used first, until what they take together is at most ``keep_bytes``.

    A task image goes with its sanitised copies (removing one alone frees nothing they share). Never removed: an
    image a running swepipe container uses, or one in ``protect`` (names or ids: the images of tasks running now).
    """
    client = containers.client()
    groups: dict[str, dict] = {}  # task image id (or a lone sanitised image's id) -> its names and images
    for name in dict.fromkeys(task_images):
        image = local_image(name)
        if image is not None:
            group = groups.setdefault(image.id, {"names": [], "images": {image.id: image}})
            group["names"].append(name)
    sources = None if all_sanitised else set(groups)
    for copy in sanitised_images(sources):
        source = (copy.labels or {}).get("swepipe.source_image")
        key = source if source in groups else copy.id
        group = groups.setdefault(key, {"names": [], "images": {}})
        group["images"][copy.id] = copy
        group["names"].extend(t for t in copy.tags if t not in group["names"])
    protected = set(protect)
    protected |= {local.id for name in protect if (local := local_image(name)) is not None}
    in_use = images_in_use()

    def total() -> int:
        return disk_bytes(i for g in groups.values() for i in g["images"])

    result = PruneResult(before=total(), after=0)
    order = sorted(groups, key=lambda key: max(last_used(i) for i in groups[key]["images"].values()))
    current = result.before
    for key in order:
        if current <= keep_bytes:
            break
        group = groups[key]
        ids = set(group["images"])
        busy = ids & (in_use | protected) or any(n in protected for n in group["names"])
        if busy:
            result.kept_in_use.extend(group["names"] or sorted(ids))
            continue
        result.removed.extend(_remove_group(client, group))
        if not group["images"]:
            del groups[key]
        current = total()
    result.after = total() if groups else 0
    return result


def _remove_group(client, group: dict) -> list[str]:
    """Remove a group's sanitised copies first, then the task image's names (its other tags stay); an image a
    container (even a stopped one) still uses is refused by Docker and kept. Removed images leave the group."""
    removed = []
    copies = [i for i in group["images"].values() if (i.labels or {}).get("swepipe.source_image")]
    others = [i for i in group["images"].values() if i not in copies]
    for image in [*copies, *others]:
        refs = (image.tags or [image.id]) if image in copies else [n for n in group["names"] if n in image.tags]
        for ref in refs:
            try:
                client.images.remove(ref, force=False)
            except NotFound:
                pass
            except APIError:
                return removed  # in use (a container created from it meanwhile): keep the rest of the group
            removed.append(ref)
        del group["images"][image.id]
        with _used_lock:
            for ref in (image.id, *image.tags):
                _used.pop(ref, None)
    return removed


def check_run_images(tasks, settings, announce=print, registry_timeout: float = REGISTRY_TIMEOUT) -> Preflight:
    """The preflight at the start of a run: one summary line; RuntimeUnavailable when an image cannot be had
    (so the run stops in its first minute, not an hour in)."""
    finished = settings.layout.finished()
    todo = [t for t in tasks if t.instance_id not in finished]
    return require_images(run_image_names(todo, settings.image_template), settings.config.containers.image_cache_gb,
                          announce, registry_timeout)


def require_images(names: Iterable[str], budget_gb: float | None = None, announce=print,
                   registry_timeout: float = REGISTRY_TIMEOUT) -> Preflight:
    """The preflight of `swepipe run` and `swepipe eval`: one summary line; RuntimeUnavailable when an image
    cannot be had."""
    check = preflight(names, budget_gb, registry_timeout=registry_timeout)
    announce(check.line())
    if not check.ok:
        raise RuntimeUnavailable(check.problem() + "; or pass --skip-image-check")
    return check


# ---------------------------------------------------------------- prefetch


def run_images_bytes(names: Iterable[str]) -> int:
    """Disk the images ``names`` that are present take, with their sanitised copies, shared layers once."""
    present = {i.id for n in dict.fromkeys(names) if (i := local_image(n)) is not None}
    return disk_bytes([*present, *(c.id for c in sanitised_images(present))])


def prefetch_image(name: str, platform: str | None = None, *, keep_bytes: int | None = None,
                   counted: Iterable[str] = (), prunable: Iterable[str] = (),
                   protect: Callable[[], Iterable[str]] = tuple, lock=None) -> dict:
    """Pull ``name`` ahead of the task that needs it, on the machine that will run it: a plain function, called by
    the thread executor's prefetch thread (``RunImageCache``) and callable on a cluster node the same way.

    Within a disk budget ``keep_bytes`` for the run's images ``counted`` (with their sanitised copies): Docker
    cannot tell an image's size before pulling it, so it is estimated as the largest counted image present (none
    present: nothing to estimate from, nothing pulled); images of ``prunable`` (finished tasks) are removed least
    recently used first to make room, never one in ``protect()`` (names in use: called when it matters) or used
    by a running container; if it still does not fit, nothing is pulled. An image that, once pulled, takes more
    than estimated and pushes the run's images past the budget is removed again (its task pulls it when it
    starts). ``lock`` (a context manager) is held while room is made and while that last check runs.

    One try: a failure (a rate limit too) is no error, the task pulls the image itself, with retries. Returns a
    record: ``outcome`` present | pulled | skipped | failed | removed, with ``reason``, ``bytes`` and ``seconds``.
    """
    started = time.monotonic()
    try:
        guard = lock if lock is not None else contextlib.nullcontext()
        record = _prefetch(name, platform, keep_bytes, [n for n in dict.fromkeys(counted) if n != name],
                           list(dict.fromkeys(prunable)), protect, guard)
    except stopping.Stopped:
        raise
    except (Exception, RuntimeUnavailable) as exc:  # noqa: BLE001 - a failed prefetch is no error: the task pulls
        # the image itself (and meets a lasting fault there, as infrastructure)
        record = {"outcome": "failed", "reason": error_text(exc, 500)}
    return {"prefetch": name, **record, "seconds": round(time.monotonic() - started, 2)}


def _prefetch(name, platform, keep_bytes, counted, prunable, protect, guard) -> dict:
    from pipeline.runtime.images import ensure_image

    if local_image(name) is not None:
        return {"outcome": "present"}
    record: dict = {}
    if keep_bytes is not None:
        with guard:
            sizes = [disk_bytes([i.id]) for n in counted if (i := local_image(n)) is not None]
            if not sizes:
                return {"outcome": "skipped", "reason": "no image of the run is present to estimate its size by"}
            estimate = record["estimate_bytes"] = max(sizes)
            used = run_images_bytes(counted)
            if used + estimate > keep_bytes:
                busy = set(protect())
                candidates = [n for n in prunable if n not in busy]
                if candidates:  # make room: what the candidates may keep so that the rest and this one fit
                    others = used - run_images_bytes(candidates)
                    record["removed"] = prune(candidates, max(0, keep_bytes - estimate - others), protect=busy).removed
                    used = run_images_bytes(counted)
            if used + estimate > keep_bytes:
                return {**record, "outcome": "skipped",
                        "reason": f"the run's images take {gb(used)}; with this one (about {gb(estimate)}, the "
                                  f"largest of the run's) they would pass the budget of {gb(keep_bytes)}"}
    image = ensure_image(name, platform=platform, show_progress=False, attempts=1)
    touch(image.id)
    record.update(outcome="pulled", bytes=disk_bytes([image.id]))
    if keep_bytes is not None:
        with guard:
            used = run_images_bytes([*counted, name])
            if used > keep_bytes and name not in set(protect()):
                try:
                    containers.client().images.remove(name, force=False)
                    record.update(outcome="removed", reason=f"it takes {gb(record['bytes'])}, more than estimated: "
                                                            f"the run's images would take {gb(used)}, past the budget")
                except APIError:
                    pass  # gone already, or a container uses it now (its task started): in use, kept
    return record


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
        return cls(run.image_template, containers_config.image_cache_gb, run.layout.root / "image_cache.jsonl", log,
                   queue=queue, platform=containers_config.platform)

    def _name(self, task) -> str | None:
        from pipeline.errors import SwepipeError

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
            from pipeline.storage import append_jsonl

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
                        for instance_id, ahead in list(self.prefetched.items()):
                            if used <= self.keep:
                                break
                            if ahead in self.running.values():
                                continue
                            dropped = prune([ahead], 0, protect=set(self.running.values()))
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
