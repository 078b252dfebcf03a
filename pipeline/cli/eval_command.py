"""swepipe eval: scoring predictions with the hidden tests."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from pipeline.cli import options as opt
from pipeline.cli.app import app, console
from pipeline.cli.help import EXECUTION, OUTPUT, SCORING
from pipeline.cli.runs import run_directory
from pipeline.cli.stops import exit_stopped
from pipeline.control import stopping
from pipeline.control.outages import BREAKERS, OUTAGE_SECONDS, Settings
from pipeline.errors import SwepipeError
from pipeline.evaluation.options import ScoringOptions
from pipeline.rundir.layout import TASK


@app.command("eval")
def eval_(
    ctx: typer.Context,
    run: Annotated[Optional[str], typer.Argument(
        metavar="RUN", show_default=False,
        help="A run id (under --runs-dir) or a run directory: its predictions.jsonl scored into RUN/eval, or with "
             "--candidates its junior candidates.")] = None,
    predictions: Annotated[Optional[Path], typer.Option(
        rich_help_panel=SCORING,
        help="Instead of RUN: predictions.jsonl, the official JSON list, or swebench JSON/JSONL.")] = None,
    candidates: Annotated[bool, typer.Option(
        "--candidates", rich_help_panel=SCORING,
        help="Score every distinct junior candidate of RUN instead of its predictions, into "
             f"{TASK.candidate_result('KEY')}, skipping those already scored.")] = False,
    dataset: opt.Dataset = opt.DEFAULT_DATASET, split: opt.Split = "test",
    run_scripts: opt.RunScripts = None, dockerfiles: opt.Dockerfiles = None, timeout: opt.Timeout = None,
    scoring_profile: opt.ScoringProfileName = opt.DEFAULT_PROFILE, eval_network: opt.EvalNetwork = False,
    eval_log_mb: opt.EvalLogMb = opt.DEFAULT_LOG_MB,
    image_template: opt.ImageTemplate = None,
    output: Annotated[Optional[Path], typer.Option(
        rich_help_panel=OUTPUT,
        help="Where results go (default RUN/eval; for --predictions inside runs/<run-id>/, that run's eval/, "
             "else <runs-dir>/eval-<file name>-<8 hex of its path>/eval).")] = None,
    runs_dir: opt.RunsDir = Path("runs"),
    workers: Annotated[int, typer.Option(help="Instances scored at once.", rich_help_panel=EXECUTION)] = 2,
    redo: Annotated[bool, typer.Option(help="Score again instances that already have a result.",
                                       rich_help_panel=SCORING)] = False,
    attempts: Annotated[int, typer.Option(
        rich_help_panel=SCORING,
        help="Rerun unresolved instances up to N attempts in all to spot flaky tests; the first attempt's verdict "
             "stays the official one.")] = 1,
    platform: opt.Platform = None,
    skip_image_check: Annotated[bool, typer.Option(
        "--skip-image-check", rich_help_panel=EXECUTION,
        help="Start without checking first that every image to score in is present or on its registry (see "
             "`swepipe images check`).")] = False,
    executor: opt.Executor = None,
    ray_address: opt.RayAddress = None,
    outage_seconds: opt.OutageSeconds = OUTAGE_SECONDS,
) -> None:
    """Score predictions with the hidden tests (the official protocol).

    A run's predictions (RUN), a predictions file (--predictions), or with --candidates every distinct junior
    candidate of a run, scored by the official SWE-Bench Pro protocol in each task's image."""
    selection = opt.TaskSelection.chosen(ctx, dataset=dataset, split=split)
    scoring = ScoringOptions(run_scripts=run_scripts, dockerfiles=dockerfiles, timeout=timeout,
                          scoring_profile=scoring_profile, eval_network=eval_network, eval_log_mb=eval_log_mb)
    from pipeline.evaluation.report import print_summary
    from pipeline.evaluation.runner import EvalSettings
    from pipeline.interop.predictions import load_predictions
    from pipeline.runtime.limits import container_limits
    from pipeline.tasks.datasets import defaults_for

    _one_source(run, predictions, candidates)
    if attempts < 1 or workers < 1 or outage_seconds <= 0:
        raise SwepipeError("--attempts and --workers must be at least 1, and --outage-seconds above 0")
    BREAKERS.configure(dataclasses.replace(Settings(), outage_seconds=outage_seconds, setting="--outage-seconds"))
    from pipeline.run.executors import executor_for
    from pipeline.settings.config import ExecutorConfig

    where = executor_for(opt.executor_settings(ExecutorConfig(), executor, ray_address))  # the flags checked
    if candidates and output is not None:
        raise SwepipeError("--candidates writes into the run (tasks/<id>/candidates/); drop --output")
    where.connect()  # Ray missing or no cluster there: said now, before anything is scored
    if candidates:
        assert run is not None  # _one_source refused --candidates without RUN
        _eval_candidates(run_directory(run, runs_dir), selection, scoring, image_template, workers, redo, attempts,
                         platform, skip_image_check, where)
        return
    if run is not None:
        source = _Source.of_run(run_directory(run, runs_dir))
    else:
        assert predictions is not None  # _one_source: RUN or --predictions
        source = _Source.of_file(predictions, runs_dir)
    loaded = load_predictions(source.predictions)
    selection = selection.for_run(source.predictions.resolve().parent, console.print)  # a run's predictions.jsonl
    tasks_ = selection.load()
    defaults = defaults_for(selection.dataset)
    run_id = source.run_id
    out = output or source.output
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


