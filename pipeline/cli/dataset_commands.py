"""Commands about tasks and their images: tasks, validate, images build, cleanup."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from pipeline.cli import options as opt
from pipeline.cli.app import app, console, images_app
from pipeline.cli.runs import run_id_of
from pipeline.control import stopping
from pipeline.errors import SwepipeError
from pipeline.evaluation.options import ScoringOptions
from pipeline.text.printable import short_ids
from pipeline.text.terminal_table import TerminalTable


@app.command()
def tasks(
    ctx: typer.Context,
    dataset: opt.Dataset = opt.DEFAULT_DATASET, split: opt.Split = "test", instance_ids: opt.InstanceIds = None,
    repo: opt.Repo = None, language: opt.Language = None, limit: opt.Limit = None, slice_: opt.Slice = None,
    shuffle: opt.Shuffle = False, seed: opt.Seed = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the decoded records as a JSON list.")] = False,
) -> None:
    """List the tasks of a dataset (after the filters)."""
    selection = opt.TaskSelection.chosen(ctx, dataset=dataset, split=split, instance_ids=instance_ids, repo=repo,
                                         language=language, limit=limit, slice_=slice_, shuffle=shuffle, seed=seed)
    selected = selection.load()
    if as_json:
        json.dump([task.to_row() for task in selected], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    shown = short_ids([task.instance_id for task in selected])
    rows = [[shown[task.instance_id], task.repo, task.repo_language, str(len(task.fail_to_pass)),
             str(len(task.pass_to_pass))] for task in selected]
    console.print(TerminalTable(f"{len(selected)} task(s) from {selection.dataset}",
                                ["instance", "repo", "language", "FAIL_TO_PASS", "PASS_TO_PASS"], rows,
                                ["the whole ids: swepipe tasks --json"] if rows else [],
                                right=["FAIL_TO_PASS", "PASS_TO_PASS"]))



@app.command()
def validate(
    ctx: typer.Context,
    dataset: opt.Dataset = opt.DEFAULT_DATASET, split: opt.Split = "test", instance_ids: opt.InstanceIds = None,
    repo: opt.Repo = None, language: opt.Language = None, limit: opt.Limit = None,
    run_scripts: opt.RunScripts = None, dockerfiles: opt.Dockerfiles = None, timeout: opt.Timeout = None,
    scoring_profile: opt.ScoringProfileName = opt.DEFAULT_PROFILE, eval_network: opt.EvalNetwork = False,
    eval_log_mb: opt.EvalLogMb = opt.DEFAULT_LOG_MB,
    image_template: opt.ImageTemplate = None,
    platform: opt.Platform = None,
    replicas: Annotated[int, typer.Option(
        help="Score each task's gold and empty patch this many times (replica r gives the tests the seed r); "
             "tests whose outcome differs between runs are flaky.")] = 1,
    workers: Annotated[int, typer.Option(help="Instances scored at once.")] = 2,
    output_dir: Annotated[Path, typer.Option(
        "--output", help="Where the scorings, instances.jsonl and reliable.txt go; the same command on the same folder "
             "resumes (scores only what has no verdict yet).")] = Path("validation"),
    redo: Annotated[bool, typer.Option(help="Score every replica again, even those with a verdict.")] = False,
    executor: opt.Executor = None,
    ray_address: opt.RayAddress = None,
) -> None:
    """Check tasks are sound and which score the same on every run.

    Each task's gold patch and the empty patch are scored --replicas times. Writes instances.jsonl (per task:
    reliable, flaky, broken or unevaluable, and its stable, flaky and broken tests) and reliable.txt (the tasks whose
    FAIL_TO_PASS tests failed on every empty run and whose tests all passed on every gold run; `swepipe report
    --subset` takes it), and says whether any hidden test's name leaks into the prompt. Exit 1 when a task is not
    sound."""
    selection = opt.TaskSelection.chosen(ctx, dataset=dataset, split=split, instance_ids=instance_ids, repo=repo,
                                         language=language, limit=limit)
    scoring = ScoringOptions(run_scripts=run_scripts, dockerfiles=dockerfiles, timeout=timeout,
                          scoring_profile=scoring_profile, eval_network=eval_network, eval_log_mb=eval_log_mb)
    from pipeline.evaluation.runner import EvalSettings
    from pipeline.evaluation.validate import INSTANCES, RELIABLE, validate_tasks
    from pipeline.run.executors import executor_for
    from pipeline.run.run_dataset import record_dataset
    from pipeline.rundir.layout import RunLayout
    from pipeline.runtime.images.names import run_image_names
    from pipeline.runtime.limits import container_limits
    from pipeline.settings.config import ExecutorConfig
    from pipeline.tasks.datasets import defaults_for

    if replicas < 1 or workers < 1:
        raise SwepipeError(f"--replicas ({replicas}) and --workers ({workers}) must be at least 1")
    where = executor_for(opt.executor_settings(ExecutorConfig(), executor, ray_address))
    where.connect()  # Ray missing or no cluster there: said now, before anything is scored
    selected = selection.load()
    record_dataset(RunLayout(output_dir), selection.dataset, selection.split)  # no mixing two datasets' scorings
    defaults = defaults_for(selection.dataset)
    settings = EvalSettings(image_template=image_template or defaults.image_template,
                            run_scripts=scoring.run_scripts or defaults.run_scripts, dockerfiles=scoring.dockerfiles,
                            timeout=scoring.timeout, profile=scoring.scoring_profile, platform=platform,
                            run_id=f"validate-{output_dir.resolve().name}", network=scoring.eval_network,
                            log_limit=scoring.log_limit,
                            limits=None if where.limits_per_node else container_limits(concurrent=workers))
    try:
        # a check whose images cannot be had says so now, not as every replica's infrastructure error
        where.require_images(run_image_names(selected, settings.image_template), announce=console.print)
        checks = validate_tasks(selected, settings, output_dir, replicas=replicas,
                                score=where.evaluate_predictions, workers=workers, redo=redo,
                                show_progress=sys.stderr.isatty(), announce=console.print)
    except (KeyboardInterrupt, stopping.Stopped):
        from pipeline.cli.stops import exit_stopped

        exit_stopped(console, f"the replicas scored so far are saved in {output_dir}; run the same command again "
                              "to score the rest")
    unsound = [c for c in checks if not c.ok]
    _print_validation(checks, unsound, selection.dataset, replicas)
    reliable = sum(1 for c in checks if c.status == "reliable")
    console.print(f"{len(checks) - len(unsound)} of {len(checks)} task(s) sound; {reliable} reliable over {replicas} "
                  f"replica(s): {output_dir / INSTANCES}, {output_dir / RELIABLE}", soft_wrap=True)
    if unsound:
        raise typer.Exit(1)


def _print_validation(checks, unsound, dataset: str, replicas: int) -> None:
    """The table per repository, then each task that is not sound with its problems."""
    from pipeline.evaluation.validate import STATUSES, by_repository

    rows = [[repo, language, str(sum(counts.values())), *(str(counts.get(s, 0)) for s in STATUSES)]
            for repo, language, counts in by_repository(checks)]
    console.print(TerminalTable(f"validation of {len(checks)} task(s) from {dataset}, {replicas} replica(s) of each "
                                "patch", ["repository", "language", "tasks", *STATUSES], rows,
                                right=["tasks", *STATUSES]))
    if unsound:
        shown = short_ids([c.instance_id for c in unsound])
        console.print(TerminalTable("tasks that are not sound", ["instance", "status", "problems"],
                                    [[shown[c.instance_id], c.status, "; ".join(c.problems)] for c in unsound]))


@app.command()
def cleanup(
    run: Annotated[Optional[str], typer.Argument(
        metavar="RUN", show_default=False,
        help="Only the containers of this run: a run id, or a run directory (its name is the id).")] = None,
    images: Annotated[bool, typer.Option("--images", help="Also remove the cached sanitised images.")] = False,
    executor: opt.Executor = None,
    ray_address: opt.RayAddress = None,
) -> None:
    """Remove the containers (and cached images) swepipe left behind.

    All of swepipe's, or RUN's alone; with --executor ray, on every node of the cluster."""
    from pipeline.run.executors import executor_for
    from pipeline.settings.config import ExecutorConfig

    chosen = opt.executor_settings(ExecutorConfig(), executor, ray_address)  # the config's check of the flags
    executor_for(chosen).cleanup(run_id_of(run) if run else None, images, say=print)


@images_app.command("build")
def images_build(
    ctx: typer.Context,
    dataset: opt.Dataset = opt.DEFAULT_DATASET, instance_ids: opt.InstanceIds = None, limit: opt.Limit = None,
    force: Annotated[bool, typer.Option(help="Rebuild even when an image is up to date.")] = False,
) -> None:
    """Build the Debian base image and the bundled tasks' images.

    All of them, or those of the tasks --instance-ids and --limit select (as `swepipe run` selects them: the main
    command builds only its run's first). The base comes from debootstrap and docker import. Cached: an image is
    rebuilt only when what it is built from changed."""
    selection = opt.TaskSelection.chosen(ctx, dataset=dataset, instance_ids=instance_ids, limit=limit)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from pipeline.bundled.images import build_images
    from pipeline.tasks.datasets import BUNDLED

    if selection.dataset != BUNDLED:
        raise SwepipeError(f"only the bundled tasks' images are built locally; {selection.dataset!r} names images "
                           "on a registry (see --image-template), which `docker pull` or swepipe fetch on first use")
    ids = selection.load()
    started = time.monotonic()
    with Progress(TextColumn("images", style="bold", markup=False), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.description}", markup=False), TimeElapsedColumn(), console=console,
                  disable=not sys.stderr.isatty()) as progress:
        bar = progress.add_task("", total=None)

        def on_step(kind, item, number, total):
            label = item if isinstance(item, str) else item.name
            progress.update(bar, total=total, completed=number, description=f"{kind}: {label}")

        narrowed = selection.instance_ids is not None or selection.limit is not None
        built = build_images([t.instance_id for t in ids] if narrowed else None, force=force,
                             on_step=on_step)
    for image in built:
        print(f"{image.image}: " + ("up to date" if image.cached else f"built in {image.seconds:.1f} s"))
    fresh = [b for b in built if not b.cached]
    print(f"{len(built)} image(s), {len(fresh)} built, in {time.monotonic() - started:.1f} s")


def _task_image_names(selected, image_template: str | None, config: Path | None,
                      dataset: str) -> tuple[list, float | None]:
    """The image names of the selected tasks (by the run's template) and the config's image cache budget (None:
    none set)."""
    from pipeline.runtime.images.names import image_name
    from pipeline.settings.config import load_config
    from pipeline.tasks.datasets import defaults_for

    cfg = load_config(config)
    template = image_template or cfg.containers.image_template or defaults_for(dataset).image_template
    return [image_name(template, task.to_row()) for task in selected], cfg.containers.image_cache_gb


@images_app.command("check")
def images_check(
    ctx: typer.Context,
    dataset: opt.Dataset = opt.DEFAULT_DATASET, split: opt.Split = "test", instance_ids: opt.InstanceIds = None,
    repo: opt.Repo = None, language: opt.Language = None, limit: opt.Limit = None, slice_: opt.Slice = None,
    shuffle: opt.Shuffle = False, seed: opt.Seed = 0,
    image_template: opt.ImageTemplate = None,
    config: opt.ConfigFile = None,
    registry_timeout: Annotated[float, typer.Option(
        help="Seconds one registry query may take before the registry counts as unreachable.")] = 20.0,
) -> None:
    """Check the tasks' images before a long run: present, sizes, disk.

    Which images are present, their sizes, the disk the run needs against containers.image_cache_gb and Docker's
    free disk, and whether the registry has the missing ones."""
    selection = opt.TaskSelection.chosen(ctx, dataset=dataset, split=split, instance_ids=instance_ids, repo=repo,
                                         language=language, limit=limit, slice_=slice_, shuffle=shuffle, seed=seed)
    from pipeline.runtime.images.disk import gb
    from pipeline.runtime.images.preflight import preflight

    names, budget = _task_image_names(selection.load(), image_template, config, selection.dataset)
    check = preflight(names, budget, registry_timeout=registry_timeout)
    rows = [[status.name, "present" if status.present else "missing", gb(status.size) if status.present else "-",
             status.registry or "-"] for status in check.images]
    console.print(TerminalTable(f"images of {len(names)} task(s) from {selection.dataset}",
                                ["image", "local", "size", "registry"], rows))
    console.print(check.line(), soft_wrap=True)
    if check.budget_bytes is not None and check.needed_bytes > check.budget_bytes:
        console.print(f"the images take more than the cache budget ({gb(check.budget_bytes)}): a run removes those of "
                      "finished tasks as it goes, and pulls or rebuilds them if they are needed again", soft_wrap=True)
    if not check.ok:
        console.print(check.problem(), style="bold red", soft_wrap=True)
        raise typer.Exit(1)


@images_app.command("prune")
def images_prune(
    ctx: typer.Context,
    dataset: opt.Dataset = opt.DEFAULT_DATASET, split: opt.Split = "test", instance_ids: opt.InstanceIds = None,
    repo: opt.Repo = None, language: opt.Language = None, limit: opt.Limit = None, slice_: opt.Slice = None,
    shuffle: opt.Shuffle = False, seed: opt.Seed = 0,
    keep_gb: Annotated[Optional[float], typer.Option(
        help="Disk to keep for the images, in GB (default: containers.image_cache_gb from --config, else 0: "
             "remove every one not in use).")] = None,
    image_template: opt.ImageTemplate = None,
    config: opt.ConfigFile = None,
) -> None:
    """Remove cached images, least recently used first, down to --keep-gb.

    swepipe's sanitised images and the selected tasks' images go; never an image a running swepipe container
    uses."""
    selection = opt.TaskSelection.chosen(ctx, dataset=dataset, split=split, instance_ids=instance_ids, repo=repo,
                                         language=language, limit=limit, slice_=slice_, shuffle=shuffle, seed=seed)
    from pipeline.runtime.images.disk import GB, gb
    from pipeline.runtime.images.prune import prune

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
