"""The senior on fewer rollouts, after a run: ``swepipe coverage RUN --senior-at 1,3,5,10``.

For each finished task of the run and each k, the senior stage runs again on the pool of the task's first k
rollouts (rebuilt with ``build_pool`` from junior/rollout-00 .. k-1), exactly as the stage runs (its prompts,
limits and model from the run's config.yaml, the task's read-only workspace), into
tasks/<id>/analysis/senior-at-NN/ (brief.json, context.md, expansion*.json, trajectory.json). So coverage can
draw the senior model's own curve, not only its point at k = K.

- Paid, and recorded in the task's ledger with stage ``analysis`` (role senior), so reports keep it apart from
  what the run itself cost; every call first reserves its worst case against the run's ``per_run`` budget
  (what the run and earlier analyses spent counts) and ``per_task`` for each (task, k).
- Resumable: a (task, k) with a brief.json is done and never paid again; one cut short (Ctrl-C, SIGTERM,
  a killed process) resumes from its saved trajectory. At k = K the run's own brief (senior/brief.json) is
  used. A k above a task's K is skipped with a note.
- A senior stopped by the budget saves no brief; a rerun with more budget goes on from its saved trajectory,
  paying only for the steps it had not taken.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import records
from pipeline.control import stopping
from pipeline.errors import InfrastructureFault, SwepipeError
from pipeline.job import TaskJob, once
from pipeline.juniors.pool import build_pool
from pipeline.models.ledger import Ledger
from pipeline.records.prediction import finished_predictions
from pipeline.records.trajectory import ExitReason
from pipeline.run.lock import lock_run, repair_run
from pipeline.rundir.layout import RunLayout
from pipeline.settings.config import RunConfig, load_config
from pipeline.settings.model_spec import Role
from pipeline.tasks import Task
from pipeline.text.printable import short_id

STAGE = "analysis"  # the ledger's stage of every call made here


def parse_ks(text: str) -> list[int]:
    """'1,3,5,10' -> [1, 3, 5, 10] (sorted, each once); anything but positive whole numbers is refused."""
    ks = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or int(part) < 1:
            raise SwepipeError(f"--senior-at {text!r}: {part!r} is not a pool size (a whole number from 1)")
        ks.add(int(part))
    if not ks:
        raise SwepipeError(f"--senior-at {text!r}: name at least one pool size, e.g. 1,3,5,10")
    return sorted(ks)


@dataclass
class Item:
    task: Task
    k: int
    big_k: int


@dataclass
class SeniorAtSummary:
    ran: list[str] = field(default_factory=list)  # "<task> k=N" made in this session
    reused: int = 0  # briefs already there (an earlier session's, or the run's own at k = K)
    notes: list[str] = field(default_factory=list)  # skipped (k > K, no rollouts), failures
    failed: int = 0  # (task, k) left without a brief (a budget, Docker, an error); a rerun tries them again
    spent: float = 0.0  # dollars of this session's analysis calls
    stopped: bool = False


def run_senior_at(run_dir: Path, tasks: list[Task], ks: list[int], *, dataset: str,
                  image_template: str | None = None, workers: int = 1,
                  log: Callable[[str], None] = print) -> SeniorAtSummary:
    """Run the senior on the first k rollouts of every finished task of ``run_dir`` among ``tasks``, for each k
    in ``ks``; ``log`` gets one line per (task, k). Holds the run's lock while it works."""
    from pipeline.control.parallel import run_with_progress
    from pipeline.models.pricing import resolve_prices
    from pipeline.run.task import RunSettings, seeded_run_budget
    from pipeline.tasks.datasets import defaults_for

    layout = RunLayout(Path(run_dir))
    if not layout.config.is_file():
        raise SwepipeError(f"{run_dir}: no run directory (config.yaml is missing)")
    config = load_config(layout.config)
    if not config.plays(Role.SENIOR):
        raise SwepipeError(f"{run_dir}: the run's senior is switched off (--senior-model none); nothing to replay")
    if config.senior.impl:
        raise SwepipeError(f"{run_dir}: the run's senior is a plug-in ({config.senior.impl}); --senior-at replays "
                           "the built-in senior stage only")
    lock_run(layout)  # no `swepipe run` (or a second analysis) writes the same files meanwhile
    repair_run(layout)
    summary = SeniorAtSummary()
    items = _plan(layout, tasks, ks, summary)
    for note in summary.notes:
        log(note)
    if not items:
        return summary
    server = None
    if _needs_local_model(config):
        from pipeline.models.local_server import LocalModelServer

        server = LocalModelServer()
        log("the run's senior is the local model: starting it on a loopback port")
        server.start()
        config = config.model_copy(update={"models": {**config.models, Role.SENIOR: server.spec(Role.SENIOR, config)}})
    try:
        resolve_prices(config.model_for(Role.SENIOR), Role.SENIOR)  # an unpriced model stops before anything is spent
        template = image_template or config.containers.image_template or defaults_for(dataset).image_template
        settings = RunSettings(config=config, layout=layout, image_template=template)
        run_budget = seeded_run_budget(settings)  # the run's and earlier analyses' spend counts against per_run
        lock = threading.Lock()
        done = [0]

        def work(item: Item) -> None:
            line, spent, ok = _one(item, settings, run_budget)
            with lock:
                done[0] += 1
                summary.spent += spent
                if ok:
                    summary.ran.append(f"{item.task.instance_id} k={item.k}")
                else:
                    summary.failed += 1
                    summary.notes.append(line)
            log(f"[{done[0]}/{len(items)}] {line}")

        try:
            run_with_progress("senior-at", items, work, workers=workers, total=len(items), show=False)
        except (KeyboardInterrupt, stopping.Stopped):
            summary.stopped = True
    finally:
        if server is not None:
            server.stop()
    return summary


