"""Decoding single cells of SWE-Bench Pro rows as they come from JSONL, JSON, CSV, parquet or the Hub.

Test-name lists are Python list literals with mixed quotes (`['a', "b[it's]"]`), so they are parsed
with `ast.literal_eval`, which only accepts literals: a cell can never run code.
"""

from __future__ import annotations

import ast
import json
import math
from typing import Any


class CellError(ValueError):
    """A cell that cannot be decoded; `column` names it, the message says why."""

    def __init__(self, column: str, reason: str) -> None:
        super().__init__(f"column '{column}': {reason}")
        self.column = column
        self.reason = reason


def is_missing(value: Any) -> bool:
    """Null cells (JSON null, parquet null, pandas NaN) count as missing."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def decode_list(value: Any) -> list[str]:
    """A list of strings from a list, a JSON array or a Python list literal; '' and '[]' are empty."""
    if isinstance(value, str):
        value = _parse_list_text(value)
    elif hasattr(value, "tolist") and not isinstance(value, (list, tuple)):
        value = value.tolist()  # numpy arrays, e.g. list columns read through pandas
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"expected a list of strings, got {type(value).__name__} {_preview(value)}")
    bad = [item for item in value if not isinstance(item, str)]
    if bad:
        raise ValueError(
            f"the list must contain only strings, but it contains {type(bad[0]).__name__} {_preview(bad[0])}"
        )
    return list(value)


def _parse_list_text(text: str) -> Any:
    stripped = text.strip()
    if not stripped:
        return []
    # JSON first: for JSON text it is exact (surrogate pairs), and for Python literal text
    # that also happens to be valid JSON it gives the same strings.
    try:
        return json.loads(stripped)
    except (ValueError, RecursionError):
        pass
    try:
        return ast.literal_eval(stripped)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ValueError(
            f"expected a JSON or Python list literal such as ['tests/a.py::test_x'], got {_preview(text)}"
        ) from None


def decode_text(value: Any) -> str:
    """A plain text cell; it must already be a string."""
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__} {_preview(value)}")
    return value


def unwrap_json_text(value: Any) -> str:
    """Text that may be JSON-encoded (a leading quote, literal \\n escapes) is decoded; other text is kept."""
    text = decode_text(value)
    unwrapped = json_encoded_string(text)
    return text if unwrapped is None else unwrapped


def json_encoded_string(text: str) -> str | None:
    """The decoded string if `text` is a JSON string literal, else None."""
    if not text.startswith('"'):
        return None
    try:
        decoded = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return decoded if isinstance(decoded, str) else None


def _preview(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
