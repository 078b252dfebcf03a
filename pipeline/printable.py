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


def short_id(instance_id: str, width: int = 34) -> str:
    """A task's id as a table shows it: without the ``instance_`` prefix, cut to ``width`` characters."""
    name = instance_id.removeprefix("instance_") or instance_id  # an id that is only the prefix stays shown
    return name if len(name) <= width else name[: width - 1] + "…"
