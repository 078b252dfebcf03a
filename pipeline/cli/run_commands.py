"""swepipe run (the strategies over many tasks) and swepipe rollouts (the junior stage alone)."""

from __future__ import annotations

import dataclasses
import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from pipeline.cli import options as opt
from pipeline.cli.app import app, console
from pipeline.cli.help import EXECUTION, OUTPUT, SCORING, STRATEGY, TASKS
from pipeline.cli.runs import run_directory
from pipeline.errors import SwepipeError
from pipeline.evaluation.options import ScoringOptions
from pipeline.rundir.layout import TASK
from pipeline.settings.config import commented_yaml
from pipeline.text.printable import clean, short_id
from pipeline.text.terminal import literal
from pipeline.text.terminal_table import TerminalTable

if TYPE_CHECKING:
    from pipeline.run.lifecycle import RunRequest


@app.command()
def run(
    ctx: typer.Context,
    dataset: opt.Dataset = opt.DEFAULT_DATASET, split: opt.Split = "test", instance_ids: opt.InstanceIds = None,
    repo: opt.Repo = None, language: opt.Language = None, limit: opt.Limit = None, slice_: opt.Slice = None,
    shuffle: opt.Shuffle = False, seed: opt.Seed = 0,
    run_scripts: opt.RunScripts = None, dockerfiles: opt.Dockerfiles = None, timeout: opt.Timeout = None,
    scoring_profile: opt.ScoringProfileName = opt.DEFAULT_PROFILE, eval_network: opt.EvalNetwork = False,
    eval_log_mb: opt.EvalLogMb = opt.DEFAULT_LOG_MB,
    junior_model: opt.JuniorModel = None,
    senior_model: opt.SeniorModel = None,
    principal_model: opt.PrincipalModel = None,
    solo_model: opt.SoloModel = None,
    lead_model: opt.LeadModel = None,
    worker_model: opt.WorkerModel = None,
    strategy: opt.StrategyName = None,
    k: Annotated[Optional[int], typer.Option(
        "-k", rich_help_panel=STRATEGY,
        help="Junior rollouts per task, 0 to 64; 0: no juniors, the senior explores alone (default from config: "
             "10).")] = None,
    config: opt.ConfigFile = None,
    assignments: opt.Set = None,
    print_config: opt.PrintConfig = False,
    workers: Annotated[int, typer.Option(help="Tasks run at once.", rich_help_panel=EXECUTION)] = 1,
    executor: opt.Executor = None,
    ray_address: opt.RayAddress = None,
    image_template: opt.ImageTemplate = None,
    skip_image_check: Annotated[bool, typer.Option(
        "--skip-image-check", rich_help_panel=EXECUTION,
        help="Start without checking first that every task's image is present or on its registry (see `swepipe "
             "images check`).")] = False,
    evaluate: Annotated[bool, typer.Option(
        "--evaluate", rich_help_panel=SCORING,
        help="Score each prediction with the hidden tests as soon as it exists.")] = False,
    run_id: Annotated[Optional[str], typer.Option(
        help="Run id; the same id resumes a run (default: run-<time>).", rich_help_panel=OUTPUT)] = None,
    runs_dir: opt.RunsDir = Path("runs"),
    reuse_juniors_from: Annotated[Optional[str], typer.Option(
        rich_help_panel=OUTPUT,
        metavar="RUN",
        help="Take the junior rollouts of this earlier run (id under --runs-dir, or its directory) instead of paying "
             "for new ones.")] = None,
    juniors_from: Annotated[Optional[list[str]], typer.Option(
        "--juniors-from", rich_help_panel=STRATEGY, metavar="SOURCE",
        help="Take candidates in as junior rollouts, after this run's own (-k 0: none of its own): a swepipe run "
             "(id under --runs-dir, or its directory), a predictions file (swepipe's, the official harness's or "
             "swebench's) or a folder of trajectories (mini-swe-agent, SWE-agent, ATIF, swepipe's export). Repeat for "
             "several; their recorded cost is shown apart, never counted as this run's.")] = None,
    repeats: Annotated[int, typer.Option(
        "--repeats", rich_help_panel=OUTPUT,
        help="Run the config N times, into runs/<run-id>-r1 .. -rN, each with other seeds (juniors.seed + 1000 per "
             "repeat); the same command resumes them. budgets.per_run bounds the N together, not each: a repeat "
             "may spend what the others left. `swepipe report runs/<run-id>`: mean ± sd and pass@k over them.")] = 1,
) -> None:
    """Run a strategy over tasks, resumably, and optionally score it.

    The strategy is the pipeline by default (juniors, senior, principal); solo, team and vote are the baselines.
    Every config option can be set with --set PATH=VALUE; --print-config shows them all."""
    selection = opt.TaskSelection.chosen(ctx, dataset=dataset, split=split, instance_ids=instance_ids, repo=repo,
                                         language=language, limit=limit, slice_=slice_, shuffle=shuffle, seed=seed)
    scoring = ScoringOptions(run_scripts=run_scripts, dockerfiles=dockerfiles, timeout=timeout,
                          scoring_profile=scoring_profile, eval_network=eval_network, eval_log_mb=eval_log_mb)
    from pipeline.run.executors import executor_for
    from pipeline.run.lifecycle import RunRequest, new_run_id
    from pipeline.run.repeats import plan_repeats
    from pipeline.run.setup import resolve_config

    given_run_id = run_id
    run_id = run_id or new_run_id()
    group = plan_repeats(run_id, repeats)  # --repeats 0 stops here
    own = ([runs_dir / repeat.run_id for repeat in group] if repeats > 1
           else [runs_dir / run_id] if given_run_id else [])
    imports = functools.partial(_with_imports, sources=juniors_from, runs_dir=runs_dir, own=own) \
        if juniors_from else None
    cfg = resolve_config(config, opt.config_assignments(assignments, junior_model=junior_model,
                                                        senior_model=senior_model, principal_model=principal_model,
                                                        solo_model=solo_model, lead_model=lead_model,
                                                        worker_model=worker_model, strategy=strategy, k=k,
                                                        executor=executor, ray_address=ray_address), imports)
    if print_config:
        print(commented_yaml(cfg), end="")
        return
    if repeats > 1 and reuse_juniors_from:
        raise SwepipeError("--repeats with --reuse-juniors-from: every repeat would take the same rollouts, so the "
                           "repeats would differ in the senior and principal alone; drop one of the two")
    reused = str(run_directory(reuse_juniors_from, runs_dir)) if reuse_juniors_from else None
    request = RunRequest(config=cfg, run_id=run_id, runs_dir=runs_dir, dataset=selection.dataset,
                         split=selection.split, evaluate=evaluate, scoring=scoring, image_template=image_template,
                         reuse_juniors_from=reused, workers=workers)
    where = executor_for(cfg.executor)
    where.connect()  # Ray missing or no cluster there: said now, before the run directory exists
    if repeats == 1:
        complete = _run_once(request, selection, where, check_images=not skip_image_check)
    else:
        complete = _run_repeats(request, selection, group, where, check_images=not skip_image_check)
    if not complete:
        raise typer.Exit(1)


