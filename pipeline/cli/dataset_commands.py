"""Commands about tasks and their images: tasks, validate, images build, cleanup."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from pipeline.cli import options as opt
from pipeline.cli.app import app, console, images_app
from pipeline.errors import SwepipeError


@app.command()
@opt.selects_tasks()
def tasks(
    selection: opt.TaskSelection,
    as_json: Annotated[bool, typer.Option("--json", help="Print the decoded records as a JSON list.")] = False,
) -> None:
    """List the tasks of a dataset (after the filters)."""
    selected = selection.load()
    if as_json:
        json.dump([task.to_row() for task in selected], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    table = Table(title=f"{len(selected)} task(s) from {selection.dataset}")
    for column in ("instance id", "repo", "language", "FAIL_TO_PASS", "PASS_TO_PASS"):
        table.add_column(column, justify="right" if column.isupper() else "left", overflow="fold")
    for task in selected:
        table.add_row(task.instance_id, task.repo, task.repo_language,
                      str(len(task.fail_to_pass)), str(len(task.pass_to_pass)))
    console.print(table)



@app.command()
@opt.selects_tasks("dataset", "split", "instance_ids", "repo", "language", "limit")
def validate(
    selection: opt.TaskSelection,
    run_scripts: opt.RunScripts = None,
    image_template: opt.ImageTemplate = None,
    workers: Annotated[int, typer.Option(help="Instances scored at once.")] = 2,
    timeout: opt.Timeout = 1800,
    output_dir: Annotated[Optional[Path], typer.Option(help="Where the check's evaluations go.")] = None,
    eval_network: opt.EvalNetwork = False,
) -> None:
    """Check that every task is sound before a model ever sees it.

    The gold patch resolves, the empty patch does not, FAIL_TO_PASS tests fail and PASS_TO_PASS tests pass at the
    base commit, and no hidden test's name leaks into the prompt."""
    from pipeline.datasets import defaults_for
    from pipeline.evaluation.runner import EvalSettings
    from pipeline.evaluation.validate import validate_tasks
    from pipeline.runtime.limits import container_limits

    selected = selection.load()
    defaults = defaults_for(selection.dataset)
    settings = EvalSettings(image_template=image_template or defaults.image_template,
                            run_scripts=run_scripts or defaults.run_scripts, timeout=timeout,
                            run_id=time.strftime("validate-%Y%m%d-%H%M%S"), network=eval_network,
                            limits=container_limits(concurrent=workers))
    out = output_dir or Path("runs") / settings.run_id
    checks = validate_tasks(selected, settings, out, workers=workers, show_progress=sys.stderr.isatty())
    table = Table(title=f"validation of {len(checks)} task(s) from {selection.dataset}")
    for column in ("instance id", "gold resolves", "empty fails", "F2P fail at base", "P2P pass at base",
                   "prompt clean", "problems"):
        table.add_column(column, overflow="fold")
    mark = {True: "yes", False: "[bold red]NO[/bold red]"}
    for c in checks:
        table.add_row(c.instance_id, mark[c.gold_resolves], mark[c.empty_unresolved], mark[c.f2p_fail_at_base],
                      mark[c.p2p_pass_at_base], mark[c.prompt_clean], "; ".join(c.problems))
    console.print(table)
    broken = [c for c in checks if not c.ok]
    console.print(f"{len(checks) - len(broken)} of {len(checks)} task(s) sound; evaluations in {out}")
    if broken:
        raise typer.Exit(1)



@app.command()
def cleanup(
    run_id: Annotated[Optional[str], typer.Option(help="Only containers of this run.")] = None,
    images: Annotated[bool, typer.Option("--images", help="Also remove the cached sanitised images.")] = False,
    executor: opt.Executor = None,
    ray_address: opt.RayAddress = None,
) -> None:
    """Remove the containers (and cached images) swepipe left behind.

    With --executor ray, a run's containers on every node of the cluster."""
    from pipeline.config import ExecutorConfig
    from pipeline.run.executors import executor_for

    chosen = opt.executor_settings(ExecutorConfig(), executor, ray_address)  # the config's check of the flags
    executor_for(chosen).cleanup(run_id, images, say=print)