def _plan(layout: RunLayout, tasks: list[Task], ks: list[int], summary: SeniorAtSummary) -> list[Item]:
    """The (task, k) still to run; what is reused or skipped goes into ``summary``."""
    finished = finished_predictions(layout.predictions)
    items = []
    for task in tasks:
        if task.instance_id not in finished:
            continue
        paths = layout.task(task.instance_id)
        pool = records.Pool.read(paths.junior_files.pool)
        big_k = None if isinstance(pool, records.Unreadable) else pool.rollouts
        if isinstance(big_k, bool) or not isinstance(big_k, int) or big_k < 1:
            summary.notes.append(f"{_short(task)}: skipped, no junior pool")
            continue
        for k in ks:
            if k > big_k:
                summary.notes.append(f"{_short(task)} k={k}: skipped, the task has K={big_k} rollouts")
            elif k == big_k and paths.senior_files.brief.is_file():
                summary.reused += 1  # the run's own brief
            elif paths.senior_at_files(k).brief.is_file():
                summary.reused += 1
            elif missing := [i for i in range(k) if not paths.junior_files.rollout(i).is_file()]:
                summary.notes.append(f"{_short(task)} k={k}: skipped, rollout(s) {missing} are not on disk")
            else:
                items.append(Item(task, k, big_k))
    return items


def _one(item: Item, settings, run_budget) -> tuple[str, float, bool]:
    """Run one (task, k); (its log line, dollars spent, whether a brief was saved). Stops propagate."""
    from pipeline.run.task import _require_image
    from pipeline.senior.stage import run_senior

    task, k, config = item.task, item.k, settings.config
    paths = settings.layout.task(task.instance_id)
    directory = paths.senior_at(k)
    budget = run_budget.child(f"analysis {task.instance_id} k={k}", config.budgets.per_task)
    job = TaskJob(task=task, config=config, paths=paths, run_id=settings.layout.run_id,
                  image_template=settings.image_template, budget=budget)
    saved = records.read_trajectory(paths.senior_at_files(k).trajectory).data
    spent = saved.get("cost") if isinstance(saved, dict) else None
    if isinstance(spent, (int, float)):
        budget.seed(float(spent))  # an earlier session's steps count against this (task, k)'s limit
    before = _analysis_spend(paths.ledger)
    rollouts = [records.Rollout.load(paths.junior_files.rollout(i)) for i in range(k)]
    pool = build_pool(task.instance_id, rollouts)
    started = time.monotonic()
    failure = None

    def make() -> records.Brief:
        nonlocal failure
        _require_image(job)
        client = job.client(Role.SENIOR, stage=STAGE)
        with job.open_runtime("senior", read_only=True) as runtime:
            brief = run_senior(task, pool, client, budget, runtime, config, directory, job.count_tokens)
        if brief.senior_exit == ExitReason.COST_LIMIT:
            failure = f"the budget stopped the senior ({brief.senior_error}); a rerun goes on from there"
            raise _NotSaved
        record = brief.to_dict()
        record.pop("context", None)  # context.md holds it
        return records.Brief.of({**record, "analysis": {"k": k, "rollouts": list(range(k)), "K": item.big_k,
                                                        "seconds": round(time.monotonic() - started, 2)}})

    try:
        record = once(paths.senior_at_files(k).brief, make, records.Brief)
    except _NotSaved:
        record = None
    except InfrastructureFault as error:
        failure = f"infrastructure failed ({type(error).__name__}: {error}); a rerun tries again"
        record = None
    except Exception as error:  # noqa: BLE001 - one (task, k) failing leaves the others going
        failure = f"{type(error).__name__}: {error}"
        record = None
    spent = _analysis_spend(paths.ledger) - before
    name = f"{_short(task)} k={k}/{item.big_k}"
    if record is None:
        return f"{name}: no brief: {failure}; ${spent:.4f}", spent, False
    return (f"{name}: brief from the {record.source or '?'}, {len(record.context_spans or [])} span(s) "
            f"in the context, ${spent:.4f}"), spent, True


class _NotSaved(Exception):
    """The senior's record is not a result to keep (it hit the budget)."""


def _needs_local_model(config: RunConfig) -> bool:
    from pipeline.models.local_server import LOCAL_ALIAS

    spec = config.models.get(Role.SENIOR)
    return spec is None or (spec.model == f"openai/{LOCAL_ALIAS}" and spec.free
                            and "127.0.0.1" in (spec.api_base or ""))


def _analysis_spend(ledger: Path) -> float:
    return sum(row.cost for row in Ledger.read(ledger) if row.stage == STAGE)


def _short(task: Task) -> str:
    return short_id(task.instance_id)

