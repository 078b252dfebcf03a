"""The actors a run keeps on the head node: its write queue, its budget for every node, and its stop flag; and how
a worker calls them (``ask``): an actor that does not answer in time, or died, is a ``ClusterFault``, never a
stage's result."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from pipeline.errors import ClusterFault, ignoring_errors
from pipeline.models.budget import Budget, CostLimitExceeded, Reservation
from pipeline.run.ray.connect import CALL_TIMEOUT, ActorOptions


def ask(method: Any, *args: object, what: str, timeout: float = CALL_TIMEOUT) -> Any:
    """``method(*args)`` of a run's actor, its answer; ClusterFault when the actor (or the head it lives on) does
    not answer within ``timeout`` seconds or is gone. ``what``: the actor, for the message."""
    import ray

    try:
        return ray.get(method.remote(*args), timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise ClusterFault(f"{what} did not answer within {timeout:g} s (the Ray head is overloaded or "
                           "unreachable)") from None
    except ray.exceptions.RayTaskError:
        raise  # the actor's own code failed: a bug, not the cluster
    except ray.exceptions.RayError as error:  # the actor died, or cannot be reached
        raise ClusterFault(f"{what} is gone ({ray_reason(error)})") from None


def ray_reason(error: BaseException) -> str:
    """A Ray error on one line, its name and the start of its text: Ray says why a worker died (an OOM kill, a
    lost connection, the memory monitor) several lines down, after the actor's ids."""
    return f"{type(error).__name__}: {' '.join(str(error).split())[:600]}"


class WriteQueueActor:
    """The run's writes in the order the nodes sent them (an async Ray actor on the head): each node puts one write
    at a time and waits until it is held; the driver takes them in batches (``take``), one call for many writes,
    so the queue keeps up with many nodes' small writes (scripts/bench_driver.py).

    Held is not applied: the queue lives in memory and goes with the driver. A node that wants to know its writes
    are on the driver's disk puts an ``ack`` after them and waits (``applied``) until the driver, having applied
    everything before it, says so (``acknowledge``); until then it keeps its own copy (pipeline.run.ray.node)."""

    def __init__(self) -> None:
        self.items: asyncio.Queue[Any] = asyncio.Queue()
        self.acks: dict[str, asyncio.Event] = {}

    async def put(self, item: Any) -> None:
        self.items.put_nowait(item)

    def _ack(self, token: str) -> asyncio.Event:
        return self.acks.setdefault(token, asyncio.Event())

    async def acknowledge(self, token: str) -> None:
        """The driver applied every write queued before the ack ``token``."""
        self._ack(token).set()

    async def applied(self, token: str, timeout: float) -> bool:
        """Whether the driver applied every write queued before the ack ``token`` within ``timeout`` seconds."""
        try:
            await asyncio.wait_for(self._ack(token).wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self.acks.pop(token, None)

    async def take(self, most: int, timeout: float) -> list[Any]:
        """Up to ``most`` writes, as soon as there is one; none after ``timeout`` seconds without any."""
        try:
            batch = [await asyncio.wait_for(self.items.get(), timeout)]
        except TimeoutError:
            return []
        while len(batch) < most and not self.items.empty():
            batch.append(self.items.get_nowait())
        return batch


class WriteQueue:
    """The handle to a run's ``WriteQueueActor`` that the driver keeps and ships to every node (``actor.put``)."""

    def __init__(self, ray: Any, options: ActorOptions) -> None:
        self.actor = ray.remote(WriteQueueActor).options(**options).remote()


class RunBudgetKeeper:
    """The run's budget for every node (a Ray actor): holds named by their caller, kept by owner (a task's
    attempt). A caller whose reserve timed out releases the hold by its name: a grant that comes later is
    refused, so no hold outlives the call that asked for it."""

    def __init__(self, limit: float | None, spent: float):
        self.budget = Budget("run", limit)
        self.budget.seed(spent)
        self.holds: dict[str, tuple[str, Reservation]] = {}
        self.released: set[str] = set()  # holds given up before they were granted (a reserve that timed out)

    def reserve(self, amount: float, owner: str, hold: str) -> tuple[bool, list[str | float] | None]:
        """(granted, refused): refused names the limit that cannot fit ``amount`` (nothing held)."""
        if hold in self.released:
            return False, None  # its caller gave up on it already
        try:
            held = self.budget.reserve(amount)
        except CostLimitExceeded as refused:
            return False, [refused.scope, refused.limit, refused.spent, refused.needed, refused.reserved]
        self.holds[hold] = (owner, held)
        return True, None

    def settle(self, hold: str | None, cost: float) -> None:
        entry = self.holds.pop(hold, None) if hold is not None else None
        if entry is not None:
            entry[1].settle(cost)
        elif cost > 0:
            self.budget.seed(cost)  # spent with nothing held (a call reserved at 0)

    def release(self, hold: str) -> None:
        """The caller gave up on ``hold`` (its reserve timed out, so no call was made): nothing spent, and a grant
        not made yet is refused."""
        self.released.add(hold)
        entry = self.holds.pop(hold, None)
        if entry is not None:
            entry[1].release()

    def abandon(self, owner: str) -> float:
        """A task's attempt died with calls in flight: they may have been paid, so each counts at its worst
        case. Returns the dollars so counted."""
        counted = 0.0
        for hold, (who, held) in list(self.holds.items()):
            if who == owner:
                del self.holds[hold]
                held.settle(held.amount)
                counted += held.amount
        return counted

    def left(self) -> float | None:
        return self.budget.left

    def spent(self) -> float:
        return self.budget.spent


class StopFlag:
    """Set when the driver stops the run (a Ray actor every worker polls)."""

    def __init__(self) -> None:
        self.stopped = False

    def set(self) -> None:
        self.stopped = True

    def is_set(self) -> bool:
        return self.stopped


class RemoteRunBudget:
    """The worker's side of RunBudgetKeeper: what its task budget's root forwards to (pipeline.models.budget).
    The keeper not answering is a ClusterFault: the call is not made, and the task stays unfinished."""

    what = "the run's budget (a Ray actor on the head)"

    def __init__(self, keeper: Any, owner: str, timeout: float = CALL_TIMEOUT) -> None:
        self.keeper, self.owner, self.timeout = keeper, owner, timeout

    def reserve(self, amount: float) -> object:
        hold = uuid.uuid4().hex
        try:
            granted, refused = ask(self.keeper.reserve, amount, self.owner, hold, what=self.what,
                                   timeout=self.timeout)
        except ClusterFault:
            with ignoring_errors():  # queued after the reserve: it frees a late grant, if any
                self.keeper.release.remote(hold)
            raise
        if refused:
            raise CostLimitExceeded(*refused)
        if not granted:
            raise ClusterFault(f"{self.what} refused hold {hold}, given up before")
        return hold

    def settle(self, token: object, amount: float, cost: float) -> None:
        ask(self.keeper.settle, token, cost, what=self.what, timeout=self.timeout)

    def left(self) -> float | None:
        left: float | None = ask(self.keeper.left, what=self.what, timeout=self.timeout)
        return left
