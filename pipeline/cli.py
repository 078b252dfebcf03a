"""The `swepipe` command line."""

from __future__ import annotations

import json
import sys
import time
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
def validate(
    dataset: opt.Dataset = opt.DEFAULT_DATASET,
    split: opt.Split = "test",
    instance_ids: opt.InstanceIds = None,
    repo: opt.Repo = None,
    language: opt.Language = None,
    limit: opt.Limit = None,
    run_scripts: opt.RunScripts = None,
    image_template: opt.ImageTemplate = None,
    workers: Annotated[int, typer.Option(help="Instances scored at once.")] = 2,
    timeout: opt.Timeout = 1800,
    output_dir: Annotated[Optional[Path], typer.Option(help="Where the check's evaluations go.")] = None,
) -> None:
    """Check every task: gold resolves, empty patch does not, F2P fail and P2P pass at base, no test name leaks."""
    from pipeline.datasets import defaults_for
    from pipeline.evaluation.runner import EvalSettings
    from pipeline.evaluation.validate import validate_tasks

    selected = opt.select_tasks(dataset, split, instance_ids, repo, language, limit, None, False, 0)
    defaults = defaults_for(dataset)
    settings = EvalSettings(image_template=image_template or defaults.image_template,
                            run_scripts=run_scripts or defaults.run_scripts, timeout=timeout,
                            run_id=time.strftime("validate-%Y%m%d-%H%M%S"))
    out = output_dir or Path("runs") / settings.run_id
    checks = validate_tasks(selected, settings, out, workers=workers, show_progress=sys.stderr.isatty())
    table = Table(title=f"validation of {len(checks)} task(s) from {dataset}")
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
def run(
    dataset: opt.Dataset = opt.DEFAULT_DATASET,
    split: opt.Split = "test",
    instance_ids: opt.InstanceIds = None,
    repo: opt.Repo = None,
    language: opt.Language = None,
    limit: opt.Limit = None,
    slice_: opt.Slice = None,
    shuffle: opt.Shuffle = False,
    seed: opt.Seed = 0,
    config: opt.ConfigFile = None,
    junior_model: opt.JuniorModel = None,
    senior_model: opt.SeniorModel = None,
    principal_model: opt.PrincipalModel = None,
    strategy: Annotated[str, typer.Option(help="pipeline (juniors, senior, principal), solo (one agent, the baseline) or team (a lead delegating to workers).")] = "pipeline",
    solo_model: Annotated[Optional[str], typer.Option(help="litellm model string for the solo agent.")] = None,
    lead_model: Annotated[Optional[str], typer.Option(help="litellm model string for the team's lead.")] = None,
    worker_model: Annotated[Optional[str], typer.Option(help="litellm model string for the team's workers.")] = None,
    team_stages: Annotated[Optional[str], typer.Option(help="Team: the stage workers serve: planning, implementation, verification or all (default from config: all).")] = None,
    team_mode: Annotated[Optional[str], typer.Option(help="Team: blocking (the lead waits for its workers) or async (workers run while it works; default from config: blocking).")] = None,
    team_size: Annotated[Optional[int], typer.Option(help="Team: workers at a time, 1 to 16 (default from config: 3).")] = None,
    team_sizing: Annotated[Optional[str], typer.Option(help="Team: fixed (every delegation uses the whole team) or lead (the lead picks up to --team-size; default).")] = None,
    team_messages: Annotated[Optional[bool], typer.Option("--team-messages/--no-team-messages", help="Team: let agents message each other (default from config: yes).")] = None,
    k: Annotated[Optional[int], typer.Option("-k", help="Junior rollouts per task (default from config: 4).")] = None,
    workers: Annotated[int, typer.Option(help="Tasks run at once.")] = 1,
    run_id: Annotated[Optional[str], typer.Option(help="Run id; the same id resumes a run (default: run-<time>).")] = None,
    runs_dir: Annotated[Path, typer.Option(help="Where run directories live.")] = Path("runs"),
    evaluate: Annotated[bool, typer.Option("--evaluate", help="Score each prediction with the hidden tests as soon as it exists.")] = False,
    reuse_juniors_from: Annotated[Optional[str], typer.Option(help="Take the junior rollouts of this earlier run (id or path) instead of paying for new ones.")] = None,
    run_scripts: opt.RunScripts = None,
    dockerfiles: opt.Dockerfiles = None,
    image_template: opt.ImageTemplate = None,
    timeout: opt.Timeout = 1800,
) -> None:
    """Run the pipeline (juniors, senior, principal) over the tasks, resumably, and optionally score it."""
    from pipeline.run.setup import prepare_run
    from pipeline.run.runner import run_tasks

    selected = opt.select_tasks(dataset, split, instance_ids, repo, language, limit, slice_, shuffle, seed)
    ctx = prepare_run(dataset=dataset, config_path=config, overrides={"junior": junior_model, "senior": senior_model,
                      "principal": principal_model, "solo": solo_model, "lead": lead_model, "worker": worker_model},
                      k=k, strategy=strategy, run_id=run_id, runs_dir=runs_dir, evaluate=evaluate,
                      reuse_juniors_from=reuse_juniors_from, run_scripts=run_scripts, dockerfiles=dockerfiles,
                      image_template=image_template, timeout=timeout, announce=console.print,
                      team={"stages": team_stages, "mode": team_mode, "size": team_size, "sizing": team_sizing,
                            "messages": team_messages})
    try:
        console.print(f"run {ctx.layout.run_id}: {len(selected)} task(s) -> {ctx.layout.root}")
        summary = run_tasks(selected, ctx, workers=workers, show_progress=sys.stderr.isatty())
        _print_run(summary, ctx)
    finally:
        ctx.close()


