"""Spending limits per rollout, per task and per run, checked before every call."""

from __future__ import annotations

import threading


class CostLimitExceeded(Exception):
    def __init__(self, scope: str, limit: float, spent: float):
        super().__init__(f"{scope} budget of ${limit:.4f} reached (spent ${spent:.4f})")
        self.scope, self.limit, self.spent = scope, limit, spent


class Budget:
    """A limit (None: unlimited) whose spending also counts against its parent's."""

    _lock = threading.Lock()  # one lock for the whole tree keeps charges and checks consistent

    def __init__(self, scope: str, limit: float | None = None, parent: Budget | None = None):
        self.scope, self.limit, self.parent, self.spent = scope, limit, parent, 0.0

    def child(self, scope: str, limit: float | None) -> Budget:
        return Budget(scope, limit, self)

    def check(self) -> None:
        """Raise when this budget or any above it is used up."""
        with Budget._lock:
            node = self
            while node is not None:
                if node.limit is not None and node.spent >= node.limit:
                    raise CostLimitExceeded(node.scope, node.limit, node.spent)
                node = node.parent

    def charge(self, cost: float) -> None:
        with Budget._lock:
            node = self
            while node is not None:
                node.spent += cost
                node = node.parent
