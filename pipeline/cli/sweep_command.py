"""swepipe sweep: a grid of team configurations and their solo baselines over one task set, one run
directory per cell, then reward and efficiency against the baseline by team size and by cell."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from pipeline.cli import options as opt
from pipeline.cli.app import app, console
from pipeline.cli.runs import run_directory
from pipeline.errors import SwepipeError
from pipeline.evaluation.options import ScoringOptions

if TYPE_CHECKING:
    from pipeline.run.lifecycle import RunRequest

Values = Optional[str]


@app.command()
def sweep(
    ctx: typer.Context,
    dataset: opt.Dataset = opt.DEFAULT_DATASET, split: opt.Split = "test", instance_ids: opt.InstanceIds = None,
    repo: opt.Repo = None, language: opt.Language = None, limit: opt.Limit = None, slice_: opt.Slice = None,
    shuffle: opt.Shuffle = False, seed: opt.Seed = 0,
    run_scripts: opt.RunScripts = None, dockerfiles: opt.Dockerfiles = None, timeout: opt.Timeout = None,
    scoring_profile: opt.ScoringProfileName = opt.DEFAULT_PROFILE, eval_network: opt.EvalNetwork = False,
    eval_log_mb: opt.EvalLogMb = opt.DEFAULT_LOG_MB,
    config: opt.ConfigFile = None,
    assignments: opt.Set = None,
    grid: Annotated[Optional[Path], typer.Option(
        "--grid", help="YAML grid file: sizes, stages, modes, lead_models, worker_models, lead_prompts, "
                       "solo_prompts, editors (lists), sizing; an option given on the command line replaces that "
                       "axis.")] = None,
    sizes: Annotated[Values, typer.Option(help="Team sizes, e.g. 1,2,4 (1 to 16; default from config).")] = None,
    stages: Annotated[Values, typer.Option(
        help="Stages the workers serve: planning, implementation, verification, all (default from config).")] = None,
    modes: Annotated[Values, typer.Option(help="Lead modes: blocking, async (default from config).")] = None,
    lead_models: Annotated[Values, typer.Option(
        help="Lead models (litellm model strings); each also plays the solo baseline (default from config).")] = None,
    worker_models: Annotated[Values, typer.Option(help="Worker models (default from config).")] = None,
    lead_prompts: Annotated[Values, typer.Option(help="Lead prompts: minimal, piv (default from config).")] = None,
    solo_prompts: Annotated[Values, typer.Option(
        help="Solo baseline prompts: minimal, piv (default: the lead prompts; a team cell is compared with the "
             "solo cell of its lead model and prompt).")] = None,
    editors: Annotated[Values, typer.Option(
        help="The agents' file editor: on, off (bash only), or on,off to compare them; every cell, solo baselines "
             "included (default from config: limits.editor).")] = None,
    sizing: Annotated[Optional[str], typer.Option(
        help="fixed: every delegation uses the whole team of the cell's size (default); lead: the lead picks up to "
             "that many workers.")] = None,
    baseline: Annotated[Optional[str], typer.Option(
        metavar="RUN",
        help="An existing run (id under --runs-dir, or its directory) to compare every team cell with, instead of "
             "running solo baseline cells.")] = None,
    sweep_id: Annotated[Optional[str], typer.Option(
        help="Sweep id: its cells are <runs-dir>/<sweep-id>/<cell>; the same id resumes the sweep "
             "(default: sweep-<time>).")] = None,
    runs_dir: opt.RunsDir = Path("runs"),
    workers: Annotated[int, typer.Option(help="Tasks run at once within a cell (cells run one after another).")] = 1,
    evaluate: Annotated[bool, typer.Option(
        "--evaluate", help="Score each prediction with the hidden tests (needed for reward).")] = False,
    image_template: opt.ImageTemplate = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the grid (one line per cell, its run directory) and its worst-case cost from the "
                          "budgets; run and write nothing.")] = False,
    report_only: Annotated[bool, typer.Option(
        "--report", help="Only write the report of an existing sweep (--sweep-id): sweep.md and figures.")] = False,
) -> None:
    """Run a grid of team configurations and their solo baselines.

    The grid: size, stage, mode, lead and worker model, prompt, file editor. Each cell is its own resumable run
    directory; then reward and efficiency are plotted against the baseline by team size and by cell."""
    selection = opt.TaskSelection.chosen(ctx, dataset=dataset, split=split, instance_ids=instance_ids, repo=repo,
                                         language=language, limit=limit, slice_=slice_, shuffle=shuffle, seed=seed)
    scoring = ScoringOptions(run_scripts=run_scripts, dockerfiles=dockerfiles, timeout=timeout,
                          scoring_profile=scoring_profile, eval_network=eval_network, eval_log_mb=eval_log_mb)
    from pipeline.studies.sweep import (
        build_grid,
        dry_run_lines,
        plan_sweep,
        read_grid_file,
        resolve_sweep_root,
    )

    if report_only:
        if not sweep_id:
            raise SwepipeError("swepipe sweep --report needs the --sweep-id of a sweep (or its directory)")
        _report(resolve_sweep_root(sweep_id, runs_dir))
        return
    from pipeline.settings.config import load_config

    cfg = load_config(config, opt.config_assignments(assignments))
    axes = {"sizes": sizes, "stages": stages, "modes": modes, "lead_models": lead_models,
            "worker_models": worker_models, "lead_prompts": lead_prompts, "solo_prompts": solo_prompts,
            "editors": editors}
    the_grid = build_grid(cfg, read_grid_file(grid) if grid else {}, axes, sizing, grid_file=grid)
    baseline_dir = _baseline(baseline, runs_dir) if baseline else None
    from pipeline.run.lifecycle import new_run_id

    root_id = sweep_id or new_run_id("sweep")
    root = resolve_sweep_root(root_id, runs_dir)
    selection = selection.for_run(root, console.print)  # a resumed sweep goes on with its own dataset
    tasks = selection.load()
    if not tasks:
        raise SwepipeError("no task selected: the sweep would run nothing")
    plan = plan_sweep(cfg, the_grid, tasks, sweep_id=root.name, runs_dir=root.parent, baseline=baseline_dir)
    if dry_run:
        for line in dry_run_lines(plan):
            console.print(line, soft_wrap=True)
        return
    console.print(f"sweep {plan.sweep_id}: {len(plan.cells)} cell(s) x {len(tasks)} task(s) -> {plan.root}",
                  soft_wrap=True)
    from pipeline.run.lifecycle import RunRequest

    # what every cell shares; each runs with its own config and id (the command's config and the sweep's stand here)
    _run_and_report(plan, RunRequest(config=cfg, run_id=plan.sweep_id, runs_dir=plan.root, dataset=selection.dataset,
                                     split=selection.split, evaluate=evaluate, scoring=scoring,
                                     image_template=image_template, workers=workers))


def _run_and_report(plan, request: RunRequest) -> None:
    """Run the planned cells, then write the sweep's report; a stop or an infrastructure error says how to resume."""
    from pipeline.studies.sweep import run_sweep

    outcome = run_sweep(plan, request, show_progress=sys.stderr.isatty(), log=_line, announce=_line)
    if outcome.stopped:
        from pipeline.cli.stops import exit_stopped
        from pipeline.rundir.layout import SweepLayout

        exit_stopped(console, f"what finished is saved in each cell's run directory ({SweepLayout(plan.root).manifest} "
                              f"lists them); run the same command again (--sweep-id {plan.sweep_id}) to resume "
                              "without paying twice for what was done")
    _report(plan.root)
    if outcome.infra_errors:
        console.print(f"{sum(outcome.infra_errors.values())} task(s) in {len(outcome.infra_errors)} cell(s) "
                      "could not run (infrastructure: Docker, a model endpoint or the cluster); the same "
                      "--sweep-id retries them", style="red")
        raise typer.Exit(1)


def _line(text: str) -> None:
    console.print(text, soft_wrap=True)


def _baseline(baseline: str, runs_dir: Path) -> Path:
    from pipeline.rundir.layout import RunLayout

    root = run_directory(baseline, runs_dir)
    if not RunLayout(root).predictions.is_file():
        raise SwepipeError(f"--baseline {baseline}: no run with predictions at {root}")
    return root.resolve()


def _report(root: Path) -> None:
    from pipeline.report.sweep import load_sweep, terminal_table, write_sweep_report

    report = load_sweep(root)
    console.print(terminal_table(report))
    written = write_sweep_report(report)
    console.print("wrote " + ", ".join(str(path) for path in written.values()), soft_wrap=True)
