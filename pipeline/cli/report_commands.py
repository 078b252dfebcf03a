"""swepipe report and swepipe coverage: reading run directories, no model, no Docker."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pipeline.cli import app, console
from pipeline.cli import options as opt
from pipeline.errors import SwepipeError


@app.command()
@opt.selects_tasks("dataset", "split")
def report(
    runs: Annotated[list[Path], typer.Argument(help="Run directories (runs/<run-id>), shown side by side.")],
    baseline: Annotated[Optional[Path], typer.Option(
        help="Run to compare against (normally the solo agent): "
             "efficiency = added resolve rate per added dollar per task.")] = None,
    html: Annotated[Optional[Path], typer.Option("--html", help="Also write the HTML report (offline, figures "
                                                 "embedded) to this file.")] = None,
    selection: opt.TaskSelection = opt.TaskSelection(),
) -> None:
    """Resolve rate, dollars, tokens and time by stage, exit reasons and coverage of run directories (no model,
    no Docker); writes report.md, report.html and figures/ into the first run's directory."""
    from pipeline.report.build import build_report, write_report
    from pipeline.report.render import rich_table

    try:
        patches = {t.instance_id: t.patch for t in selection.load()}
    except SwepipeError as error:
        console.print(f"[yellow]no coverage: {error}[/yellow]")
        patches = None
    built = build_report(runs, patches, baseline=baseline)
    for table in built.tables(per_task=False):
        console.print(rich_table(table))
    written = write_report(built, runs[0], html)
    console.print("wrote " + ", ".join(str(path) for path in written.values()), soft_wrap=True)


@app.command()
@opt.selects_tasks("dataset", "split")
def coverage(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="Run directory (runs/<run-id>).")],
    selection: opt.TaskSelection = opt.TaskSelection(),
    by_task: Annotated[bool, typer.Option("--by-task/--no-by-task", help="Also show each task at k=K.")] = True,
) -> None:
    """How much of each task's gold patch the context held, against pool size, with and without the senior."""
    from pipeline.report.coverage import run_coverage
    from pipeline.report.load import load_run
    from pipeline.report.render import rich_table
    from pipeline.report.tables import coverage_by_task, coverage_table

    patches = {t.instance_id: t.patch for t in selection.load()}
    result = run_coverage(load_run(run_dir), patches)
    console.print(rich_table(coverage_table(result)))
    if by_task and result.tasks:
        console.print(rich_table(coverage_by_task(result)))
