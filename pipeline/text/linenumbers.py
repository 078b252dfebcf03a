"""Line numbers as models write them: the one way a reply's number (JSON's, or digits in text) becomes an int.

A reply can hold 5,000 digits (past Python's limit for reading digits), ``Infinity`` or ``NaN`` (which JSON readers
take), ``1.5``, ``true`` or Arabic-Indic digits. None of them may crash whatever reads the reply."""

from __future__ import annotations

import math

# Far past any file's length; a longer number is no line number, and its digits are never converted.
MAX_LINE_NUMBER = 10**12


def line_number(value) -> int | None:
    """``value`` as a whole number within +-MAX_LINE_NUMBER: an int, an integral finite float, or digits (a sign
    allowed); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None
        value = int(value)
    elif isinstance(value, str):
        text = value.strip()
        digits = text.lstrip("+-")
        if not digits.isdigit() or len(digits) > len(str(MAX_LINE_NUMBER)) or len(text) - len(digits) > 1:
            return None
        value = int(text)
    if not isinstance(value, int) or abs(value) > MAX_LINE_NUMBER:
        return None
    return value
