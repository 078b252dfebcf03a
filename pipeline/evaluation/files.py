"""Tar archives in and out of containers."""

from __future__ import annotations

import io
import tarfile
import tempfile
from pathlib import Path


def tar_of(files: dict[str, bytes], directory: str) -> bytes:
    """A tar holding ``directory``/name for each file, for `put_archive` at /."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        folder = tarfile.TarInfo(directory.strip("/"))
        folder.type, folder.mode = tarfile.DIRTYPE, 0o777
        archive.addfile(folder)
        for name, payload in files.items():
            info = tarfile.TarInfo(f"{directory.strip('/')}/{name}")
            info.size, info.mode = len(payload), 0o755 if name.endswith(".sh") else 0o644
            archive.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def extract_archive(chunks, names: set[str], into: Path) -> set[str]:
    """Save the regular files called ``names`` from a `get_archive` stream; returns those found.

    The stream is spooled to disk first, so a gigabyte of test log never sits in memory.
    """
    found = set()
    with tempfile.TemporaryFile() as spool:
        for chunk in chunks:
            spool.write(chunk)
        spool.seek(0)
        with tarfile.open(fileobj=spool, mode="r|") as archive:
            for member in archive:
                name = member.name.rsplit("/", 1)[-1]
                if member.isfile() and name in names:
                    with open(into / name, "wb") as out:
                        source = archive.extractfile(member)
                        while block := source.read(1 << 20):
                            out.write(block)
                    found.add(name)
    return found
