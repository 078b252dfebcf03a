"""swepipe report and swepipe coverage: reading run directories, no model, no Docker."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pipeline.cli import options as opt
from pipeline.cli.app import app, console, err_console
from pipeline.cli.runs import Run, run_directories, run_directory, runs_or_repeats
from pipeline.errors import SwepipeError
from pipeline.rundir.layout import ReportFiles
from pipeline.text.terminal import literal


@app.command()
def report(
    ctx: typer.Context,
    runs: Annotated[list[str], typer.Argument(
        metavar="RUN...", help="Runs (run ids under --runs-dir, or run directories), shown side by side; the id of "
                               "`run --repeats` stands for its repeats <id>-r1 ...")],
    baseline: Annotated[Optional[str], typer.Option(
        metavar="RUN",
        help="Run (id or directory) to compare against (normally the solo agent): "
             "efficiency = added resolve rate (and, the study's, added reward: share of tests passed) per "
             "added dollar per task.")] = None,
    output: Annotated[Optional[Path], typer.Option(
        help="The folder for report.md, report.html (offline, figures embedded), a page per task "
             "(report_tasks/) and figures/ (default: the first run's directory).")] = None,
    subset: Annotated[Optional[Path], typer.Option(
        "--subset", help="A file of instance ids (one a line, e.g. reliable.txt): every figure on those tasks, the "
                         "resolve rate on every task beside.")] = None,
    dataset: opt.Dataset = opt.DEFAULT_DATASET, split: opt.Split = "test",
    runs_dir: opt.RunsDir = Path("runs"),
) -> None:
    """Report runs: resolve rate, dollars, tokens and time by stage.

    Also exit reasons, coverage, for team runs the team analysis, and for repeats of one config (run --repeats)
    mean ± sd and pass@k across them; no model, no Docker. Writes report.md, report.html, a page per task and
    figures/ into the first run's directory, or --output."""
    selection = opt.TaskSelection.chosen(ctx, dataset=dataset, split=split)
    from pipeline.report.build import build_report, write_report
    from pipeline.report.render import rich_table

    run_dirs = [run for name in runs for run in _announced(name, runs_or_repeats(name, runs_dir))]
    baseline_dir = run_directory(baseline, runs_dir) if baseline else None
    patches: dict[str, str] | None
    problems: dict[str, str] | None
    meta: dict[str, tuple[str, str]] | None
    try:
        tasks = _tasks_of_runs([*run_dirs, *([baseline_dir] if baseline_dir else [])], selection)
        patches = {t.instance_id: t.patch for t in tasks}
        problems = {t.instance_id: t.problem_statement for t in tasks}  # for the task pages
        meta = task_meta(tasks)
    except SwepipeError as error:
        console.print(f"no coverage: {error}", style="yellow")
        patches = problems = meta = None
    built = build_report(list[str | Path](run_dirs), patches, baseline=baseline_dir, problems=problems, meta=meta,
                         subset=subset)
    for note in built.notes:  # what report.md opens with as a warning (the network on, a container not sealed)
        if note.startswith("Warning: "):
            console.print(literal(note, "red"), soft_wrap=True)
    for table in built.tables(per_task=False):
        console.print(rich_table(table))
    written = write_report(built, output or run_dirs[0])
    console.print("wrote " + ", ".join(str(path) for path in written.values()), soft_wrap=True)


