"""The Debian base image every bundled task image builds on, made with no registry.

debootstrap lays out a minimal bookworm rootfs from Debian's package mirror, and the Docker
engine imports it as an image; language layers and task images are ordinary `docker build`s on top.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from pipeline.errors import RuntimeUnavailable
from pipeline.runtime import containers
from pipeline.runtime.images.names import local_image

BASE_IMAGE = "swepipe-base:bookworm"
BASE_PACKAGES = ("git", "python3", "python-is-python3", "ca-certificates", "procps")
DEBIAN_MIRROR = "http://deb.debian.org/debian"


def base_image_exists(name: str = BASE_IMAGE) -> bool:
    return local_image(name) is not None


def build_base_image(name: str = BASE_IMAGE, *, force: bool = False, mirror: str = DEBIAN_MIRROR,
                     log=print) -> float:
    """Build ``name`` unless it exists; returns the seconds spent (0 when cached)."""
    if not force and base_image_exists(name):
        return 0.0
    if shutil.which("debootstrap") is None:
        raise RuntimeUnavailable("building the base image needs debootstrap (apt-get install -y debootstrap)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="swepipe-rootfs-") as scratch:
        rootfs = Path(scratch) / "rootfs"
        log(f"debootstrap bookworm into {rootfs} ...")
        boot = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", "bookworm",
             str(rootfs), mirror], capture_output=True, text=True)
        if boot.returncode != 0:
            raise RuntimeUnavailable(f"debootstrap failed:\n{boot.stderr[-3000:] or boot.stdout[-3000:]}")
        shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
        (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
        tarball = Path(scratch) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
        log(f"importing {name} ...")
        repository, _, tag = name.partition(":")
        containers.client().api.import_image_from_file(str(tarball), repository=repository,
                                                       tag=tag or "latest", changes=['CMD ["bash"]'])
    return time.monotonic() - started
