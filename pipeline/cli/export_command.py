"""swepipe export: a run's predictions for the official or the swebench harness, its trajectories for viewers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pipeline.cli import options as opt
from pipeline.cli.app import app, console
from pipeline.cli.runs import Run, run_directory
from pipeline.errors import SwepipeError


@app.command()
def export(
    run: Run,
    format_: Annotated[str, typer.Option(
        "--format", metavar="official|swebench|trajectories|atif",
        help="official: SWE-Bench Pro's harness input, a JSON list of {instance_id, patch, prefix}; swebench: "
             "{instance_id, model_patch, model_name_or_path}, a JSON list (.json) or JSON Lines (.jsonl); "
             "trajectories: <instance_id>/<agent>.traj.json per agent, as mini-swe-agent saves them; atif: "
             "<instance_id>/<agent>.atif.json per agent, an ATIF v1.8 trajectory (Harbor's format), a team's "
             "workers inside their lead's.")] = "official",
    output: Annotated[Optional[Path], typer.Option(
        help="The file to write (default runs/<id>/export/<format>.json); for trajectories, the directory "
             "(required); for atif, the directory (default runs/<id>/export/atif).")] = None,
    prefix: Annotated[Optional[str], typer.Option(
        help="The official prefix / swebench model_name_or_path of every prediction (default: the run id).")] = None,
    runs_dir: opt.RunsDir = Path("runs"),
) -> None:
    """Export a run's predictions or trajectories for other tools.

    Predictions as the official SWE-Bench Pro harness or swebench reads them, or every agent's trajectory in
    mini-swe-agent's .traj.json form or as ATIF. Tasks without a prediction yet are left out and counted."""
    from pipeline.interop.atif_export import export_atif
    from pipeline.interop.export import FORMATS, default_output, export_predictions, export_trajectories

    if format_ not in FORMATS:
        raise SwepipeError(f"unknown --format {format_!r}: choose one of {', '.join(FORMATS)}")
    if format_ == "atif" and prefix is not None:
        raise SwepipeError("--prefix names the predictions of the official and swebench formats; trajectories "
                           "have none")
    if format_ == "trajectories":
        if output is None:
            raise SwepipeError("--format trajectories needs --output DIR: the directory the .traj.json files go to")
        if prefix is not None:
            raise SwepipeError("--prefix names the predictions of the official and swebench formats; trajectories "
                               "have none")
    root = run_directory(run, runs_dir)
    if format_ == "trajectories":
        assert output is not None  # refused above
        summary = export_trajectories(root, output)
    elif format_ == "atif":
        summary = export_atif(root, output or default_output(root, format_))
    else:
        summary = export_predictions(root, format_, output, prefix)
    console.print(f"wrote {summary.path}", soft_wrap=True)
    console.print(summary.line(), soft_wrap=True)