def _with_imports(cfg, sources: list[str], runs_dir: Path, own: list[Path]):
    """The config with juniors.imported: each source as an absolute path (a run id found under ``runs_dir``), each
    read once now, so a source that holds no candidate stops the run before it starts, and one that is a run this
    command writes (``own``: the run's directory, each repeat's) is refused, named by path or by run id."""
    from pipeline.juniors.imported import read_source, refuse_own_run
    from pipeline.strategies.base import strategy_class

    if "junior" not in strategy_class(cfg.strategy).roles:
        raise SwepipeError(f"--juniors-from takes candidates in as junior rollouts; strategy {cfg.strategy} has no "
                           "juniors (use pipeline or vote)")
    paths = []
    for text in sources:
        path = Path(text) if Path(text).exists() or not (runs_dir / text).is_dir() else runs_dir / text
        named = path if Path(text).exists() else runs_dir / text  # a run id: the run, whether it exists yet or not
        for root in own:
            refuse_own_run(text, named, root)
        read_source(path)
        paths.append(str(path.resolve()))
    from pydantic import ValidationError

    try:
        juniors = cfg.juniors.model_validate({**cfg.juniors.model_dump(), "imported": paths})
    except ValidationError as error:
        raise SwepipeError(f"--juniors-from: {error.errors()[0]['msg'].removeprefix('Value error, ')}") from None
    return cfg.model_copy(update={"juniors": juniors})