@app.command()
def coverage(
    ctx: typer.Context,
    run: Run,
    dataset: opt.Dataset = opt.DEFAULT_DATASET, split: opt.Split = "test",
    runs_dir: opt.RunsDir = Path("runs"),
    by_task: Annotated[bool, typer.Option("--by-task/--no-by-task", help="Also show each task at k=K.")] = True,
    senior_at: Annotated[Optional[str], typer.Option(
        "--senior-at", metavar="K,K,...",
        help="First run the senior (paid: ledger stage 'analysis', within the run's budgets; resumable) on the "
             "first k rollouts of each finished task, for each k (e.g. 1,3,5,10), to draw the senior model's "
             "own curve; k = K reuses the run's brief, k > K is skipped.")] = None,
    workers: Annotated[int, typer.Option(help="With --senior-at: senior runs at once.")] = 1,
    image_template: opt.ImageTemplate = None,
    output: Annotated[Optional[Path], typer.Option(
        help="The folder whose figures/ gets the coverage figure, coverage-<run-id>.png (default: RUN).")] = None,
) -> None:
    """How much of each gold patch the context held, by pool size.

    Counted over the candidates' hunks, plus the code expansion, plus the senior model's spans."""
    selection = opt.TaskSelection.chosen(ctx, dataset=dataset, split=split)
    from pipeline.analysis.coverage import run_coverage
    from pipeline.analysis.load import load_run
    from pipeline.report.figures import coverage_curves
    from pipeline.report.render import rich_table
    from pipeline.report.tables import coverage_by_task, coverage_table
    from pipeline.studies.senior_at import parse_ks

    pool_sizes = parse_ks(senior_at) if senior_at else None  # a bad --senior-at is said before the run is read
    run_dir = run_directory(run, runs_dir)
    selection = selection.for_run(run_dir, console.print)
    tasks = selection.load()
    patches = {t.instance_id: t.patch for t in tasks}
    if pool_sizes:
        _senior_at(run_dir, tasks, pool_sizes, selection.dataset, image_template, workers)
    result = run_coverage(load_run(run_dir), patches)
    console.print(rich_table(coverage_table(result)))
    if by_task and result.tasks:
        console.print(rich_table(coverage_by_task(result)))
    png = coverage_curves(result)
    if png:
        path = ReportFiles(output or run_dir).coverage_figure(result.run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
        console.print(f"figure: {path}", soft_wrap=True)


def _announced(name: str, runs: list[Path]) -> list[Path]:
    if len(runs) > 1:
        console.print(f"{name}: the {len(runs)} repeats {', '.join(run.name for run in runs)}", soft_wrap=True)
    return runs


def task_meta(tasks: list) -> dict[str, tuple[str, str]]:
    """instance id -> (repository, language), for the tables by repository."""
    return {t.instance_id: (t.repo, str(t.repo_language)) for t in tasks}


def _tasks_of_runs(runs: list[Path], selection: opt.TaskSelection, say=console.print) -> list:
    """The tasks of every run shown: each run's recorded dataset (unless --dataset or --split was given), each
    dataset loaded once; ``say``: where the dataset a run recorded is announced."""
    chosen = list(dict.fromkeys(selection.for_run(run, say) for run in runs)) or [selection]
    return [task for one in chosen for task in one.load()]


def _senior_at(run_dir: Path, tasks, pool_sizes: list[int], dataset: str, image_template: str | None,
               workers: int) -> None:
    """Run the senior on the first k rollouts (pipeline.studies.senior_at); on Ctrl-C or SIGTERM, stop cleanly."""
    from pipeline.studies.senior_at import run_senior_at

    def line(text: str) -> None:
        console.print(text, soft_wrap=True)

    summary = run_senior_at(run_dir, tasks, pool_sizes, dataset=dataset, image_template=image_template,
                            workers=workers, log=line)
    if summary.stopped:
        from pipeline.cli.stops import exit_stopped

        exit_stopped(console, f"{len(summary.ran)} senior run(s) finished and are saved; run the same command again "
                              "to resume the rest without paying twice for what was done")
    line(f"senior at k: {len(summary.ran)} run now, {summary.reused} already there, {summary.failed} without a "
         f"brief; ${summary.spent:.4f} spent (ledger stage 'analysis')")


@app.command()
def whatif(
    runs: Annotated[list[str], typer.Argument(metavar="RUN...", help="Run ids (under --runs-dir) or run "
                                                                    "directories.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the policies as JSON instead of a table.")] = False,
    price: Annotated[Optional[list[str]], typer.Option(
        "--price", metavar="ROLE=MODEL",
        help="Price a role's recorded tokens at a model of litellm's price map (e.g. "
             "junior=anthropic/claude-haiku-4-5); repeatable. Default: the run's own prices.")] = None,
    output: Annotated[Optional[Path], typer.Option(
        help="The folder whose figures/ gets the figure, whatif.png (default: the first run's directory).")] = None,
    max_subsets: Annotated[int, typer.Option(help="vote@k: at most this many k-subsets of a task's rollouts "
                                             "(a seeded sample beyond).")] = 500,
    runs_dir: opt.RunsDir = Path("runs"),
) -> None:
    """What other policies would have resolved and cost, from records.

    From the recorded runs alone (no model, no container): pass@k, vote@k, the recorded principal, skip rules,
    adaptive schedules, compacted histories and prompt caching. Candidates' verdicts come from `swepipe eval
    RUN --candidates`."""
    import json

    from pipeline.analysis.whatif import Pricer, what_if
    from pipeline.analysis.whatif_data import read_run
    from pipeline.analysis.whatif_table import whatif_table
    from pipeline.report.render import rich_table
    from pipeline.report.whatif_figure import whatif_figure

    overrides = _role_models(price or [])
    if max_subsets < 1:
        raise SwepipeError("--max-subsets must be at least 1")
    run_dirs = run_directories(runs, runs_dir)
    results = []
    for run_dir in run_dirs:
        replay = read_run(run_dir)
        results.append(what_if(replay, Pricer.for_run(replay.config, overrides), max_subsets=max_subsets))
    png = whatif_figure(results)
    path = None
    if png:
        path = ReportFiles(output or run_dirs[0]).whatif_figure
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
    if as_json:
        print(json.dumps({"policies": [p.as_dict() for r in results for p in r.policies],
                          "runs": [{"run": r.run_id, "tasks": r.tasks, "editor": r.editor, "notes": r.notes}
                                   for r in results],
                          "figure": str(path) if path else None}, indent=1))
        return
    for result in results:
        console.print(rich_table(whatif_table(result)))
        for note in result.notes:
            console.print(note, style="yellow", soft_wrap=True)
    if path:
        console.print(f"figure: {path}", soft_wrap=True)


def _role_models(pairs: list[str]) -> dict[str, str]:
    roles = {}
    for pair in pairs:
        role, sep, model = pair.partition("=")
        if not sep or not role.strip() or not model.strip():
            raise SwepipeError(f"--price {pair!r}: expected ROLE=MODEL, e.g. --price junior=anthropic/claude-haiku-4-5")
        roles[role.strip()] = model.strip()
    return roles


@app.command()
def compare(
    ctx: typer.Context,
    runs: Annotated[list[str], typer.Argument(
        metavar="RUN_A RUN_B...", help="Run ids (under --runs-dir) or run directories; each after the first is "
                                       "compared with the first.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON instead of tables.")] = False,
    output: Annotated[Optional[Path], typer.Option(
        help="Also write it into this folder as compare.md and compare.html (one offline page).")] = None,
    dataset: opt.Dataset = opt.DEFAULT_DATASET, split: opt.Split = "test",
    runs_dir: opt.RunsDir = Path("runs"),
) -> None:
    """Compare runs task by task: 2x2 table, McNemar p, paired intervals.

    On the tasks both runs scored: the 2x2 table, the exact McNemar p-value, paired bootstrap intervals of the
    differences in resolve rate and $/task, per repository and language."""
    selection = opt.TaskSelection.chosen(ctx, dataset=dataset, split=split)
    import json

    from pipeline.analysis.compare import compare_runs, compare_tables
    from pipeline.analysis.load import load_run
    from pipeline.report.render import html_page, markdown, rich_table
    from pipeline.rundir.storage import write_text_atomic

    if len(runs) < 2:
        raise SwepipeError("swepipe compare needs at least two runs (RUN_A RUN_B ...)")
    run_dirs = run_directories(runs, runs_dir)
    # stdout holds the comparison alone (`--json | jq .`); what is said about it goes to stderr
    try:
        meta = task_meta(_tasks_of_runs(run_dirs, selection, err_console.print))
    except SwepipeError as error:
        err_console.print(f"no repository or language per task: {error}", style="yellow")
        meta = {}
    pairs = compare_runs([load_run(run) for run in run_dirs], meta)
    if as_json:
        print(json.dumps({"pairs": [pair.as_dict() for pair in pairs]}, indent=1))
    else:
        for table in compare_tables(pairs):
            console.print(rich_table(table))
    title = f"swepipe compare: {', '.join(pair.b for pair in pairs)} against {pairs[0].a}"
    if output is not None:
        files = ReportFiles(output)
        write_text_atomic(files.compare_markdown, markdown(title, compare_tables(pairs), {}))
        write_text_atomic(files.compare_html, html_page(title, compare_tables(pairs), {}))
        err_console.print(f"wrote {files.compare_markdown}, {files.compare_html}", soft_wrap=True)
