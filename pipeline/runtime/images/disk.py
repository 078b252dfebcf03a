"""The disk images take and when they were last used: what the preflight reports and what pruning orders by.

Disk is counted as Docker stores it: by layer, each layer once, however many images share it (a task image's
sanitised copy adds only its own top layer).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterable
from datetime import datetime

from docker.errors import DockerException, ImageNotFound, NotFound

from pipeline.runtime import containers
from pipeline.runtime.images.names import local_image

GB = 10 ** 9  # as `docker images` counts

_used: dict[str, float] = {}  # image id -> when this process last used it (prepare_image, a finished task)
_used_lock = threading.Lock()


def touch(ref: str, when: float | None = None) -> None:
    """Record that the image ``ref`` (an id or a name) was just used, or at ``when`` (as another process on this
    machine recorded it): the least-recently-used order for pruning."""
    with _used_lock:
        _used[ref] = time.time() if when is None else when


def forget(refs: Iterable[str]) -> None:
    """Drop what this process recorded of the images ``refs`` (ids or names): they were removed."""
    with _used_lock:
        for ref in refs:
            _used.pop(ref, None)


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
    text = stamp.rstrip("Z").split(".")[0]
    try:
        return datetime.fromisoformat(text + "+00:00").timestamp()
    except ValueError:
        return 0.0


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
        found: list[tuple[object, int]] = [(tuple(diff_ids[:i + 1]), size) for i, size in enumerate(nonzero)]
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


def sanitised_images(sources: set[str] | None = None) -> list:
    """swepipe's cached sanitised images (of the task images ``sources``, by id, when given)."""
    found = containers.client().images.list(name=containers.SANITISED_REPOSITORY)
    if sources is None:
        return found
    return [i for i in found if (i.labels or {}).get("swepipe.source_image") in sources]


def run_images_bytes(names: Iterable[str]) -> int:
    """Disk the images ``names`` that are present take, with their sanitised copies, shared layers once."""
    present = {i.id for n in dict.fromkeys(names) if (i := local_image(n)) is not None}
    return disk_bytes([*present, *(c.id for c in sanitised_images(present))])


def docker_free_bytes() -> int | None:
    """Free disk under Docker's data root, when that folder is on this machine (None for a remote engine)."""
    try:
        root = containers.client().info().get("DockerRootDir")
        return shutil.disk_usage(root).free if root else None
    except (OSError, DockerException):
        return None


def gb(size: int | float | None) -> str:
    return "?" if size is None else f"{size / GB:.2f} GB"