def _run_once(request: RunRequest, selection: opt.TaskSelection, where, *, check_images: bool, repeat=None,
              group_budget=None, resume: str | None = None) -> bool:
    """One run directory, start to end: False when tasks were left unfinished by infrastructure or no model
    answered. ``repeat``: the repeat it is (its repeat.json is written); ``resume``: how a stop says to resume."""
    from pipeline.run.lifecycle import Run
    from pipeline.run.repeats import record_repeat

    selection = selection.for_run(request.runs_dir / request.run_id, console.print)  # a resumed run: its dataset
    request = dataclasses.replace(request, dataset=selection.dataset, split=selection.split)
    selected = selection.load()
    interactive = sys.stderr.isatty()
    with Run.open(request, announce=console.print) as run:
        settings = run.settings
        if repeat is not None:
            record_repeat(settings.layout, repeat, settings.config, group_budget)
        console.print(f"run {settings.layout.run_id}: {len(selected)} task(s) -> {settings.layout.root}")
        if settings.config.juniors.imported:
            from pipeline.juniors.imported import import_candidates

            import_candidates(settings.layout, selected, settings.config.juniors.k, settings.config.juniors.imported,
                              lambda line: console.print(literal(line), soft_wrap=True))
        if check_images and (settings.config.containers.impl is None or settings.evaluation is not None):
            where.check_run_images(selected, settings, console.print)  # stops here when an image cannot be had
        summary = where.run_tasks(selected, settings, workers=request.workers, show_progress=interactive,
                                  log=None if interactive else _log_line)
        if settings.config.juniors.imported:
            from pipeline.juniors.imported import not_applying

            for line in not_applying(settings.layout, selected, settings.config.juniors.k):
                console.print(literal(line), soft_wrap=True)
    if summary.stopped:
        _stopped(summary, settings, resume)
    return _print_run(summary, settings)


def _run_repeats(request: RunRequest, selection: opt.TaskSelection, group: list, where, *,
                 check_images: bool) -> bool:
    """Each repeat in turn, with its seeds and the group's budget left; False when one was left incomplete."""
    from pipeline.run.repeats import repeat_config

    first, cfg = group[0], request.config
    budget = cfg.budgets.per_run
    shared = f"; budgets.per_run ${budget:g} for the {first.of} together" if budget is not None else ""
    console.print(f"{first.of} repeats of one config: {request.runs_dir / first.group}-r1 .. -r{first.of}{shared}",
                  soft_wrap=True)
    incomplete = []
    for repeat in group:
        repeat_cfg = repeat_config(cfg, repeat, request.runs_dir)
        left = (f", budgets.per_run ${repeat_cfg.budgets.per_run:.4f} (what the other repeats left)"
                if budget is not None else "")
        console.print(f"repeat {repeat.number}/{repeat.of}: juniors.seed {repeat_cfg.juniors.seed}{left}",
                      soft_wrap=True)
        resume = (f"run the same command again (--run-id {repeat.group} --repeats {repeat.of}) to resume repeat "
                  f"{repeat.number} and run the ones after it")
        if not _run_once(dataclasses.replace(request, config=repeat_cfg, run_id=repeat.run_id), selection, where,
                         check_images=check_images and repeat is first, repeat=repeat, group_budget=budget,
                         resume=resume):
            incomplete.append(repeat.run_id)
    if incomplete:
        console.print(literal(f"incomplete: {', '.join(incomplete)}", "red"),
                      "(see above); the same command resumes them", soft_wrap=True)
    console.print(f"across the repeats: swepipe report {request.runs_dir / first.group}", soft_wrap=True)
    return not incomplete


