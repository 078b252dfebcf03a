"""swepipe eval: scoring predictions with the hidden tests."""

from __future__ import annotations

import dataclasses
import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from pipeline import stopping
from pipeline.cli import options as opt
from pipeline.cli.app import app, console
from pipeline.cli.help import EXECUTION, OUTPUT, SCORING
from pipeline.cli.stops import exit_stopped
from pipeline.errors import SwepipeError
from pipeline.outages import BREAKERS, Settings


@app.command("eval")
@opt.selects_tasks("dataset", "split")
@opt.scores()
def eval_(
    predictions: Annotated[Optional[Path], typer.Option(
        rich_help_panel=SCORING,
        help="predictions.jsonl, the official JSON list, or swebench JSON/JSONL.")] = None,
    candidates: Annotated[Optional[str], typer.Option(
        "--candidates", metavar="RUN",
        rich_help_panel=SCORING,
        help="Instead of predictions: score every distinct junior candidate of the run RUN (a run id or "
             "runs/<run-id>) into tasks/<id>/candidates/<key>/result.json, skipping those already scored.")] = None,
    selection: opt.TaskSelection = opt.TaskSelection(),
    scoring: opt.Scoring = opt.Scoring(),
    image_template: opt.ImageTemplate = None,
    output_dir: Annotated[Optional[Path], typer.Option(
        rich_help_panel=OUTPUT,
        help="Where results go (default runs/<run-id>/eval; a predictions file inside runs/<run-id>/ "
             "names the run).")] = None,
    workers: Annotated[int, typer.Option(help="Instances scored at once.", rich_help_panel=EXECUTION)] = 2,
    redo: Annotated[bool, typer.Option(help="Score again instances that already have a result.",
                                       rich_help_panel=SCORING)] = False,
    attempts: Annotated[int, typer.Option(
        rich_help_panel=SCORING,
        help="Rerun unresolved instances up to N attempts in all to spot flaky tests; the first attempt's verdict "
             "stays the official one.")] = 1,
    platform: opt.Platform = None,
    block_network: Annotated[bool, typer.Option(
        hidden=True, help="Kept for old scripts: the tests run with no network unless --eval-network.")] = False,
    skip_image_check: Annotated[bool, typer.Option(
        "--skip-image-check", rich_help_panel=EXECUTION,
        help="Start without checking first that every image to score in is present or on its registry (see "
             "`swepipe images check`).")] = False,
    executor: opt.Executor = None,
    ray_address: opt.RayAddress = None,
    outage_seconds: opt.OutageSeconds = Settings().outage_seconds,
) -> None:
    """Score predictions with the hidden tests (the official protocol).

    Predictions from a file, or with --candidates every distinct junior candidate of a run, scored by the official
    SWE-Bench Pro protocol in each task's image."""
    from pipeline.datasets import defaults_for
    from pipeline.evaluation.predictions import load_predictions
    from pipeline.evaluation.report import print_summary
    from pipeline.layout import RunLayout
    from pipeline.evaluation.runner import EvalSettings
    from pipeline.runtime.limits import container_limits

    if (predictions is None) == (candidates is None):
        raise SwepipeError("give either --predictions FILE (score predictions) or --candidates RUN (score a run's "
                           "junior candidates)" + (", not both" if predictions is not None else ""))
    if attempts < 1 or workers < 1 or outage_seconds <= 0:
        raise SwepipeError("--attempts and --workers must be at least 1, and --outage-seconds above 0")
    BREAKERS.configure(dataclasses.replace(Settings(), outage_seconds=outage_seconds, setting="--outage-seconds"))
    if block_network and scoring.eval_network:
        raise SwepipeError("--block-network and --eval-network contradict each other; the network is off by "
                           "default, --eval-network turns it on")
    from pipeline.config import ExecutorConfig
    from pipeline.run.executors import executor_for

    where = executor_for(opt.executor_settings(ExecutorConfig(), executor, ray_address))  # the flags checked
    if candidates is not None and output_dir is not None:
        raise SwepipeError("--candidates writes into the run (tasks/<id>/candidates/); drop --output-dir")
    where.connect()  # Ray missing or no cluster there: said now, before anything is scored
    if candidates is not None:
        _eval_candidates(candidates, selection, scoring, image_template, workers, redo, attempts, platform,
                         skip_image_check, where)
        return
    loaded = load_predictions(predictions)
    selection = selection.for_run(predictions.resolve().parent, console.print)  # a run's own predictions.jsonl
    tasks_ = selection.load()
    defaults = defaults_for(selection.dataset)
    run_id = _run_id_for(predictions)
    out = output_dir or RunLayout(Path("runs") / run_id).eval
    settings = EvalSettings(image_template=image_template or defaults.image_template,
                            run_scripts=scoring.run_scripts or defaults.run_scripts, dockerfiles=scoring.dockerfiles,
                            timeout=scoring.timeout, profile=scoring.scoring_profile, platform=platform,
                            network=scoring.eval_network, run_id=run_id,
                            # with ray, sized on each node from its machine and docker_slots
                            limits=None if where.limits_per_node else container_limits(concurrent=workers),
                            log_limit=scoring.log_limit)
    try:  # a stop during the image check stops as one during the scoring does
        if not skip_image_check:  # a scoring run whose images cannot be had says so now, not an hour in
            _check_images(loaded, tasks_, out, settings, redo, where)
        summary = where.evaluate_predictions(loaded, tasks_, out, settings, workers=workers, redo=redo,
                                             attempts=attempts, show_progress=sys.stderr.isatty())
    except (KeyboardInterrupt, stopping.Stopped):  # a signal, or Docker down past --outage-seconds
        exit_stopped(console, f"the scored instances are saved in {out}; {_again()} to score the rest")
    print_summary(summary, out, console)


