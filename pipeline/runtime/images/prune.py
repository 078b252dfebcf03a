"""Pruning: a run's task images and their sanitised copies removed, least recently used first, down to a disk
budget, never one a running swepipe container uses or one a running task needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from docker.errors import APIError, NotFound

from pipeline.runtime import containers
from pipeline.runtime.images.disk import disk_bytes, forget, last_used, sanitised_images
from pipeline.runtime.images.names import local_image


def images_in_use() -> set[str]:
    """Ids of the images a running swepipe container (any run, any process) was started from."""
    # ignore_removed: a container another task removes between the listing and its inspection is simply gone
    found = containers.client().containers.list(filters={"label": containers.LABEL, "status": "running"},
                                                ignore_removed=True)
    return {c.attrs.get("Image") for c in found if c.attrs.get("Image")}


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
    removed: list[str] = []
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
        forget((image.id, *image.tags))
    return removed
