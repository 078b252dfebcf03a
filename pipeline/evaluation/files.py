"""Tar archives in and out of containers."""

from __future__ import annotations

import functools
import hashlib
import io
import tarfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pipeline.evaluation.logs import save_capped


def tar_of(files: dict[str, bytes], directory: str) -> bytes:
    """A tar holding ``directory``/name for each file, for `put_archive` at /."""
    return b"".join(tar_stream(files, directory))


def tar_stream(files: Mapping[str, bytes | Path], directory: str, block: int = 1 << 20) -> Iterator[bytes]:
    """``tar_of`` as a stream of pieces, for `put_archive` at /: a file given as a Path is read as the stream is
    sent, so a log of any size is never held in memory."""
    folder = tarfile.TarInfo(directory.strip("/"))
    folder.type, folder.mode = tarfile.DIRTYPE, 0o777
    yield folder.tobuf()
    for name, content in files.items():
        info = tarfile.TarInfo(f"{directory.strip('/')}/{name}")
        info.size = len(content) if isinstance(content, bytes) else content.stat().st_size
        info.mode = 0o755 if name.endswith(".sh") else 0o644
        yield info.tobuf()
        if isinstance(content, bytes):
            yield content
        else:
            with open(content, "rb") as source:
                left = info.size
                while left > 0:
                    piece = source.read(min(block, left))
                    if not piece:
                        raise OSError(f"{content} was cut short while it was sent")
                    left -= len(piece)
                    yield piece
        yield b"\0" * (-info.size % tarfile.BLOCKSIZE)
    yield b"\0" * (2 * tarfile.BLOCKSIZE)


def extract_archive(chunks: Iterable[bytes], names: set[str], into: Path,
                    limits: dict[str, int] | None = None) -> set[str]:
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
                assert source is not None  # a regular file's member always has a reader
                blocks = iter(functools.partial(source.read, 1 << 20), b"")
                if limits and name in limits:
                    save_capped(blocks, into / name, limits[name])
                else:
                    with open(into / name, "wb") as out:
                        for block in blocks:
                            out.write(block)
                found.add(name)
    return found


def archive_digests(chunks: Iterable[bytes], names: set[str]) -> dict[str, str]:
    """name -> sha256 (hex) of each regular file called one of ``names`` right under the archived folder of a
    `get_archive` stream; for an entry of such a name that is no regular file (a link, a folder), its kind.
    Read as it comes: a file of any size is hashed, never held."""
    found = {}
    with tarfile.open(fileobj=_Chunks(chunks), mode="r|") as archive:
        for member in archive:
            _, _, name = member.name.partition("/")
            if name not in names:
                continue
            if not member.isfile():
                found[name] = "a link" if member.issym() or member.islnk() else "a folder" if member.isdir() else \
                    "a special file"
                continue
            digest, source = hashlib.sha256(), archive.extractfile(member)
            assert source is not None  # a regular file's member always has a reader
            for block in iter(functools.partial(source.read, 1 << 20), b""):
                digest.update(block)
            found[name] = digest.hexdigest()
    return found


class _Chunks(io.RawIOBase):
    """An iterable of byte strings, read as a file."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._left = memoryview(b"")  # a view: taking a piece of it copies nothing

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:  # a writable buffer (memoryview, bytearray)
        if not self._left:
            self._left = memoryview(next((chunk for chunk in self._chunks if chunk), b""))
        size = min(len(buffer), len(self._left))
        buffer[:size] = self._left[:size]
        self._left = self._left[size:]
        return size
