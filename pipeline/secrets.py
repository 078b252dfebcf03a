"""Keeping API keys out of everything swepipe writes.

Keys live only in the environment. Provider error messages sometimes quote them, so every JSON file
and ledger row passes through ``redact`` on its way to disk.
"""

from __future__ import annotations

import os
import re

_SECRET_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|CREDENTIALS?)$", re.IGNORECASE)
_KEY_SHAPES = re.compile(r"\b(sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}|AIza[0-9A-Za-z_\-]{30,}|hf_[A-Za-z0-9]{30,})\b")
REDACTED = "[redacted]"


def secret_values() -> list[str]:
    """Values of environment variables named like secrets, longest first."""
    values = {v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= 8}
    return sorted(values, key=len, reverse=True)


def redact(text: str) -> str:
    for value in secret_values():
        if value in text:
            text = text.replace(value, REDACTED)
    return _KEY_SHAPES.sub(REDACTED, text)


def redact_data(data):
    """``redact`` applied to every string inside nested dicts and lists."""
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, dict):
        return {key: redact_data(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact_data(value) for value in data]
    return data
