"""Putting a report together from run directories, and writing it: report.md, report.html, figures/."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.analysis.compare import Pair, compare_pair, compare_tables, scored_differently
from pipeline.analysis.coverage import RunCoverage, run_coverage
from pipeline.analysis.load import RunData, load_run, named_apart
from pipeline.analysis.repeats import repeat_tables
from pipeline.analysis.sealing import seal_warnings, sealed_words
from pipeline.analysis.stats import RunStats, run_stats
from pipeline.analysis.team.cells import lead_model_table, team_by_task, team_overview
from pipeline.analysis.team.records import TeamRun, team_runs
from pipeline.errors import SwepipeError
from pipeline.report import figures as fig
from pipeline.report import tables as tab
from pipeline.report import team_figures
from pipeline.report.render import html_page, markdown
from pipeline.report.task_page import write_task_pages
from pipeline.rundir.layout import ReportFiles
from pipeline.rundir.storage import write_text_atomic

PER_TASK_ROWS_IN_MARKDOWN = 30


@dataclass
class Report:
    runs: list[RunData]  # the baseline first when it is not one of the runs asked for
    stats: list[RunStats]
    baseline: RunStats | None
    coverage: list[RunCoverage]  # runs with a pool, or the first run's (all n/a) when none has one
    notes: list[str] = field(default_factory=list)
    team: list[TeamRun] = field(default_factory=list)  # the runs with team tasks: the team analysis
    gold: dict[str, str] | None = None  # instance id -> the dataset's gold patch (task pages), when it was read
    problems: dict[str, str] | None = None  # instance id -> the dataset's problem statement (task pages)
    meta: dict[str, tuple[str, str]] | None = None  # instance id -> (repository, language), from the dataset
    subset: str | None = None  # the id file every figure is restricted to (report --subset)
    full_stats: list[RunStats] | None = None  # with a subset: the runs' stats on every task
    pairs: list[Pair] = field(default_factory=list)  # with a baseline: each other run against it, task by task

    @property
    def title(self) -> str:
        return "swepipe report: " + ", ".join(r.run_id for r in self.runs)

    def tables(self, per_task_limit: int | None = None, per_task: bool = True) -> list[tab.Table]:
        """Every table; the per-task ones only when ``per_task`` and a run has at most ``per_task_limit`` tasks."""
        shown = [tab.overview(self.stats, self.baseline, self.full_stats, self.subset), tab.failures(self.stats),
                 *(tab.causes_by_group(run, self.meta) for run in self.runs if self.meta is not None and run.tasks),
                 *compare_tables(self.pairs), *repeat_tables(self.runs, self.stats), tab.exits(self.stats)]
        number = {run.run_id: n for n, run in reversed(list(enumerate(self.runs)))}  # run id -> its first run
        if self.team:
            shown += [team_overview(self.team), lead_model_table(self.team)]
            for team_run in self.team:
                if per_task and (per_task_limit is None or len(team_run.tasks) <= per_task_limit):
                    shown.append(team_by_task(team_run))
                    shown[-1].row_tasks = [(number.get(team_run.run_id, -1), t.instance_id) for t in team_run.tasks]
        for coverage in self.coverage:
            shown += [tab.coverage_table(coverage)]
            if per_task and coverage.tasks and (per_task_limit is None or len(coverage.tasks) <= per_task_limit):
                shown.append(tab.coverage_by_task(coverage))
                shown[-1].row_tasks = [(number.get(coverage.run_id, -1), t.instance_id) for t in coverage.tasks]
        for index, (run, stats) in enumerate(zip(self.runs, self.stats, strict=True)):
            if per_task and (per_task_limit is None or len(run.tasks) <= per_task_limit):
                shown.append(tab.per_task(run, stats.stages))
                shown[-1].row_tasks = [(index, t.instance_id) for t in run.tasks]
        return shown

    def figures(self, files: ReportFiles) -> dict[Path, tuple[str, bytes]]:
        """Where each figure goes in ``files`` -> (caption, PNG); figures with nothing to show are left out."""
        made: dict[Path, tuple[str, bytes]] = {}
        baseline_run = self.baseline.run_id if self.baseline else None
        for run, stats in zip(self.runs, self.stats, strict=True):
            png = fig.cost_by_stage(run, stats)
            if png:
                made[files.cost_figure(run.run_id)] = (f"Dollars per task by stage: {run.run_id}", png)
        for coverage in self.coverage:
            png = fig.coverage_curves(coverage)
            if png:
                made[files.coverage_figure(coverage.run_id)] = (f"Coverage against pool size: {coverage.run_id}", png)
        for team_run in self.team:
            drawn = team_figures.timeline_figure(team_run)
            if drawn:
                made[files.team_timeline_figure(team_run.run_id)] = (
                    f"Lead and workers over time: {team_run.run_id}{drawn[1]}", drawn[0])
        summary = team_figures.summary_figure(self.team) if self.team else None  # None only without team runs
        if summary is not None:
            made[files.team_figure] = ("Team analysis: delegations by stage, messages by direction, the lead "
                                       "blocked, delegation by lead model", summary)
        png = fig.pareto(self.stats, self.baseline)
        if png:
            made[files.pareto_figure] = ("Resolve rate against dollars per task"
                                         + (f" (baseline {baseline_run})" if baseline_run else ""), png)
        return made


def build_report(run_dirs: list[str | Path], patches: dict[str, str] | None, baseline: str | Path | None = None,
                 seed: int = 0, problems: dict[str, str] | None = None,
                 meta: dict[str, tuple[str, str]] | None = None, subset: Path | None = None) -> Report:
    """``patches``: instance id -> gold patch (None: no coverage, e.g. when the dataset cannot be read);
    ``problems``: instance id -> problem statement, for the task pages; ``meta``: instance id -> (repository,
    language), for the outcomes by repository; ``subset``: a file of instance ids (one a line, # comments), every
    figure then on those tasks alone, the resolve rate on every task beside."""
    runs = [load_run(path) for path in run_dirs]
    base_run, first = None, 0  # first: where the runs asked for start
    if baseline is not None:
        base_path = Path(baseline).resolve()
        base_run = next((r for r in runs if r.root.resolve() == base_path), None)
        if base_run is None:
            base_run, first = load_run(baseline), 1
            runs.insert(0, base_run)
    base_index = runs.index(base_run) if base_run is not None else None
    runs = named_apart(runs)  # two folders named alike (a/run, b/run) are two columns
    base_run = runs[base_index] if base_index is not None else None
    full_stats = None
    if subset is not None:
        full_stats = [run_stats(run, seed=seed) for run in runs]
        kept = read_id_file(subset)
        runs = [dataclasses.replace(run, tasks=[t for t in run.tasks if t.instance_id in kept],
                                    unfinished=[i for i in run.unfinished if i in kept]) for run in runs]
        base_run = next((r for r in runs if base_run is not None and r.root == base_run.root), None)
    stats = [run_stats(run, seed=seed) for run in runs]
    base_stats = stats[runs.index(base_run)] if base_run is not None else None
    notes = [f"{run.run_id}: {problem}; that task is left out" for run in runs for problem in run.refused.values()]
    coverage: list[RunCoverage] = []
    if patches is None:
        notes.append("Coverage n/a: the dataset's gold patches could not be read.")
    else:
        every = [run_coverage(run, patches, seed=seed) for run in runs]
        coverage = [c for c in every if c.tasks] or [every[first]]
    notes += [f"{run.run_id}: {task.instance_id}: {name} is {why}; the report reads it as none"
              for run in runs for task in run.tasks for name, why in task.unreadable.items()]
    notes += [f"{run.run_id}: {task.instance_id}: {odd}; counted as not resolved"
              for run in runs for task in run.tasks for odd in task.odd_verdicts]
    if subset is not None:
        notes.insert(0, f"Every figure is on the {len(kept)} task(s) listed in {subset} (those the runs hold); the "
                        "overview gives the resolve rate on every task beside.")
    pairs = [compare_pair(base_run, run, meta or {}, seed) for run in runs if run is not base_run] \
        if base_run is not None else []
    if base_run is None:  # with a baseline, each pair's table warns
        notes += [f"Warning: {warning}" for run in runs[1:] for warning in scored_differently(runs[0], run)]
    notes += [f"{run.run_id}: {sealed_words(stat.seal)}" for run, stat in zip(runs, stats, strict=True) if stat.tasks]
    # first of all: a run whose agents could reach the answer (the network on, history beyond the base)
    notes = [warning for run, stat in zip(runs, stats, strict=True) for warning in seal_warnings(run.run_id, stat.seal)
             ] + notes
    return Report(runs, stats, base_stats, coverage, notes, team_runs(runs), gold=patches, problems=problems,
                  meta=meta, subset=str(subset) if subset is not None else None, full_stats=full_stats, pairs=pairs)


def read_id_file(path: Path) -> set[str]:
    """The instance ids of a file (one a line; blank lines and # comments skipped), e.g. validate's reliable.txt."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise SwepipeError(f"cannot read the id file {path}: {error.strerror or error}") from None
    ids = {line.split("#", 1)[0].strip() for line in lines} - {""}
    if not ids:
        raise SwepipeError(f"the id file {path} lists no instance id (one a line)")
    return ids


def write_report(report: Report, out_dir: Path, task_pages: bool = True) -> dict[str, Path]:
    """report.md, report.html and figures/*.png into ``out_dir`` (by default the first run's directory), and
    beside report.html a page per finished task (``report_tasks/<run>/<instance id>.html``,
    pipeline.report.task_page), linked from the task tables. Returns what was written."""
    files = ReportFiles(out_dir)
    made = report.figures(files)
    written = {}
    for path, (_, png) in made.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
        written[path.name] = path
    lead = list(report.notes)
    links: dict[tuple[int, str], str] = {}
    files.root.mkdir(parents=True, exist_ok=True)
    if task_pages:
        links = write_task_pages(report.runs, files, report.gold, report.problems)
        written[f"{files.task_pages.name}/"] = files.task_pages
    shown = {caption: path.relative_to(out_dir).as_posix() for path, (caption, _) in made.items()}
    text = markdown(report.title, report.tables(PER_TASK_ROWS_IN_MARKDOWN), shown, lead, links)
    write_text_atomic(files.markdown, text)
    written[files.markdown.name] = files.markdown
    page = html_page(report.title, report.tables(), {caption: png for caption, png in made.values()}, lead, links,
                     time.strftime("%Y-%m-%d %H:%M:%S"))
    write_text_atomic(files.html, page)
    written[files.html.name] = files.html
    return written

