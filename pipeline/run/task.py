"""One task, start to finish: its strategy, its spend from the ledger, its score. No state shared with other
tasks but the run's budget, so an executor (a thread pool, a cluster) can run it anywhere."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.control import stopping
from pipeline.control.outages import BREAKERS
from pipeline.errors import InfrastructureFault
from pipeline.evaluation.runner import EvalSettings
from pipeline.evaluation.task_scoring import score_prediction, scoring_error
from pipeline.job import TaskJob
from pipeline.models.budget import Budget
from pipeline.models.ledger import Ledger, LedgerRow
from pipeline.records import Prediction, RecordError, TaskContainers, Unreadable
from pipeline.records.base import expect_record
from pipeline.records.prediction import Calls, Tokens
from pipeline.records.sealing import ContainerSeal
from pipeline.records.sources import PatchSource
from pipeline.rundir.layout import RunLayout
from pipeline.rundir.storage import write_text_atomic
from pipeline.settings.config import RunConfig
from pipeline.settings.model_spec import Role
from pipeline.strategies.answer import Spend, TaskAnswer
from pipeline.strategies.base import Strategy, strategy_class
from pipeline.tasks import Task

INFRA_ATTEMPTS = 3  # tries of a task's stages when infrastructure fails under them
INFRA_BACKOFF = 2.0  # seconds before the second try; doubled for each one after


@dataclass(frozen=True)
class RunSettings:
    """A resolved run: everything a task needs, checked before any money is spent; plain values only."""

    config: RunConfig
    layout: RunLayout
    image_template: str
    evaluation: EvalSettings | None = None
    reuse_juniors_from: RunLayout | None = None

    @property
    def roles(self) -> tuple[str, ...]:
        return strategy_class(self.config.strategy).roles

    @property
    def models(self) -> dict[str, str]:
        return {role: self.config.models[role].model for role in self.roles if role in self.config.models}


def run_one_task(task: Task, run: RunSettings, run_budget: Budget,
                 log: Callable[[str], None] | None = None) -> Prediction:
    """The prediction record of ``task``; a failing stage ends the task with its reason recorded.

    ``infra_error`` is set when Docker or an image failed: that is no answer, so the caller leaves the
    task unfinished for a rerun.
    """
    strategy = strategy_class(run.config.strategy)(run.config)
    job = task_job(task, run, run_budget)
    job.log = log
    paths, job.stage = job.paths, strategy.roles[0]
    started = time.monotonic()
    BREAKERS.configure(run.config.faults.breaker_settings())
    answer: TaskAnswer | None = None
    failure: Failure | None = None
    retries: list[str] = []
    containers: list[ContainerSeal] | None = None
    try:
        answer = _with_infra_retries(strategy, job, retries)
    except InfrastructureFault as error:  # no answer: the task stays unfinished, and a rerun resumes it
        failure = Failure(f"{job.stage} stage: {type(error).__name__}: {error}", infra=True)
        write_text_atomic(paths.error, traceback.format_exc())
    except Exception as error:  # noqa: BLE001 - one task's failure is recorded; the run goes on
        failure = Failure(f"{job.stage} stage: {type(error).__name__}: {error}", infra=False)
        write_text_atomic(paths.error, traceback.format_exc())
    finally:  # a stop too: the next session's prediction still names the containers this one ran
        containers = record_containers(job)
    rows = Ledger.read(paths.ledger)
    spend = roll_up(rows, strategy.roles, strategy.spend_by, answer.carried_spend if answer is not None else {})
    prediction = _prediction(Identity(task.instance_id, strategy.name, run.models), answer, failure, Bookkeeping(
        retries=retries, containers=containers, spend=spend,
        calls=Calls(made=len(rows), failed=sum(1 for row in rows if row.error)),
        seconds=job.seconds or {strategy.name: round(time.monotonic() - started, 2)}), job.stage)
    if run.evaluation is not None and not prediction.infra_error:
        # A plug-in's untyped answer may hold no patch (None): scored as the empty patch it stands for.
        prediction.resolved = score_prediction(task, prediction.model_patch or "", paths, run.evaluation)
        if prediction.resolved is None:  # scoring could not run: no verdict, so the task stays unfinished
            prediction.infra_error = True
            prediction.error = prediction.error or "scoring: " + scoring_error(paths)
    return prediction


@dataclass(frozen=True)
class Identity:
    """Whose prediction it is: the task, the strategy and the models of its roles."""

    instance_id: str
    strategy: str
    models: dict[str, str]


@dataclass(frozen=True)
class Failure:
    """What ended a task without an answer (``infra``: an infrastructure fault, so a rerun runs it again)."""

    error: str
    infra: bool


@dataclass(frozen=True)
class Bookkeeping:
    """What the run keeps of a task whatever its answer: the retries, containers, spend, calls and time."""

    retries: list[str]
    containers: list[ContainerSeal] | None
    spend: StageSpend
    calls: Calls
    seconds: dict[str, float]


def _prediction(who: Identity, answer: TaskAnswer | None, failure: Failure | None, kept: Bookkeeping,
                stage: str) -> Prediction:
    """The task's prediction record, built once: who it is, the strategy's answer (a plug-in's own keys too) or
    the failure, and the bookkeeping. When the answer does not fit the record (a plug-in's key of the wrong type),
    the task's failure, saying what is wrong, its spend kept."""
    base = Prediction(instance_id=who.instance_id, model_patch="", strategy=who.strategy, source=PatchSource.NONE,
                      models=who.models, error=None)
    given = answer.model_dump(exclude_unset=True, exclude={"carried_spend"}, warnings=False) if answer else {}
    ending = {"error": failure.error, "infra_error": failure.infra} if failure is not None else {}
    retries = {"infra_retries": kept.retries} if kept.retries else {}
    sealed = {"containers": kept.containers} if kept.containers is not None else {}
    book = {"cost": kept.spend.cost, "tokens": kept.spend.tokens, "calls": kept.calls, "seconds": kept.seconds}
    try:
        return Prediction.of({**base.to_dict(), **given, **ending, **retries, **sealed, **book})
    except RecordError as error:
        return Prediction.of({**base.to_dict(), **sealed, **book, "error": f"{stage} stage: {error}",
                              "infra_error": False})


def record_containers(job: TaskJob) -> list[ContainerSeal] | None:
    """How every container of the task was sealed, by role: those earlier sessions recorded
    (tasks/<id>/containers.json), with this session's (a role opened again replaces its earlier entry), written back
    for the next session; None
    when that cannot be said (the record cannot be written: the prediction then says nothing of them)."""
    earlier = TaskContainers.read(job.paths.containers)
    kept = {} if isinstance(earlier, Unreadable) else {
        str(entry.role): entry for entry in earlier.containers or [] if isinstance(entry, ContainerSeal)}
    try:
        kept.update((str(entry.role), entry) for entry in job.containers_sealed())
        containers = [kept[role] for role in sorted(kept)]  # by role: not in the order rollouts started
        if job.opened:
            TaskContainers.of({"containers": [seal.to_dict() for seal in containers]}).write(job.paths.containers)
    except InfrastructureFault:
        raise
    except Exception:  # noqa: BLE001 - bookkeeping: the task's answer must not be lost to it
        return None
    return containers


def _with_infra_retries(strategy: Strategy, job: TaskJob, retries: list[str]) -> TaskAnswer:
    """The strategy's answer; an infrastructure fault (Docker, a model call that failed past its retries, the
    cluster) is retried with backoff (everything done so far is reused, so nothing is paid twice), and raised
    when it persists."""
    for attempt in range(1, INFRA_ATTEMPTS + 1):
        try:
            _require_image(job)
            return expect_record(strategy.run_task(job), TaskAnswer)
        except InfrastructureFault as error:
            if attempt == INFRA_ATTEMPTS:
                raise
            retries.append(f"{job.stage} stage: {error}"[:500])
            stopping.STOP.wait(INFRA_BACKOFF * 2 ** (attempt - 1))
            stopping.check()
    raise AssertionError("unreachable")


def task_job(task: Task, run: RunSettings, run_budget: Budget) -> TaskJob:
    """The task's share of the run: its folder (created), its budget under the run's, its ledger.

    The task's budget starts with what earlier sessions of this run spent on it (its ledger), so a rerun
    goes on with what is left; the run's budget was seeded with every task's ledger (``seeded_run_budget``),
    so this is not passed up to it. Rollouts reused from another run were paid there: not in this ledger.
    """
    paths = run.layout.task(task.instance_id)
    paths.root.mkdir(parents=True, exist_ok=True)
    reuse = run.reuse_juniors_from.task(task.instance_id) if run.reuse_juniors_from else None
    budgets, rows = run.config.budgets, Ledger.read(paths.ledger)
    budget = run_budget.child(f"task {task.instance_id}", budgets.per_task)
    budget.seed(sum(row.cost for row in rows))
    stage_budget = None
    if (budgets.principal_reserve and budgets.per_task is not None and Role.PRINCIPAL in run.roles
            and run.config.plays(Role.PRINCIPAL)):  # no reserve for a principal switched off
        stage_budget = budget.child(f"task {task.instance_id} (juniors and senior; ${budgets.principal_reserve:g} "
                                    "held back for the principal)", budgets.per_task - budgets.principal_reserve)
        stage_budget.seed(sum(row.cost for row in rows if row.role in ("junior", "senior")))
    return TaskJob(task=task, config=run.config, paths=paths, run_id=run.layout.run_id,
                   image_template=run.image_template, reuse_juniors_from=reuse, budget=budget,
                   stage_budget=stage_budget)


def seeded_run_budget(run: RunSettings) -> Budget:
    """The run's budget, with what every task of this run spent in earlier sessions (their ledgers: calls
    that failed or whose task never finished included) already counted."""
    budget = Budget("run", run.config.budgets.per_run)
    budget.seed(spent_in_run(run.layout))
    return budget


def spent_in_run(layout: RunLayout) -> float:
    """Every dollar the run's ledgers hold: calls that failed or whose task never finished included."""
    return sum(row.cost for ledger in layout.ledgers() for row in Ledger.read(ledger))


def _require_image(job: TaskJob) -> None:
    """An image that cannot be had or prepared (pulled, sanitised) fails the task before any model is paid."""
    if job.config.containers.impl:
        return  # another runtime: its opener knows what it needs
    from pipeline.runtime.factory import prepare_task_image

    prepare_task_image(job.task, job.config.containers, job.image_template)


@dataclass(frozen=True)
class StageSpend:
    """Dollars (and their total) and tokens per stage, or per role (``roll_up``)."""

    cost: dict[str, float]
    tokens: dict[str, Tokens]


def roll_up(rows: list[LedgerRow], keys: tuple[str, ...], by: str = "stage",
            carried: dict[str, Spend] | None = None) -> StageSpend:
    """Dollars and tokens per stage (or role) from a task's ledger, plus spend ``carried`` in from elsewhere
    (rollouts another run paid for)."""
    cost = {key: 0.0 for key in keys}
    tokens = {key: {"input": 0, "cached": 0, "output": 0} for key in keys}
    for row in rows:
        key = getattr(row, by)
        if key in cost:
            cost[key] += row.cost
            tokens[key]["input"] += row.input_tokens
            tokens[key]["cached"] += row.cached_tokens
            tokens[key]["output"] += row.output_tokens
    for key, spent in (carried or {}).items():
        cost[key] = cost.get(key, 0.0) + spent.cost
        used = tokens.setdefault(key, {"input": 0, "cached": 0, "output": 0})
        used["input"] += spent.input
        used["cached"] += spent.cached
        used["output"] += spent.output
    cost = {key: round(value, 8) for key, value in cost.items()}
    return StageSpend({**cost, "total": round(sum(cost.values()), 8)},
                      {key: Tokens(**counts) for key, counts in tokens.items()})
