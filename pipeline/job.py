"""One task's share of a run: its config, records on disk, ledger, budget, model clients and runtimes.

Strategies and stages receive this; it holds no state shared with other tasks except the run's
budget, so a task can run on any thread or machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pipeline.errors import InfrastructureFault
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.models.ledger import Ledger
from pipeline.records import Record
from pipeline.records.base import expect_record
from pipeline.records.sealing import ContainerSeal
from pipeline.rundir.layout import TaskPaths
from pipeline.settings.config import RunConfig
from pipeline.settings.model_spec import ModelSpec, Role
from pipeline.tasks import Task
from pipeline.text.printable import short_id

if TYPE_CHECKING:
    from pipeline.runtime.base import OpenedRuntime
    from pipeline.runtime.seal import SealFields

R = TypeVar("R", bound=Record)


@dataclass
class TaskJob:
    task: Task
    config: RunConfig
    paths: TaskPaths
    run_id: str
    image_template: str
    budget: Budget  # the task's, under the run's; the principal draws from it
    reuse_juniors_from: TaskPaths | None = None  # another run's records of this task
    # What juniors and the senior draw from when part of the task's budget is held back for the principal
    # (budgets.principal_reserve): a child of ``budget`` with the reserve taken off its limit. None: ``budget``.
    stage_budget: Budget | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # wall time by stage
    stage: str = ""  # the stage under way, named when the task fails
    log: Callable[[str], None] | None = None  # one plain line per finished stage, for logs (no progress bar)
    # every workspace open_runtime gave this session: (role, read only, the runtime), for how each was sealed
    opened: list[tuple[str, bool, Any]] = field(default_factory=list)

    def finished_stage(self, stage: str, summary: str) -> None:
        if self.log is not None:
            self.log(f"task {short_id(self.task.instance_id)}: {stage} done: {summary}")

    def __post_init__(self) -> None:
        self.ledger = Ledger(self.paths.ledger)

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """``stage``'s wall time into ``seconds`` when the block ends (one that raises records none)."""
        started = time.monotonic()
        yield
        self.seconds[stage] = round(time.monotonic() - started, 2)

    def budget_for(self, role: str) -> Budget:
        """The budget ``role``'s calls draw from: juniors and the senior leave the principal's reserve alone."""
        if role in ("junior", "senior") and self.stage_budget is not None:
            return self.stage_budget
        return self.budget

    def client(self, role: str, stage: str | None = None, spec: ModelSpec | None = None) -> ModelClient:
        """The model client of ``role`` (its model from the config, or ``spec``), writing to this task's ledger."""
        return ModelClient(spec or self.config.model_for(role), role, self.ledger, stage=stage,
                           task=self.task.instance_id, scope=f"{self.run_id}/{self.task.instance_id}")

    def open_runtime(self, role: str, *, read_only: bool = False, background: bool = False) -> OpenedRuntime:
        """A started workspace of this task for the agent ``role`` (a Docker container unless the config names
        another runtime opener)."""
        from pipeline.runtime.factory import open_runtime
        from pipeline.settings.plugins import load_object

        opener = load_object(self.config.containers.impl, "containers.impl") if self.config.containers.impl \
            else open_runtime
        opened: OpenedRuntime = opener(self.task, role, self.config.containers, run_id=self.run_id,
                                       image_template=self.image_template, read_only=read_only, background=background)
        self.opened.append((role, read_only, opened))
        return opened

    def containers_sealed(self) -> list[ContainerSeal]:
        """How each workspace this session opened was sealed (pipeline.runtime.seal), by role (the last of a role
        opened again after an infrastructure fault); one whose start failed ran nothing and is left out, one whose
        opener reports no seal says so."""
        found: dict[str, ContainerSeal] = {}
        for role, read_only, runtime in self.opened:
            if getattr(runtime, "started", True) is False:
                continue
            seal = getattr(runtime, "seal", None)
            facts: SealFields = seal.record_fields() if seal is not None else {
                "runtime": "unknown", "sanitised": False, "sealed": False, "network": None,
                "missing": "its runtime opener reports no seal"}
            found[role] = ContainerSeal.model_validate({"role": role, "read_only": read_only, **facts})
        return list(found.values())

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` for the principal's model where litellm knows its tokenizer, else ~4 characters each."""
        from pipeline.models.litellm_setup import litellm

        model = self.config.models[Role.PRINCIPAL].model if Role.PRINCIPAL in self.config.models else ""
        try:
            return int(litellm.token_counter(model=model, text=text))
        except InfrastructureFault:
            raise
        except Exception:  # noqa: BLE001 - unknown model or tokenizer: estimate
            return max(1, len(text) // 4)


def once(path: Path, make: Callable[[], R], record: type[R]) -> R:
    """The resume cache of a stage's record: the one at ``path`` if an earlier session of the run finished it (its
    spend is not paid again), else ``make()``'s, saved there. ``record``: its
    type (pipeline.records), which reads an earlier one (an older format upgraded) and writes the new one."""
    if path.exists():
        return record.load(path)
    made = expect_record(make(), record)
    made.write(path)
    return made
