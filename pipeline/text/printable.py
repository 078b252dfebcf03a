"""Text as swepipe shows it anywhere (a terminal, a log, report.md, an HTML page): whatever a run file, a model, a
test or a provider held, made safe to show and to write as UTF-8."""

from __future__ import annotations

import json
import re

# A terminal's colour and cursor codes, as test runners print them: ESC [ numbers, then one letter. Only these go:
# a looser pattern took the characters after a stray "ESC [" (", [" of the next value in a joined cell) with it.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# C0 controls but tab, newline and carriage return; DEL; C1 controls (U+009B is a terminal's one-character CSI)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def clean(value) -> str:
    """Text that can be shown and written as UTF-8: a byte that was not UTF-8 (held as a ``\\udcXX`` escape)
    shows as ``\\xXX``, terminal colour codes go, other control characters show as U+FFFD; a value that is no
    text shows as JSON (None as nothing)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False, default=str)
    text = _SURROGATE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}" if 0xDC80 <= ord(m.group()) <= 0xDCFF
                          else "\ufffd", text)
    return _CONTROL.sub("\ufffd", _ANSI.sub("", text))


# A SWE-Bench Pro instance id: instance_<owner>__<repo>-<40 hex of the base commit>[-v<hex of the image version>]
_TASK_ID = re.compile(r"(?:instance_)?(?P<owner>.+?)__(?P<repo>.+)-(?P<commit>[0-9a-f]{40})(?P<version>-v[0-9a-z]+)?")
_SHORT_HASH = 7
_LONGEST = 40  # an id of no known shape is shown whole up to this many characters
# what would break an id over lines or hide part of it, as the escapes a reader can type back
_ON_ONE_LINE = str.maketrans({"\n": "\\n", "\r": "\\r", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def short_id(instance_id: str) -> str:
    """A task's id as every table and line shows it: ``<repo>@<short commit>`` for the SWE-Bench Pro shape
    (``instance_swepipe-bundled__markroll-4554c23...`` -> ``markroll@4554c23``), any other id without its
    ``instance_`` prefix, its middle elided past 40 characters; always on one line. Several ids in one table:
    ``short_ids``, which keeps them apart."""
    return _shortened(instance_id, _SHORT_HASH)


def short_ids(instance_ids: list[str]) -> dict[str, str]:
    """Each id's short form (``short_id``), distinct within ``instance_ids``: ids whose short forms meet show more
    of their commit, then (when that is not enough) whole, then numbered."""
    distinct = list(dict.fromkeys(instance_ids))
    shown = {i: short_id(i) for i in distinct}
    for digits in (12, 40):
        clashing = _clashing(shown)
        if not clashing:
            return shown
        shown.update({i: _shortened(i, digits) for i in clashing})
    for i in _clashing(shown):
        shown[i] = _one_line(i)
    for number, i in enumerate(_clashing(shown), 1):  # ids that differ only in what one line escapes
        shown[i] = f"{shown[i]} #{number}"
    return shown


def _clashing(shown: dict[str, str]) -> list[str]:
    seen: dict[str, int] = {}
    for short in shown.values():
        seen[short] = seen.get(short, 0) + 1
    return [i for i, short in shown.items() if seen[short] > 1]


def _shortened(instance_id: str, digits: int) -> str:
    match = _TASK_ID.fullmatch(instance_id)
    if match and match["repo"]:
        version = "" if digits < 40 else match["version"] or ""
        return _one_line(f"{match['repo']}@{match['commit'][:digits]}{version}")
    name = _one_line(instance_id.removeprefix("instance_") or instance_id)  # an id that is only the prefix stays
    if len(name) <= _LONGEST or digits >= 40:
        return name
    return name[: _LONGEST - 12] + "…" + name[-11:]


def _one_line(text: str) -> str:
    return clean(text).translate(_ON_ONE_LINE)


def whole_paragraphs(message: str, lines: int = 8) -> tuple[str, int]:
    """The first paragraphs of ``message`` (blank-line separated) that fit in ``lines`` lines, each whole and at
    least one, a paragraph that ends in ":" always with the one it introduces; and how many paragraphs are left."""
    paragraphs = [p.strip("\n") for p in message.strip().split("\n\n") if p.strip()]
    kept: list[str] = []
    used = 0
    for paragraph in paragraphs:
        height = paragraph.count("\n") + 1
        follows_colon = len(kept) == 1 and kept[0].rstrip().endswith(":")
        if kept and not follows_colon and used + height > lines:
            break
        kept.append(paragraph)
        used += height
    return "\n\n".join(kept), len(paragraphs) - len(kept)
