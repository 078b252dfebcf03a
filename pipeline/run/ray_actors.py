"""The actors a run keeps on the head node: its budget for every node, and its stop flag."""

from __future__ import annotations


from pipeline.models.budget import Budget, CostLimitExceeded
from pipeline.run.ray_connect import CALL_TIMEOUT





class RunBudgetKeeper:
    """The run's budget for every node (a Ray actor): reservations by owner (a task's attempt)."""

    def __init__(self, limit: float | None, spent: float):
        self.budget = Budget("run", limit)
        self.budget.seed(spent)
        self.holds: dict[int, tuple[str, object]] = {}
        self.count = 0

    def reserve(self, amount: float, owner: str):
        try:
            held = self.budget.reserve(amount)
        except CostLimitExceeded as refused:
            return None, [refused.scope, refused.limit, refused.spent, refused.needed, refused.reserved]
        self.count += 1
        self.holds[self.count] = (owner, held)
        return self.count, None

    def settle(self, token: int | None, cost: float) -> None:
        hold = self.holds.pop(token, None) if token is not None else None
        if hold is not None:
            hold[1].settle(cost)
        elif cost > 0:
            self.budget.seed(cost)  # spent with nothing held (a call reserved at 0)

    def abandon(self, owner: str) -> float:
        """A task's attempt died with calls in flight: they may have been paid, so each counts at its worst
        case. Returns the dollars so counted."""
        counted = 0.0
        for token, (who, held) in list(self.holds.items()):
            if who == owner:
                del self.holds[token]
                held.settle(held.amount)
                counted += held.amount
        return counted

    def left(self) -> float | None:
        return self.budget.left

    def spent(self) -> float:
        return self.budget.spent


class StopFlag:
    """Set when the driver stops the run (a Ray actor every worker polls)."""

    def __init__(self):
        self.stopped = False

    def set(self) -> None:
        self.stopped = True

    def is_set(self) -> bool:
        return self.stopped


class RemoteRunBudget:
    """The worker's side of RunBudgetKeeper: what its task budget's root forwards to (pipeline.models.budget)."""

    def __init__(self, keeper, owner: str):
        self.keeper, self.owner = keeper, owner

    def reserve(self, amount: float) -> object:
        import ray

        token, refused = ray.get(self.keeper.reserve.remote(amount, self.owner), timeout=CALL_TIMEOUT)
        if refused:
            raise CostLimitExceeded(*refused)
        return token

    def settle(self, token: object, amount: float, cost: float) -> None:
        import ray

        ray.get(self.keeper.settle.remote(token, cost), timeout=CALL_TIMEOUT)

    def left(self) -> float | None:
        import ray

        return ray.get(self.keeper.left.remote(), timeout=CALL_TIMEOUT)