def _eval_candidates(root: Path, selection, scoring: ScoringOptions, image_template, workers: int, redo: bool,
                     attempts: int, platform, skip_image_check: bool, where) -> None:
    """``--candidates RUN``: the run's junior candidates scored (pipeline.evaluation.candidates) by the executor
    ``where``, its summary."""
    from pipeline.evaluation.candidates import plan_candidates, run_containers, summary_lines
    from pipeline.evaluation.runner import EvalSettings
    from pipeline.runtime.limits import container_limits
    from pipeline.tasks.datasets import defaults_for

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
            from pipeline.runtime.images.names import run_image_names

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
    from pipeline.rundir.layout import EvalOutput
    from pipeline.runtime.images.names import run_image_names

    wanted, output = {p.instance_id for p in loaded}, EvalOutput(out)
    todo = [t for t in tasks_
            if t.instance_id in wanted and (redo or not has_verdict(read_result(output.task(t.instance_id).result)))]
    if todo:
        where.require_images(run_image_names(todo, settings.image_template), announce=console.print)


def _again() -> str:
    """How to resume: this very command."""
    return f"run the same command again (`swepipe {shlex.join(sys.argv[1:])}`)"


def _one_source(run: str | None, predictions: Path | None, candidates: bool) -> None:
    """Refuse a command line that names no predictions to score, or two sources of them."""
    if candidates and run is None:
        raise SwepipeError("--candidates scores the junior candidates of a run: give its RUN (a run id or a run "
                           "directory)")
    if (run is None) == (predictions is None):
        raise SwepipeError("give either RUN (score a run's predictions, or with --candidates its junior "
                           "candidates) or --predictions FILE" + (", not both" if run is not None else ""))


@dataclasses.dataclass(frozen=True)
class _Source:
    """The predictions to score, the run id their scoring containers are labelled with, and where results go
    unless --output says."""

    predictions: Path
    run_id: str
    output: Path

    @classmethod
    def of_run(cls, root: Path) -> _Source:
        from pipeline.rundir.layout import RunLayout

        layout = RunLayout(root)
        return cls(layout.predictions, layout.run_id, layout.eval)

    @classmethod
    def of_file(cls, predictions: Path, runs_dir: Path) -> _Source:
        from pipeline.rundir.layout import RunLayout

        if predictions.resolve().parent.parent.name == "runs":  # a run's own predictions file
            return dataclasses.replace(cls.of_run(predictions.parent), predictions=predictions)
        run_id = predictions_run_id(predictions)
        return cls(predictions, run_id, RunLayout(runs_dir / run_id).eval)


def predictions_run_id(predictions: Path) -> str:
    """The run id a predictions file outside any run is scored under: its name, and a hash of where it is, so
    that two files of one name (two folders' preds.jsonl) never share results, labels or a cleanup."""
    where = hashlib.sha256(os.fsencode(predictions.resolve())).hexdigest()[:8]
    return f"eval-{predictions.stem}-{where}"