def _print_run(summary, ctx) -> None:
    table = Table(title=f"run {ctx.layout.run_id}")
    stages = {"solo": ["solo"], "team": ["lead", "worker"]}.get(ctx.strategy, ["junior", "senior", "principal"])
    for column in ("instance id", "source", *(f"{s} $" for s in stages), "resolved", "error"):
        table.add_column(column, overflow="fold")
    for instance_id, p in sorted(summary.predictions.items()):
        cost = p.get("cost", {})
        resolved = {True: "yes", False: "no", None: "-"}[p.get("resolved")]
        table.add_row(instance_id, p.get("source", ""), *(f"{cost.get(s, 0):.4f}" for s in stages), resolved,
                      (p.get("error") or "")[:120])
    console.print(table)
    if summary.skipped:
        console.print(f"{len(summary.skipped)} task(s) had finished in an earlier session of this run and were skipped")
    console.print(f"spent: {summary.line()}; predictions in {ctx.layout.predictions}")
    for instance_id, error in sorted(summary.infra_errors.items()):
        console.print(f"[red]not run[/red] {instance_id}: {error}", soft_wrap=True)
    if summary.infra_errors:
        console.print(f"[red]{len(summary.infra_errors)} task(s) could not run (Docker or image trouble); they stay "
                      "unfinished and the same --run-id retries them[/red]")
        raise typer.Exit(1)


@app.command()
def rollouts(
    task: Annotated[str, typer.Option(help="Instance id of the task.")],
    dataset: opt.Dataset = opt.DEFAULT_DATASET,
    split: opt.Split = "test",
    k: Annotated[Optional[int], typer.Option("-k", help="Number of rollouts (default from config: 4).")] = None,
    config: opt.ConfigFile = None,
    junior_model: opt.JuniorModel = None,
    max_steps: Annotated[Optional[int], typer.Option(help="Step limit per rollout.")] = None,
    image_template: opt.ImageTemplate = None,
    output_dir: Annotated[Optional[Path], typer.Option(help="Where rollouts go (default runs/<run-id>/tasks/<id>/junior).")] = None,
    run_id: Annotated[Optional[str], typer.Option(help="Run id (default: rollouts-<time>).")] = None,
) -> None:
    """Run the junior stage alone on one task and print the candidate pool."""
    import time as _time

    from pipeline.config import load_config
    from pipeline.datasets import defaults_for
    from pipeline.storage import write_json_atomic
    from pipeline.juniors.pool import build_pool
    from pipeline.juniors.stage import junior_settings, run_juniors
    from pipeline.models.budget import Budget
    from pipeline.models.client import ModelClient
    from pipeline.models.ledger import Ledger
    from pipeline.runtime.images import image_name

    selected = opt.select_tasks(dataset, split, task, None, None, None, None, False, 0)[0]
    cfg = load_config(config).with_model("junior", junior_model)
    if k is not None:
        cfg = cfg.model_copy(update={"juniors": cfg.juniors.model_copy(update={"k": k})})
    if max_steps is not None:
        cfg = cfg.model_copy(update={"limits": cfg.limits.model_copy(update={"max_steps": max_steps})})
    run_id = run_id or _time.strftime("rollouts-%Y%m%d-%H%M%S")
    task_dir = Path("runs") / run_id / "tasks" / selected.instance_id
    directory = output_dir or task_dir / "junior"
    ledger = Ledger((output_dir or task_dir) / "ledger.jsonl")
    server = None
    if "junior" not in cfg.models:  # as in `swepipe run`: the local model when none is configured
        from pipeline.models.local_server import LocalModelServer

        console.print("no junior model configured: starting the local model (Gemma 3 270M)")
        server = LocalModelServer()
        server.start()
        cfg = cfg.model_copy(update={"models": {**cfg.models, "junior": server.spec()}})
    try:
        client = ModelClient(cfg.model_for("junior"), "junior", ledger, task=selected.instance_id,
                             scope=f"{run_id}/{selected.instance_id}")
        template = image_template or cfg.containers.image_template or defaults_for(dataset).image_template
        settings = junior_settings(cfg, image_name(template, selected.to_row()), run_id)
        run_budget = Budget("run", cfg.budgets.per_run)
        task_budget = run_budget.child(f"task {selected.instance_id}", cfg.budgets.per_task)
        records = run_juniors(selected, cfg.juniors.k, client, task_budget, settings, directory,
                              on_done=lambda r: console.print(f"rollout {r['index']:02d}: {r['exit_reason']}, "
                                                              f"{r['steps']} steps, ${r['cost']:.4f}"))
    finally:
        if server is not None:
            server.stop()
    pool = build_pool(selected.instance_id, records)
    write_json_atomic(directory / "pool.json", pool.to_dict())
    _print_pool(pool, records)


