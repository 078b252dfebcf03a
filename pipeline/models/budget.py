"""Spending limits per agent, per task and per run that hold, also with many calls in flight at once.

Before a call, its worst-case cost is reserved against its budget and every budget above it, under
one lock for the whole tree: a call whose reservation does not fit is not made. After the call, the
reservation is settled: released, and the real cost charged. So ``spent + reserved`` never passes a
limit, however many rollouts and tasks call at the same time (as long as a call never costs more than
its worst case, which the client bounds by sending ``max_tokens``).
"""

from __future__ import annotations

import threading

EPSILON = 1e-9  # dollars: float noise, never a real overspend


class CostLimitExceeded(Exception):
    def __init__(self, scope: str, limit: float, spent: float, needed: float = 0.0, reserved: float = 0.0):
        if needed:
            text = (f"{scope} budget of ${limit:.4f} cannot cover the next call (up to ${needed:.4f}; "
                    f"${spent:.4f} spent, ${reserved:.4f} reserved by calls in flight)")
        else:
            text = f"{scope} budget of ${limit:.4f} reached (spent ${spent:.4f})"
        super().__init__(text)
        self.scope, self.limit, self.spent, self.needed, self.reserved = scope, limit, spent, needed, reserved


class Budget:
    """A limit (None: unlimited) whose spending also counts against its parent's."""

    _lock = threading.Lock()  # one lock for the whole tree keeps reservations, charges and checks consistent

    def __init__(self, scope: str, limit: float | None = None, parent: Budget | None = None):
        self.scope, self.limit, self.parent = scope, limit, parent
        self.spent = 0.0
        self.reserved = 0.0  # worst cases of the calls in flight under this budget
        self._open = 0  # how many reservations are in flight (at 0, ``reserved`` is reset to exactly 0)

    def child(self, scope: str, limit: float | None) -> Budget:
        return Budget(scope, limit, self)

    def _chain(self) -> list[Budget]:
        node, chain = self, []
        while node is not None:
            chain.append(node)
            node = node.parent
        return chain

    @property
    def left(self) -> float | None:
        """Dollars that can still be reserved under this budget and every one above it (None: no limit)."""
        with Budget._lock:
            room = [n.limit - n.spent - n.reserved for n in self._chain() if n.limit is not None]
        return max(0.0, min(room)) if room else None

    def reserve(self, amount: float) -> Reservation:
        """Hold ``amount`` against this budget and every one above it; CostLimitExceeded (nothing held) when
        one of them cannot fit it. A reservation of 0 (a free model) always fits."""
        amount = max(0.0, float(amount))
        with Budget._lock:
            chain = self._chain()
            if amount > 0:
                for node in chain:
                    if node.limit is not None and node.spent + node.reserved + amount > node.limit + EPSILON:
                        raise CostLimitExceeded(node.scope, node.limit, node.spent, amount, node.reserved)
            for node in chain:
                node.reserved += amount
                node._open += 1
        return Reservation(self, amount)

    def _settle(self, amount: float, cost: float) -> None:
        with Budget._lock:
            for node in self._chain():
                node._open -= 1
                node.reserved = max(0.0, node.reserved - amount) if node._open else 0.0
                node.spent += cost

    def seed(self, spent: float) -> None:
        """Count money an earlier session spent against this budget only, not the ones above it: each level
        is seeded from its own records (the run's and the task's from the ledgers, an agent's from its
        trajectory), so going up the tree would count it twice."""
        with Budget._lock:
            self.spent += max(0.0, float(spent))


class Reservation:
    """The worst case of one call, held until ``settle`` (or ``release``) is called; once only."""

    def __init__(self, budget: Budget, amount: float):
        self.budget, self.amount = budget, amount
        self.settled = False
        self._lock = threading.Lock()

    def settle(self, cost: float) -> None:
        """Release the reservation and charge the real ``cost`` in one step; later calls do nothing."""
        with self._lock:
            if self.settled:
                return
            self.settled = True
        self.budget._settle(self.amount, max(0.0, float(cost)))

    def release(self) -> None:
        """Nothing was spent: give the reservation back."""
        self.settle(0.0)
