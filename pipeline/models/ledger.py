"""The cost ledger: one JSON line per model call (``pipeline.records.ledger.LedgerRow``), appended as it happens."""

from __future__ import annotations

import threading
from dataclasses import asdict
from pathlib import Path

from pipeline.records.ledger import LedgerRow as LedgerRow  # re-exported: the client and the run import it from here
from pipeline.records.ledger import read_ledger
from pipeline.rundir.storage import append_jsonl


class Ledger:
    """Thread-safe, append-only; rows also kept in memory for totals."""

    def __init__(self, path: Path | None = None):
        self.path = path
        self.rows: list[LedgerRow] = []
        self._lock = threading.Lock()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, row: LedgerRow) -> None:
        with self._lock:
            self.rows.append(row)
            if self.path is not None:
                append_jsonl(self.path, asdict(row))

    def total_cost(self, **match: str) -> float:
        with self._lock:
            return sum(r.cost for r in self.rows if all(getattr(r, k) == v for k, v in match.items()))

    def has_call(self, call: str) -> bool:
        """Whether a row of the call ``call`` is in this ledger (its file, when it has one)."""
        rows = Ledger.read(self.path) if self.path is not None else list(self.rows)
        return any(row.call == call for row in rows)

    def spent(self, stage: str, agent: str) -> float:
        """What ``agent`` of ``stage`` spent in this ledger's file (earlier sessions of its task)."""
        rows = Ledger.read(self.path) if self.path is not None else []
        return sum(row.cost for row in rows if row.stage == stage and row.agent == agent)

    @staticmethod
    def read(path: Path) -> list[LedgerRow]:
        return read_ledger(path)
