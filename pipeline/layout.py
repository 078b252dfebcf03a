"""Where everything of a run lives on disk (the README's "A run on disk")."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TaskPaths:
    root: Path

    @property
    def junior(self) -> Path:
        return self.root / "junior"

    @property
    def senior(self) -> Path:
        return self.root / "senior"

    @property
    def principal(self) -> Path:
        return self.root / "principal"

    @property
    def ledger(self) -> Path:
        return self.root / "ledger.jsonl"

    @property
    def eval(self) -> Path:
        return self.root / "eval"


@dataclass(frozen=True)
class RunLayout:
    root: Path

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def predictions(self) -> Path:
        return self.root / "predictions.jsonl"

    def task(self, instance_id: str) -> TaskPaths:
        return TaskPaths(self.root / "tasks" / instance_id)

    def finished(self) -> dict[str, dict]:
        """Predictions already written, by instance id (a line cut short by a crash is ignored)."""
        done = {}
        if self.predictions.exists():
            for line in self.predictions.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                    done[record["instance_id"]] = record
                except (ValueError, KeyError, TypeError):
                    continue
        return done
