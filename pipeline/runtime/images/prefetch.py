"""Prefetch: a task's image pulled ahead of the task, on the machine that will run it, within a disk budget."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable

from docker.errors import APIError

from pipeline.control import stopping
from pipeline.errors import InfrastructureFault, RuntimeUnavailable
from pipeline.runtime import containers
from pipeline.runtime.images.disk import disk_bytes, gb, run_images_bytes, touch
from pipeline.runtime.images.names import error_text, local_image
from pipeline.runtime.images.prepare import ensure_image
from pipeline.runtime.images.prune import prune


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
    except RuntimeUnavailable as exc:  # a failed prefetch is no error: the task pulls the image itself (and meets
        # a lasting fault there, as infrastructure)
        record = {"outcome": "failed", "reason": error_text(exc, 500)}
    except InfrastructureFault:
        raise
    except Exception as exc:  # noqa: BLE001 - nor is anything else a failed prefetch meets
        record = {"outcome": "failed", "reason": error_text(exc, 500)}
    return {"prefetch": name, **record, "seconds": round(time.monotonic() - started, 2)}


def _prefetch(name, platform, keep_bytes, counted, prunable, protect, guard) -> dict:
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
