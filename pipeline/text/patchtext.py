"""Patches as text that keeps every byte, so a diff of a file that is not UTF-8 (Latin-1, Shift-JIS) still applies.

A `git diff` is bytes. swepipe holds it as ``str`` decoded with ``surrogateescape``: UTF-8 text reads as
itself and each byte that is not valid UTF-8 becomes one lone surrogate (U+DC80..U+DCFF). Such a string
survives JSON (``json.dumps`` writes ``\\udce9``, ``json.loads`` reads it back), so the candidate record,
the pool, ``predictions.jsonl`` and the eval artefacts all carry the exact bytes. Wherever a patch
leaves Python (a file, a container) it is encoded back the same way. Text for a model gets
``printable``: the undecodable bytes shown as U+FFFD, since a provider's JSON cannot carry lone surrogates.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

_SECTION_START = re.compile(r"(?m)^(?=diff --git )")


def from_bytes(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def to_bytes(text: str) -> bytes:
    """The bytes ``text`` came from; other lone surrogates (from a foreign predictions file) become '?'."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return "".join(c if not 0xD800 <= ord(c) <= 0xDFFF or 0xDC80 <= ord(c) <= 0xDCFF else "?"
                       for c in text).encode("utf-8", "surrogateescape")


def printable(text: str) -> str:
    """``text`` for a prompt or a screen: bytes that are not UTF-8 shown as U+FFFD."""
    return to_bytes(text).decode("utf-8", "replace")


def write(path: Path, text: str) -> None:
    path.write_bytes(to_bytes(text))


def read(path: Path) -> str:
    return from_bytes(path.read_bytes())


def digest(text: str) -> str:
    """The sha256 of the patch's bytes: which patch a verdict is on."""
    return hashlib.sha256(to_bytes(text)).hexdigest()


def sections(patch: str) -> list[str]:
    """The patch cut before each ``diff --git`` line, byte for byte: what comes before the first one (if anything),
    then one section per file."""
    return [section for section in _SECTION_START.split(patch) if section]


def file_sections(patch: str) -> dict[str, str]:
    """Each file's section of a git diff, keyed by its ``diff --git`` line's paths as git wrote them (``a/x b/x``:
    the same file in two diffs of one tree gets the same key); text before the first section is left out."""
    found = {}
    for section in sections(patch):
        if section.startswith("diff --git "):
            found[section.split("\n", 1)[0].removeprefix("diff --git ")] = section
    return found


def hunks(section: str) -> list[str]:
    """A file section's hunks (each from its ``@@`` line), after its header."""
    return [hunk for hunk in re.split(r"(?m)^(?=@@)", section)[1:]]


_PATCHED_PATH = re.compile(r'(?m)^(?:(?:\+\+\+|---) "?[ab]/|rename (?:from|to) "?)(.*?)"?(?:\t.*)?$')


def touched_paths(patch: str) -> list[str]:
    """The paths a patch's file headers name (before and after, renames' too), each once, in order."""
    return list(dict.fromkeys(_PATCHED_PATH.findall(patch or "")))
