"""Building the bundled tasks' images with no registry: base, one per language, one per task.

Each image carries a label with a hash of everything it is built from (and of the image below
it), so a rebuild happens exactly when something changed and `swepipe images build` is cheap to
rerun.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from docker.errors import APIError, BuildError

from pipeline.bundled import build
from pipeline.errors import RuntimeUnavailable
from pipeline.runtime import containers
from pipeline.runtime.images.debian_base import BASE_IMAGE, build_base_image
from pipeline.runtime.images.names import local_image

SOURCE_LABEL = "swepipe.source_hash"


@dataclass
class Built:
    image: str
    seconds: float
    cached: bool


def _image_id(name: str) -> str:
    return containers.client().images.get(name).id


def _current_hash(name: str) -> str | None:
    image = local_image(name)
    return None if image is None else (image.labels or {}).get(SOURCE_LABEL)


def _hash_files(paths: list[Path], root: Path, *extra: str) -> str:
    digest = hashlib.sha256()
    for part in extra:
        digest.update(part.encode() + b"\0")
    for path in sorted(paths):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _docker_build(context: Path, tag: str, source_hash: str) -> None:
    try:
        containers.client().images.build(path=str(context), tag=tag, rm=True, forcerm=True,
                                         labels={SOURCE_LABEL: source_hash, containers.LABEL: "1"})
    except BuildError as error:
        log = "".join(chunk.get("stream", "") or chunk.get("error", "") for chunk in error.build_log)[-3000:]
        raise RuntimeUnavailable(f"building {tag} failed: {error.msg}\n{log}") from None
    except APIError as error:
        raise RuntimeUnavailable(f"building {tag} failed: {error}") from None


def build_language_image(language: str, force: bool = False) -> Built:
    tag = build.language_image(language)
    folder = build.IMAGES_ROOT / build.LANGUAGE_IMAGES[language]
    source_hash = _hash_files([p for p in folder.rglob("*") if p.is_file()], folder, _image_id(BASE_IMAGE))
    if not force and _current_hash(tag) == source_hash:
        return Built(tag, 0.0, True)
    started = time.monotonic()
    _docker_build(folder, tag, source_hash)
    return Built(tag, time.monotonic() - started, False)


def build_task_image(task_dir: Path, force: bool = False) -> Built:
    task = build.load_task(task_dir)
    tag = build.image_name(task)
    files = [p for p in task_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    source_hash = _hash_files(files, task_dir, _image_id(build.language_image(task["repo_language"])),
                              Path(build.__file__).read_text())
    if not force and _current_hash(tag) == source_hash:
        return Built(tag, 0.0, True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="swepipe-context-") as scratch:
        context = build.docker_context(task_dir, Path(scratch) / "context")
        _docker_build(context, tag, source_hash)
    return Built(tag, time.monotonic() - started, False)


def build_images(instance_ids: list[str] | None = None, force: bool = False, on_step=None) -> list[Built]:
    """Base, language and task images for the bundled tasks (all, or those named), in build order."""
    task_dirs = [d for d in build.task_dirs() if instance_ids is None or d.name in instance_ids]
    # js and ts share the node image: one build per distinct image.
    by_image = {build.language_image(build.load_task(d)["repo_language"]): build.load_task(d)["repo_language"]
                for d in task_dirs}
    steps = [("base", BASE_IMAGE)] + [("language", lang) for _, lang in sorted(by_image.items())] \
        + [("task", d) for d in task_dirs]
    results: list[Built] = []
    for number, (kind, item) in enumerate(steps):
        if on_step:
            on_step(kind, item, number, len(steps))
        if kind == "base":
            seconds = build_base_image(force=force, log=lambda _line: None)
            results.append(Built(BASE_IMAGE, seconds, seconds == 0.0))
        elif kind == "language":
            results.append(build_language_image(str(item), force))
        else:
            results.append(build_task_image(Path(item), force))
    return results