def _print_pool(pool, records) -> None:
    console.print(f"candidate pool of {pool.instance_id}: {len(pool.candidates)} distinct patch(es) "
                  f"from {pool.rollouts} rollouts", soft_wrap=True)
    table = Table()
    for column in ("votes", "rollouts", "files", "functions", "test edits"):
        table.add_column(column, overflow="fold")
    for candidate in pool.candidates:
        table.add_row(str(candidate.votes), ", ".join(map(str, candidate.rollouts)), "\n".join(candidate.files),
                      "\n".join(candidate.functions[:6]), "yes" if candidate.test_patch else "no")
    console.print(table)
    if pool.empty:
        console.print(f"no source edit from rollout(s) {', '.join(map(str, pool.empty))}")
    console.print(f"total ${sum(r['cost'] for r in records):.4f}; exit reasons: "
                  + ", ".join(sorted({r['exit_reason'] for r in records})))


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
    dataset: opt.Dataset = opt.DEFAULT_DATASET,
    instance_ids: opt.InstanceIds = None,
    force: Annotated[bool, typer.Option(help="Rebuild even when an image is up to date.")] = False,
) -> None:
    """Build the Debian base image (debootstrap + docker import) and the bundled tasks' images.

    Cached: an image is rebuilt only when what it is built from changed.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from pipeline.bundled.images import build_images
    from pipeline.datasets import BUNDLED

    if dataset != BUNDLED:
        raise SwepipeError(f"only the bundled tasks' images are built locally; {dataset!r} names images on a "
                           "registry (see --image-template), which `docker pull` or swepipe fetch on first use")
    ids = opt.select_tasks(dataset, "test", instance_ids, None, None, None, None, False, 0)
    started = time.monotonic()
    with Progress(TextColumn("[bold]images[/bold]"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  disable=not sys.stderr.isatty()) as progress:
        bar = progress.add_task("", total=None)

        def on_step(kind, item, number, total):
            label = item if isinstance(item, str) else item.name
            progress.update(bar, total=total, completed=number, description=f"{kind}: {label}")

        built = build_images([t.instance_id for t in ids] if instance_ids else None, force=force, on_step=on_step)
    for image in built:
        print(f"{image.image}: " + ("up to date" if image.cached else f"built in {image.seconds:.1f} s"))
    fresh = [b for b in built if not b.cached]
    print(f"{len(built)} image(s), {len(fresh)} built, in {time.monotonic() - started:.1f} s")


@app.command()
def report(
    runs: Annotated[list[Path], typer.Argument(help="Run directories (runs/<run-id>), shown side by side.")],
    baseline: Annotated[Optional[Path], typer.Option(help="Run to compare against (normally the solo agent): "
                                                     "efficiency = added resolve rate per added dollar per task.")] = None,
    html: Annotated[Optional[Path], typer.Option("--html", help="Also write the HTML report (offline, figures "
                                                 "embedded) to this file.")] = None,
    dataset: opt.Dataset = opt.DEFAULT_DATASET,
    split: opt.Split = "test",
) -> None:
    """Resolve rate, dollars, tokens and time by stage, exit reasons and coverage of run directories (no model,
    no Docker); writes report.md, report.html and figures/ into the first run's directory."""
    from pipeline.report.build import build_report, write_report
    from pipeline.report.render import rich_table
    from pipeline.tasks import load_tasks

    try:
        patches = {t.instance_id: t.patch for t in load_tasks(dataset, split)}
    except SwepipeError as error:
        console.print(f"[yellow]no coverage: {error}[/yellow]")
        patches = None
    built = build_report(runs, patches, baseline=baseline)
    for table in built.tables(per_task=False):
        console.print(rich_table(table))
    written = write_report(built, runs[0], html)
    console.print("wrote " + ", ".join(str(path) for path in written.values()), soft_wrap=True)


@app.command()
def coverage(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="Run directory (runs/<run-id>).")],
    dataset: opt.Dataset = opt.DEFAULT_DATASET,
    split: opt.Split = "test",
    by_task: Annotated[bool, typer.Option("--by-task/--no-by-task", help="Also show each task at k=K.")] = True,
) -> None:
    """How much of each task's gold patch the context held, against pool size, with and without the senior."""
    from pipeline.report.coverage import run_coverage
    from pipeline.report.load import load_run
    from pipeline.report.render import rich_table
    from pipeline.report.tables import coverage_by_task, coverage_table
    from pipeline.tasks import load_tasks

    patches = {t.instance_id: t.patch for t in load_tasks(dataset, split)}
    result = run_coverage(load_run(run_dir), patches)
    console.print(rich_table(coverage_table(result)))
    if by_task and result.tasks:
        console.print(rich_table(coverage_by_task(result)))


def main() -> None:
    try:
        app()
    except SwepipeError as error:
        Console(stderr=True).print(f"[bold red]error:[/bold red] {error}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
