"""The `swepipe` command line."""

from __future__ import annotations

import json
import sys
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