def _eval_candidates(run: str, selection, scoring: opt.Scoring, image_template, workers: int, redo: bool,
                     attempts: int, platform, skip_image_check: bool, where) -> None:
    """``--candidates RUN``: the run's junior candidates scored (pipeline.evaluation.candidates) by the executor
    ``where``, its summary."""
    from pipeline.datasets import defaults_for
    from pipeline.evaluation.candidates import plan_candidates, run_containers, summary_lines
    from pipeline.evaluation.runner import EvalSettings
    from pipeline.report.export import resolve_run
    from pipeline.runtime.limits import container_limits

    root = resolve_run(run)
    selection = selection.for_run(root, console.print)
    plan = plan_candidates(root, selection.load(), redo)
    defaults = defaults_for(selection.dataset)
    recorded = run_containers(root)  # the image and platform the run's agents had, unless given here
    settings = EvalSettings(image_template=image_template or recorded.get("image_template") or defaults.image_template,
                            run_scripts=scoring.run_scripts or defaults.run_scripts, dockerfiles=scoring.dockerfiles,
                            timeout=scoring.timeout, profile=scoring.scoring_profile,
                            platform=platform or recorded.get("platform"),
                            network=scoring.eval_network,
                            run_id=f"{root.name}-candidates",
                            # with ray, sized on each node from its machine and docker_slots
                            limits=None if where.limits_per_node else container_limits(concurrent=workers),
                            log_limit=scoring.log_limit)
    try:  # a stop during the image check stops as one during the scoring does
        if not skip_image_check and plan.todo:
            from pipeline.runtime.image_names import run_image_names

            tasks_ = list({job.task.instance_id: job.task for job in plan.todo}.values())
            where.require_images(run_image_names(tasks_, settings.image_template), announce=console.print)
        summary = where.score_candidates(plan, settings, workers=workers, attempts=attempts,
                                         show_progress=sys.stderr.isatty())
    except (KeyboardInterrupt, stopping.Stopped):  # a signal, or Docker down past --outage-seconds
        exit_stopped(console, f"the candidates scored so far are saved in {root}/tasks/*/candidates/; {_again()} "
                              "to score the rest")
    for line in summary_lines(summary):
        console.print(line, soft_wrap=True)


def _check_images(loaded, tasks_, out: Path, settings, redo: bool, where) -> None:
    """The images of the predictions still to score, present or on their registry where ``where`` scores."""
    from pipeline.evaluation.batch import has_verdict, read_result
    from pipeline.layout import EvalOutput
    from pipeline.runtime.image_names import run_image_names

    wanted, output = {p.instance_id for p in loaded}, EvalOutput(out)
    todo = [t for t in tasks_
            if t.instance_id in wanted and (redo or not has_verdict(read_result(output.task(t.instance_id).result)))]
    if todo:
        where.require_images(run_image_names(todo, settings.image_template), announce=console.print)


def _again() -> str:
    """How to resume: this very command."""
    return f"run the same command again (`swepipe {shlex.join(sys.argv[1:])}`)"


def _run_id_for(predictions: Path) -> str:
    resolved = predictions.resolve()
    if resolved.parent.parent.name == "runs":
        return resolved.parent.name
    return f"eval-{predictions.stem}"
