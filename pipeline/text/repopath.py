"""Paths as models write them, made paths from the repository root: the one way spans and edits read a path.

Models are told the repository is at /app, and copy paths from diffs, so they write ``/app/pkg/a.py``,
``./pkg/a.py``, ``pkg//a.py``, ``pkg\\a.py`` and ``a/pkg/a.py`` for ``pkg/a.py``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterable

WHOLE_REPOSITORY = "names the whole repository, not a file"
DIFF_HEADS = ("a", "b")  # a unified diff's prefixes


def from_root(raw: str, roots: Iterable[str] = ()) -> tuple[str, str | None]:
    """``raw`` as a path from the repository root, and why it cannot be one (else None).

    ``roots`` are the repository's absolute folders (``/app``): a path under one is taken from there.
    Refused: the repository itself, an absolute path elsewhere (also ``~`` and a drive letter) and a path
    that ``..`` takes out of the repository. A ``..`` that stays inside is resolved.
    """
    text, roots = raw.strip().replace("\\", "/"), list(roots)
    for root in roots:
        prefix = root.rstrip("/")
        if prefix and text in (prefix, prefix + "/"):
            return text, WHOLE_REPOSITORY
        if prefix and text.startswith(prefix + "/"):
            text = text[len(prefix) + 1:].lstrip("/")
            break
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if (text.startswith(("/", "~")) or re.match(r"[A-Za-z]:/", text)) and parts:
        named = [root.rstrip("/") for root in roots if root.rstrip("/")]
        where = f" ({', '.join(named)})" if named else ""
        return text, f"is an absolute path outside the repository{where}; name the file from the repository root"
    normal = posixpath.normpath("/".join(parts)) if parts else "."
    if normal == ".." or normal.startswith("../"):
        return text, "reaches outside the repository"
    if normal == ".":
        return text, WHOLE_REPOSITORY
    return normal, None


def without_diff_prefix(path: str, exists: Callable[[str], bool], *, heads: Iterable[str] = DIFF_HEADS,
                        folders: Iterable[str] | None = None) -> str:
    """``path`` without a diff's ``a/`` or ``b/`` (or another of ``heads``) when no such file exists and the rest
    does; or, for a new file, when the repository has no top-level folder of that name (``folders``, if known).
    A real folder named ``a/`` keeps its name."""
    head, _, rest = path.partition("/")
    if head not in tuple(heads) or not rest or exists(path):
        return path
    if exists(rest):
        return rest
    if folders is not None and head not in set(folders):
        return rest
    return path
