"""A row of a ledger (``ledger.jsonl``, the run's and each task's): one model call and what it cost, appended as it
happens by pipeline.models.ledger.Ledger. Not a versioned record: every reader (the stages' budgets, the report,
the what-if replay) reads the rows with ``read_ledger``."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class LedgerRow:
    stage: str  # junior, senior, principal, solo, team
    role: str
    model: str
    input_tokens: int = 0
    cached_tokens: int = 0  # of input_tokens: read from the provider's prompt cache
    cache_write_tokens: int = 0  # of input_tokens: written to it (priced apart where the provider does)
    output_tokens: int = 0
    cost: float = 0.0
    latency: float = 0.0
    retries: int = 0
    error: str | None = None
    task: str = ""
    agent: str = ""  # e.g. rollout-03
    time: float = field(default_factory=time.time)
    call: str = ""  # the call's id, which its reply journal names too (models.client)


def read_ledger(path: Path) -> list[LedgerRow]:
    """The rows of the ledger at ``path`` (none when there is no file), skipping a line a crash cut short."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                rows.append(LedgerRow(**json.loads(line)))
            except (ValueError, TypeError):
                continue  # a line cut short by a crash
    return rows