def _log_line(text: str) -> None:
    """A finished task, as one plain line (stdout is a log, not a terminal): its text cleaned as a terminal shows
    it (printable.clean: no escape sequence for whoever reads the log in one, no unencodable surrogate)."""
    print(clean(text), flush=True)


def _stopped(summary, settings, resume: str | None = None) -> None:
    """After a stop: what finished is saved; say how to resume (``resume``: the words for it, when not the run's
    own --run-id)."""
    from pipeline.cli.stops import exit_stopped

    done = len(summary.predictions) - len(summary.skipped)
    resume = resume or f"run the same command again (--run-id {settings.layout.run_id}) to resume the rest"
    exit_stopped(console, f"{done} task(s) finished in this session and are saved in {settings.layout.predictions}; "
                          f"{resume} without paying twice for what was done")


def _seal_count(summary, settings):
    """How the containers of the run's finished tasks (this session's and earlier ones') were sealed."""
    from pipeline.analysis.sealing import seal_count

    return seal_count(list(summary.predictions.values()), settings.config.containers.network)


def _print_run(summary, settings) -> bool:
    """The run's table and what went wrong; False when tasks could not run or no model answered. The warnings
    that the agents could reach the answer (the network on, a container not sealed) come first."""
    from pipeline.analysis.sealing import seal_warnings, sealed_words
    seal = _seal_count(summary, settings)
    for warning in seal_warnings(settings.layout.run_id, seal):  # first: an answer may be retrieval, not repair
        console.print(literal(warning, "red"), soft_wrap=True)
    console.print(run_table(summary, settings.layout))
    if any(p.error for p in summary.predictions.values()):
        console.print(f"full errors: {settings.layout.root / TASK.error} and {settings.layout.predictions.name}",
                      soft_wrap=True)
    if summary.skipped:
        console.print(f"{len(summary.skipped)} task(s) had finished in an earlier session of this run and were skipped")
    console.print(f"spent: {summary.line()}; predictions in {settings.layout.predictions}")
    console.print(literal(sealed_words(seal), "red" if seal.loud else ""), soft_wrap=True)
    for instance_id, error in sorted(summary.infra_errors.items()):
        console.print(literal("not run", "red"), f"{instance_id}: {error}", soft_wrap=True)
    if summary.no_model_answered:
        made, _ = summary.calls()
        console.print(f"no model answered: every one of the {made} model call(s) of these tasks failed (see "
                      f"error in each {TASK.ledger} row), so what was resolved says nothing about the "
                      "models. Check the endpoints and keys, then rerun with a new --run-id.", style="red",
                      soft_wrap=True)
    if summary.infra_errors:
        console.print(f"{len(summary.infra_errors)} task(s) could not run (infrastructure: Docker, a model "
                      "endpoint or the cluster failed); they stay unfinished and the same --run-id retries them",
                      style="red", soft_wrap=True)
    return not (summary.infra_errors or summary.no_model_answered)


def run_table(summary, layout) -> TerminalTable:
    """One row per task of the session: its source, dollars by stage, verdict and error (whole paragraphs of it:
    the rest is in the task's error.txt)."""
    from pipeline.run.bookkeeping import dollars_of, verdict_word
    from pipeline.text.printable import short_ids, whole_paragraphs
    from pipeline.text.secrets import redact

    stages = list(summary.roles)
    shown = short_ids(list(summary.predictions))
    rows = []
    for instance_id, p in sorted(summary.predictions.items()):
        cost = p.cost if isinstance(p.cost, dict) else {}
        error, left = whole_paragraphs(redact(str(p.error or "")))  # shown whole now: a key in it is not
        if left:
            error += f"\n({left} more paragraph(s) in {TASK.error})"
        rows.append([shown[instance_id], str(p.source or ""), *(dollars_of(cost.get(s, 0))[1:] for s in stages),
                     verdict_word(p.resolved, "yes", "no", "-"), error])
    return TerminalTable(f"run {layout.run_id}", ["instance", "source", *(f"{s} $" for s in stages), "resolved",
                                                  "error"], rows)