@images_app.command("build")
@opt.selects_tasks("dataset", "instance_ids")
def images_build(
    selection: opt.TaskSelection,
    force: Annotated[bool, typer.Option(help="Rebuild even when an image is up to date.")] = False,
) -> None:
    """Build the Debian base image and the bundled tasks' images.

    The base comes from debootstrap and docker import. Cached: an image is rebuilt only when what it is built
    from changed."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from pipeline.bundled.images import build_images
    from pipeline.datasets import BUNDLED

    if selection.dataset != BUNDLED:
        raise SwepipeError(f"only the bundled tasks' images are built locally; {selection.dataset!r} names images "
                           "on a registry (see --image-template), which `docker pull` or swepipe fetch on first use")
    ids = selection.load()
    started = time.monotonic()
    with Progress(TextColumn("[bold]images[/bold]"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  disable=not sys.stderr.isatty()) as progress:
        bar = progress.add_task("", total=None)

        def on_step(kind, item, number, total):
            label = item if isinstance(item, str) else item.name
            progress.update(bar, total=total, completed=number, description=f"{kind}: {label}")

        built = build_images([t.instance_id for t in ids] if selection.instance_ids else None, force=force,
                             on_step=on_step)
    for image in built:
        print(f"{image.image}: " + ("up to date" if image.cached else f"built in {image.seconds:.1f} s"))
    fresh = [b for b in built if not b.cached]
    print(f"{len(built)} image(s), {len(fresh)} built, in {time.monotonic() - started:.1f} s")


def _task_image_names(selected, image_template: str | None, config: Path | None, dataset: str) -> tuple[list, float]:
    """The image names of the selected tasks (by the run's template) and the config's image cache budget."""
    from pipeline.config import load_config
    from pipeline.datasets import defaults_for
    from pipeline.runtime.image_names import image_name

    cfg = load_config(config)
    template = image_template or cfg.containers.image_template or defaults_for(dataset).image_template
    return [image_name(template, task.to_row()) for task in selected], cfg.containers.image_cache_gb


@images_app.command("check")
@opt.selects_tasks()
def images_check(
    selection: opt.TaskSelection,
    image_template: opt.ImageTemplate = None,
    config: opt.ConfigFile = None,
    registry_timeout: Annotated[float, typer.Option(
        help="Seconds one registry query may take before the registry counts as unreachable.")] = 20.0,
) -> None:
    """Check the tasks' images before a long run: present, sizes, disk.

    Which images are present, their sizes, the disk the run needs against containers.image_cache_gb and Docker's
    free disk, and whether the registry has the missing ones."""
    from pipeline.runtime.image_disk import gb
    from pipeline.runtime.image_preflight import preflight

    names, budget = _task_image_names(selection.load(), image_template, config, selection.dataset)
    check = preflight(names, budget, registry_timeout=registry_timeout)
    table = Table(title=f"images of {len(names)} task(s) from {selection.dataset}")
    for column in ("image", "local", "size", "registry"):
        table.add_column(column, overflow="fold")
    for status in check.images:
        table.add_row(status.name, "present" if status.present else "[red]missing[/red]",
                      gb(status.size) if status.present else "-", status.registry or "-")
    console.print(table)
    console.print(check.line(), soft_wrap=True)
    if check.budget_bytes is not None and check.needed_bytes > check.budget_bytes:
        console.print(f"the images take more than the cache budget ({gb(check.budget_bytes)}): a run removes those of "
                      "finished tasks as it goes, and pulls or rebuilds them if they are needed again", soft_wrap=True)
    if not check.ok:
        console.print(f"[bold red]{check.problem()}[/bold red]", soft_wrap=True)
        raise typer.Exit(1)


@images_app.command("prune")
@opt.selects_tasks()
def images_prune(
    selection: opt.TaskSelection,
    keep_gb: Annotated[Optional[float], typer.Option(
        help="Disk to keep for the images, in GB (default: containers.image_cache_gb from --config, else 0: "
             "remove every one not in use).")] = None,
    image_template: opt.ImageTemplate = None,
    config: opt.ConfigFile = None,
) -> None:
    """Remove cached images, least recently used first, down to --keep-gb.

    swepipe's sanitised images and the selected tasks' images go; never an image a running swepipe container
    uses."""
    from pipeline.runtime.image_disk import GB, gb
    from pipeline.runtime.image_prune import prune

    names, budget = _task_image_names(selection.load(), image_template, config, selection.dataset)
    keep = keep_gb if keep_gb is not None else (budget or 0.0)
    if keep < 0:
        raise SwepipeError("--keep-gb must be 0 or more")
    result = prune(names, int(keep * GB), all_sanitised=True)
    for ref in result.removed:
        print(f"removed {ref}")
    for ref in result.kept_in_use:
        print(f"kept {ref} (in use)")
    print(f"images took {gb(result.before)}, now {gb(result.after)} (keep {gb(keep * GB)}); "
          f"removed {len(result.removed)} image name(s)")
