"""Spending limits per agent, per task and per run that hold, also with many calls in flight at once.

Before a call, its worst-case cost is reserved against its budget and every budget above it, under
one lock for the whole tree: a call whose reservation does not fit is not made. After the call, the
reservation is settled: released, and the real cost charged. So ``spent + reserved`` never passes a
limit, however many rollouts and tasks call at the same time (as long as a call never costs more than
its worst case, which the client bounds by sending ``max_tokens``).

A budget held in another process (the run's, on a cluster: pipeline.run.ray.actors) is a ``Budget`` whose
``remote`` stands for it: its limit is checked and charged there, after the local budgets below it hold.
"""

from __future__ import annotations

import threading
from typing import Protocol

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
        self.billed: object = None  # the client's Usage of the failed tries before it, when a retry was refused


class RemoteBudget(Protocol):
    """A budget kept elsewhere (one for many processes): what a ``Budget`` with ``remote`` forwards to."""

    def reserve(self, amount: float) -> object:
        """Hold ``amount``; a token for ``settle``. Raises CostLimitExceeded (nothing held) when it cannot fit."""

    def settle(self, token: object, amount: float, cost: float) -> None:
        """Release the hold ``token`` (None: nothing was held) and charge ``cost``."""

    def left(self) -> float | None: ...


class Budget:
    """A limit (None: unlimited) whose spending also counts against its parent's.

    With ``remote``, the limit is held elsewhere (see ``RemoteBudget``): this budget is the root of the local tree,
    and reservations and charges that reach it are forwarded there. It keeps no count of its own."""

    _lock = threading.Lock()  # one lock for the whole tree keeps reservations, charges and checks consistent

    def __init__(self, scope: str, limit: float | None = None, parent: Budget | None = None,
                 remote: RemoteBudget | None = None):
        if remote is not None and parent is not None:
            raise ValueError("a budget held remotely is the root of its tree")
        self.scope, self.limit, self.parent, self.remote = scope, limit, parent, remote
        self.spent = 0.0
        self.reserved = 0.0  # worst cases of the calls in flight under this budget
        self._open = 0  # how many reservations are in flight (at 0, ``reserved`` is reset to exactly 0)

    def child(self, scope: str, limit: float | None) -> Budget:
        return Budget(scope, limit, self)

    def _chain(self) -> list[Budget]:
        node: Budget | None = self
        chain: list[Budget] = []
        while node is not None:
            chain.append(node)
            node = node.parent
        return chain

    def _root_remote(self) -> RemoteBudget | None:
        node = self
        while node.parent is not None:
            node = node.parent
        return node.remote

    @property
    def left(self) -> float | None:
        """Dollars that can still be reserved under this budget and every one above it (None: no limit)."""
        with Budget._lock:
            room = [n.limit - n.spent - n.reserved for n in self._chain() if n.limit is not None and n.remote is None]
        remote = self._root_remote()
        if remote is not None and (far := remote.left()) is not None:
            room.append(far)
        return max(0.0, min(room)) if room else None

    def reserve(self, amount: float) -> Reservation:
        """Hold ``amount`` against this budget and every one above it; CostLimitExceeded (nothing held) when
        one of them cannot fit it. A reservation of 0 (a free model) always fits."""
        amount = max(0.0, float(amount))
        with Budget._lock:
            chain = [node for node in self._chain() if node.remote is None]
            if amount > 0:
                for node in chain:
                    if node.limit is not None and node.spent + node.reserved + amount > node.limit + EPSILON:
                        raise CostLimitExceeded(node.scope, node.limit, node.spent, amount, node.reserved)
            for node in chain:
                node.reserved += amount
                node._open += 1
        remote, token = self._root_remote(), None
        if remote is not None and amount > 0:  # the local budgets hold it: now the one kept elsewhere
            try:
                token = remote.reserve(amount)
            except BaseException:
                self._settle_local(amount, 0.0)
                raise
        return Reservation(self, amount, token)

    def _settle(self, amount: float, cost: float, token: object = None) -> None:
        self._settle_local(amount, cost)
        remote = self._root_remote()
        if remote is not None and (token is not None or cost > 0):
            remote.settle(token, amount, cost)

    def _settle_local(self, amount: float, cost: float) -> None:
        with Budget._lock:
            for node in self._chain():
                if node.remote is not None:
                    continue
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

    def __init__(self, budget: Budget, amount: float, token: object = None):
        self.budget, self.amount, self.token = budget, amount, token  # token: the remote budget's hold
        self.settled = False
        self._lock = threading.Lock()

    def settle(self, cost: float) -> None:
        """Release the reservation and charge the real ``cost`` in one step; later calls do nothing."""
        with self._lock:
            if self.settled:
                return
            self.settled = True
        self.budget._settle(self.amount, max(0.0, float(cost)), self.token)

    def release(self) -> None:
        """Nothing was spent: give the reservation back."""
        self.settle(0.0)
