"""The preflight: which of a run's task images are present, their disk, and for missing ones whether a registry
has them, so that a run without its images stops in its first minute, not an hour in.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from pipeline.errors import RuntimeUnavailable
from pipeline.records.prediction import finished_predictions
from pipeline.runtime.images.disk import GB, disk_bytes, docker_free_bytes, gb
from pipeline.runtime.images.names import REGISTRY_TIMEOUT, local_image, registry_host, registry_status, run_image_names


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
    return Preflight(statuses, disk_bytes(s.image_id for s in statuses if s.image_id is not None), docker_free_bytes(),
                     None if budget_gb is None else int(budget_gb * GB))


def check_run_images(tasks, settings, announce=print, registry_timeout: float = REGISTRY_TIMEOUT) -> Preflight:
    """The preflight at the start of a run: one summary line; RuntimeUnavailable when an image cannot be had
    (so the run stops in its first minute, not an hour in)."""
    finished = finished_predictions(settings.layout.predictions)
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

