"""Tar archives in and out of containers."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from pipeline.evaluation.logs import save_capped


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


def extract_archive(chunks, names: set[str], into: Path, limits: dict[str, int] | None = None) -> set[str]:
    """Save the regular files called ``names`` from a `get_archive` stream; returns those found. A file named in
    ``limits`` keeps at most that many bytes (``pipeline.evaluation.logs``).

    The stream is read as it comes, so a gigabyte of test log never sits in memory, nor on disk in full.
    """
    found = set()
    with tarfile.open(fileobj=_Chunks(chunks), mode="r|") as archive:
        for member in archive:
            name = member.name.rsplit("/", 1)[-1]
            if member.isfile() and name in names:
                source = archive.extractfile(member)
                blocks = iter(lambda: source.read(1 << 20), b"")
                if limits and name in limits:
                    save_capped(blocks, into / name, limits[name])
                else:
                    with open(into / name, "wb") as out:
                        for block in blocks:
                            out.write(block)
                found.add(name)
    return found


class _Chunks(io.RawIOBase):
    """An iterable of byte strings, read as a file."""

    def __init__(self, chunks):
        self._chunks = iter(chunks)
        self._left = memoryview(b"")  # a view: taking a piece of it copies nothing

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if not self._left:
            self._left = memoryview(next((chunk for chunk in self._chunks if chunk), b""))
        size = min(len(buffer), len(self._left))
        buffer[:size] = self._left[:size]
        self._left = self._left[size:]
        return size