@app.command()
def rollouts(
    ctx: typer.Context,
    task: Annotated[str, typer.Option(help="Instance id of the task.", rich_help_panel=TASKS)],
    dataset: opt.Dataset = opt.DEFAULT_DATASET, split: opt.Split = "test",
    junior_model: opt.JuniorModel = None,
    k: Annotated[Optional[int], typer.Option("-k", help="Number of rollouts (default from config: 10).",
                                             rich_help_panel=STRATEGY)] = None,
    max_steps: Annotated[Optional[int], typer.Option(help="Step limit per rollout.", rich_help_panel=STRATEGY)] = None,
    config: opt.ConfigFile = None,
    assignments: opt.Set = None,
    image_template: opt.ImageTemplate = None,
    runs_dir: opt.RunsDir = Path("runs"),
    run_id: Annotated[Optional[str], typer.Option(rich_help_panel=OUTPUT, help="Run id; the same id reuses finished "
                                                 "rollouts (default: rollouts-<time>).")] = None,
) -> None:
    """Run the juniors alone on one task and print their candidate pool.

    The rollouts and the pool are written to runs/<run-id>/tasks/<id>/junior."""
    selection = opt.TaskSelection.chosen(ctx, dataset=dataset, split=split)
    from pipeline.juniors.stage import junior_stage
    from pipeline.run.lifecycle import Run, RunRequest, new_run_id
    from pipeline.run.setup import resolve_config
    from pipeline.run.task import seeded_run_budget, task_job

    if k == 0:
        raise SwepipeError("swepipe rollouts -k 0 would run no rollout; pass -k N (N >= 1)")
    if run_id:
        selection = selection.for_run(runs_dir / run_id, console.print)
    chosen = dataclasses.replace(selection, instance_ids=task).load()[0]
    from pipeline.settings.config_overlay import flag

    juniors_alone = flag("strategy", "vote", "swepipe rollouts (the junior stage alone)")
    cfg = resolve_config(config, [*opt.config_assignments(assignments, junior_model=junior_model, k=k,
                                                          max_steps=max_steps), juniors_alone])
    request = RunRequest(config=cfg, run_id=run_id or new_run_id("rollouts"), runs_dir=runs_dir,
                         dataset=selection.dataset, split=selection.split, image_template=image_template)
    with Run.open(request, announce=console.print) as run:
        job = task_job(chosen, run.settings, seeded_run_budget(run.settings))
        records, pool = junior_stage(job, on_done=lambda r: console.print(
            f"rollout {r.index:02d}: {r.exit_reason}, {r.steps} steps, ${r.cost:.4f}"))
    _print_pool(pool, records)


def _print_pool(pool, records) -> None:
    console.print(literal(f"candidate pool of {short_id(pool.instance_id)}: {len(pool.candidates)} distinct "
                          f"patch(es) from {pool.rollouts} rollouts"))
    rows = [[str(number), str(candidate.votes), ", ".join(map(str, candidate.rollouts)), "\n".join(candidate.files),
             "\n".join(candidate.functions[:6]), "yes" if candidate.test_patch else "no"]
            for number, candidate in enumerate(pool.candidates, 1)]
    console.print(TerminalTable("", ["candidate", "votes", "rollouts", "files", "functions", "test edits"], rows))
    if pool.empty:
        console.print(f"no source edit from rollout(s) {', '.join(map(str, pool.empty))}")
    if pool.failed:
        console.print(literal(f"no diff could be taken from rollout(s) {', '.join(map(str, pool.failed))}", "red"),
                      "(patch_error in their records)")
    for drop in pool.dropped:
        console.print(f"dropped from rollout {drop['rollout']}: {drop['file']} ({drop['reason']})", soft_wrap=True)
    console.print(f"total ${sum(r.cost or 0.0 for r in records):.4f}; exit reasons: "
                  + ", ".join(sorted({str(r.exit_reason) for r in records})))
