"""The `swepipe` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from pipeline import cli_options as opt
from pipeline.errors import SwepipeError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Resolve SWE-Bench Pro tasks cheaply and score the patches with hidden tests.")
images_app = typer.Typer(no_args_is_help=True, help="Build the Docker images the bundled tasks run in.")
app.add_typer(images_app, name="images")
console = Console()


@app.command()
def tasks(
    dataset: opt.Dataset = opt.DEFAULT_DATASET,
    split: opt.Split = "test",
    instance_ids: opt.InstanceIds = None,
    repo: opt.Repo = None,
    language: opt.Language = None,
    limit: opt.Limit = None,
    slice_: opt.Slice = None,
    shuffle: opt.Shuffle = False,
    seed: opt.Seed = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the decoded records as a JSON list.")] = False,
) -> None:
    """List the tasks of a dataset (after the filters)."""
    selected = opt.select_tasks(dataset, split, instance_ids, repo, language, limit, slice_, shuffle, seed)
    if as_json:
        json.dump([task.to_row() for task in selected], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    table = Table(title=f"{len(selected)} task(s) from {dataset}")
    for column in ("instance id", "repo", "language", "FAIL_TO_PASS", "PASS_TO_PASS"):
        table.add_column(column, justify="right" if column.isupper() else "left", overflow="fold")
    for task in selected:
        table.add_row(task.instance_id, task.repo, task.repo_language,
                      str(len(task.fail_to_pass)), str(len(task.pass_to_pass)))
    console.print(table)


@app.command("eval")
def eval_(
    predictions: Annotated[Path, typer.Option(help="predictions.jsonl, the official JSON list, or swebench JSON/JSONL.")],
    dataset: opt.Dataset = opt.DEFAULT_DATASET,
    split: opt.Split = "test",
    run_scripts: opt.RunScripts = None,
    dockerfiles: opt.Dockerfiles = None,
    image_template: opt.ImageTemplate = None,
    output_dir: Annotated[Optional[Path], typer.Option(
        help="Where results go (default runs/<run-id>/eval; a predictions file inside runs/<run-id>/ names the run).")] = None,
    workers: Annotated[int, typer.Option(help="Instances scored at once.")] = 2,
    redo: Annotated[bool, typer.Option(help="Score again instances that already have a result.")] = False,
    timeout: opt.Timeout = 1800,
    attempts: Annotated[int, typer.Option(help="Rerun unresolved instances up to N attempts in all to spot flaky "
                                          "tests; the first attempt's verdict stays the official one.")] = 1,
    platform: opt.Platform = None,
    block_network: Annotated[bool, typer.Option(help="Run the tests with no network.")] = False,
) -> None:
    """Score predictions with the hidden tests, by the official SWE-Bench Pro protocol."""
    from pipeline.datasets import defaults_for
    from pipeline.evaluation.batch import evaluate_predictions
    from pipeline.evaluation.predictions import load_predictions
    from pipeline.evaluation.report import print_summary
    from pipeline.evaluation.runner import EvalSettings
    from pipeline.tasks import load_tasks

    if attempts < 1 or workers < 1 or timeout <= 0:
        raise SwepipeError("--attempts and --workers must be at least 1, and --timeout above 0")
    loaded = load_predictions(predictions)
    tasks_ = load_tasks(dataset, split)
    defaults = defaults_for(dataset)
    run_id = _run_id_for(predictions)
    out = output_dir or Path("runs") / run_id / "eval"
    settings = EvalSettings(image_template=image_template or defaults.image_template,
                            run_scripts=run_scripts or defaults.run_scripts, dockerfiles=dockerfiles,
                            timeout=timeout, platform=platform, block_network=block_network, run_id=run_id)
    summary = evaluate_predictions(loaded, tasks_, out, settings, workers=workers, redo=redo, attempts=attempts,
                                   show_progress=sys.stderr.isatty())
    print_summary(summary, out, console)


def _run_id_for(predictions: Path) -> str:
    resolved = predictions.resolve()
    if resolved.parent.parent.name == "runs":
        return resolved.parent.name
    return f"eval-{predictions.stem}"


@app.command()
def cleanup(
    run_id: Annotated[Optional[str], typer.Option(help="Only containers of this run.")] = None,
    images: Annotated[bool, typer.Option("--images", help="Also remove the cached sanitised images.")] = False,
) -> None:
    """Remove containers (and optionally cached images) that swepipe left behind."""
    from pipeline.runtime import containers

    removed = containers.remove_labelled(run_id)
    print(f"removed {len(removed)} container(s)" + (f": {', '.join(removed)}" if removed else ""))
    if images:
        tags = containers.remove_sanitised_images()
        print(f"removed {len(tags)} sanitised image(s)")


@images_app.command("build")
def images_build(
    force: Annotated[bool, typer.Option(help="Rebuild even when the image exists.")] = False,
) -> None:
    """Build the Debian base image (debootstrap + docker import); cached unless --force."""
    from pipeline.runtime.base_image import BASE_IMAGE, build_base_image

    seconds = build_base_image(force=force, log=lambda line: console.print(f"[dim]{line}[/dim]"))
    print(f"{BASE_IMAGE}: " + (f"built in {seconds:.0f} s" if seconds else "present (cached)"))


def main() -> None:
    try:
        app()
    except SwepipeError as error:
        Console(stderr=True).print(f"[bold red]error:[/bold red] {error}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
