"""A sweep's report: each cell's reward, resolve rate, dollars and efficiency against its solo baseline, as a
table (Markdown and the terminal) and two figures (by team size, by cell). Every number comes from the report
code (load_run, run_stats, efficiency, compare), so a sweep and `swepipe report` never disagree."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pipeline.analysis.load import load_run
from pipeline.analysis.stats import RunStats, compare, efficiency, run_stats
from pipeline.analysis.table import NA, Table, money, percent
from pipeline.errors import SwepipeError
from pipeline.report.plotting import new_figure, png_bytes
from pipeline.report.render import markdown
from pipeline.rundir.layout import SweepLayout
from pipeline.rundir.storage import write_text_atomic
from pipeline.studies.manifest import read_manifest

# A line of the by-size figure: every value of a cell but its size.
GROUP_KEYS = ("sizing", "stage", "mode", "lead", "worker", "prompt", "editor")
COLOURS = ["#c9545d", "#4f7fbf", "#e0a04f", "#7aa874", "#9b7bb8", "#5bb5b0", "#b5835a", "#d17fb5", "#6f6f6f"]
SOLO_COLOUR = "#8a8a8a"
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


@dataclass
class CellResult:
    entry: dict  # the manifest's record of the cell
    run_dir: Path
    stats: RunStats | None  # None: the cell never ran
    baseline: RunStats | None = None  # team cells: their solo baseline's numbers

    @property
    def name(self) -> str:
        return self.entry["name"]

    @property
    def kind(self) -> str:
        return self.entry.get("kind", "team")

    @property
    def values(self) -> dict:
        return self.entry.get("values") or {}


@dataclass
class SweepReport:
    root: Path
    manifest: dict
    cells: list[CellResult]
    metric: str  # "reward" (share of tests passed) when the cells have per-test results, else "rate"
    notes: list[str] = field(default_factory=list)
    finished_sets: dict[str, frozenset] = field(default_factory=dict)

    @property
    def team(self) -> list[CellResult]:
        return [c for c in self.cells if c.kind == "team"]

    @property
    def metric_name(self) -> str:
        return "reward (share of tests passed)" if self.metric == "reward" else "resolve rate"


def load_sweep(root: Path) -> SweepReport:
    """The sweep at ``root`` (its manifest) with each cell's run read through the report code."""
    manifest = read_manifest(root)
    if manifest is None:
        raise SwepipeError(f"{root} has no {SweepLayout(root).manifest.name}: not a sweep directory (pass the "
                           "--sweep-id of a sweep that ran, or its directory)")
    external = None
    if manifest.get("baseline"):
        external = run_stats(load_run(Path(manifest["baseline"])))
    cells, finished = [], {}
    for entry in manifest["cells"]:
        run_dir = SweepLayout(root).cell(entry["name"])  # where it is now, even if the sweep's directory moved
        if not run_dir.is_dir():
            run_dir = Path(entry.get("run_dir") or run_dir)
        run = load_run(run_dir) if run_dir.is_dir() else None
        cells.append(CellResult(entry, run_dir, run_stats(run) if run is not None else None))
        if run is not None:
            finished[entry["name"]] = frozenset(t.instance_id for t in run.tasks)
    by_name = {c.name: c for c in cells}
    for cell in cells:
        if cell.kind == "team":
            base = by_name.get(cell.entry.get("baseline") or "")
            cell.baseline = external if external is not None else (base.stats if base else None)
    has_reward = any(_metric(stats, "reward") is not None for stats in [external, *(c.stats for c in cells)])
    report = SweepReport(root, manifest, cells, "reward" if has_reward else "rate", finished_sets=finished)
    report.notes = _notes(report, external)
    return report


def _notes(report: SweepReport, external: RunStats | None) -> list[str]:
    notes = []
    if report.metric == "reward":
        notes.append("Reward: the share of a task's FAIL_TO_PASS and PASS_TO_PASS tests that passed, averaged over "
                     "the tasks with per-test results; efficiency: reward gained per added dollar per task over the "
                     "cell's solo baseline.")
    else:
        notes.append("No per-test results (run with --evaluate for reward): efficiency is resolve rate gained per "
                     "added dollar per task over the cell's solo baseline, where tasks were scored.")
    if external is not None:
        notes.append(f"Baseline for every team cell: {report.manifest.get('baseline')}.")
    sets = {s for s in report.finished_sets.values()}
    if len(sets) > 1:
        notes.append("Cells finished different tasks (see the tasks column): compare them with care, or rerun the "
                     "sweep to finish the rest.")
    never = [c.name for c in report.cells if c.stats is None]
    if never:
        notes.append(f"Not run yet: {', '.join(never)}.")
    return notes


def _metric(stats: RunStats | None, metric: str) -> float | None:
    return None if stats is None else getattr(stats, metric, None)


def _by(metric: str) -> dict:
    """The keyword that makes stats.efficiency and stats.compare use ``metric`` (none for the resolve rate)."""
    return {} if metric == "rate" else {"metric": metric}


def cell_efficiency(cell: CellResult, metric: str) -> float | None:
    if cell.stats is None or cell.baseline is None:
        return None
    return efficiency(cell.stats, cell.baseline, **_by(metric))


def _versus(cell: CellResult, metric: str) -> str:
    if cell.kind != "team":
        return "baseline"
    if cell.stats is None:
        return NA
    if cell.baseline is None:
        return f"{NA} (no baseline)"
    found = compare(cell.stats, cell.baseline, **_by(metric))
    if found.kind == "unknown" or found.gain is None or found.added is None:  # both known unless unknown
        return f"{NA} ({found.why})"
    change = f"{found.gain * 100:+.1f} pp, {'+' if found.added >= 0 else '-'}{money(abs(found.added))}/task"
    value = cell_efficiency(cell, metric)
    if value is not None:
        return f"{value:+.3g} per $ ({change})"
    return f"{found.kind} ({change})"


def table(report: SweepReport) -> Table:
    rows = []
    for cell in report.cells:
        s, v = cell.stats, cell.values
        solo = cell.kind == "solo"
        tasks = f"{s.tasks}/{cell.entry.get('tasks', '?')}" if s is not None else f"0/{cell.entry.get('tasks', '?')}"
        resolved = (f"{s.resolved}/{s.scored} = {s.rate:.1%}" if s is not None and s.rate is not None
                    else NA)
        reward = percent(_metric(s, "reward")) if _metric(s, "reward") is not None else NA
        rows.append([cell.name, "solo" if solo else str(v.get("size", "?")), "-" if solo else v.get("stage", "?"),
                     "-" if solo else v.get("mode", "?"), v.get("model" if solo else "lead", "?"),
                     "-" if solo else v.get("worker", "?"), v.get("prompt", "?"), v.get("editor", "on"),
                     cell.entry.get("status", "?"),
                     tasks, resolved, reward, money(s.dollars_per_task) if s is not None else NA,
                     _versus(cell, report.metric), str(cell.run_dir)])
    headers = ["cell", "size", "stage", "mode", "lead (solo: model)", "worker", "prompt", "editor", "status", "tasks",
               "resolved", "reward", "$/task", f"vs baseline ({'reward' if report.metric == 'reward' else 'rate'})",
               "run directory"]
    return Table(f"sweep {report.manifest.get('sweep_id', report.root.name)}", headers, rows, report.notes)


def terminal_table(report: SweepReport):
    """The table for a terminal or a log (80 columns): the cell's name says its values; its run directory is
    the sweep's directory and that name."""
    from pipeline.text.terminal_table import TerminalTable

    full = table(report)
    keep = [full.headers.index(h) for h in ("cell", "status", "tasks", "resolved", "reward", "$/task")]
    keep += [i for i, h in enumerate(full.headers) if h.startswith("vs baseline")]
    where = sorted({str(c.run_dir.parent) for c in report.cells})
    notes = [f"Each cell's run directory: {', '.join(where)}/<cell> (sweep.md lists them with every value)."]
    return TerminalTable(full.title, [full.headers[i] for i in keep], [[row[i] for i in keep] for row in full.rows],
                         notes + full.notes)


# -- figures ---------------------------------------------------------------------------------------


def _groups(cells: list[CellResult]) -> dict[tuple, list[CellResult]]:
    groups: dict[tuple, list[CellResult]] = {}
    for cell in cells:
        groups.setdefault(tuple(str(cell.values.get(k)) for k in GROUP_KEYS), []).append(cell)
    return groups


def _group_label(key: tuple, keys: list[tuple]) -> str:
    """Only the values that differ between groups (all alike: "team")."""
    varying = [i for i in range(len(GROUP_KEYS)) if len({k[i] for k in keys}) > 1]
    parts = [f"{GROUP_KEYS[i]} {key[i]}" if GROUP_KEYS[i] in ("lead", "worker") else key[i] for i in varying]
    return ", ".join(parts) or "team"


def by_size(report: SweepReport) -> bytes | None:
    """Reward (or resolve rate), dollars per task and efficiency against team size, one line per group of cells
    that differ only in size; the solo baselines as dashed lines."""
    team = [c for c in report.team if c.stats is not None]
    if not team:
        return None
    metric = report.metric
    figure = new_figure(13.5, 4.6)
    panels = [(report.metric_name, lambda c: _metric(c.stats, metric)),
              ("dollars per task (mean)", lambda c: c.stats.dollars_per_task),
              (f"efficiency: {'reward' if metric == 'reward' else 'resolve rate'} per added $ over solo",
               lambda c: cell_efficiency(c, metric))]
    groups = _groups(team)
    keys = list(groups)
    sizes = sorted({int(c.values.get("size", 0)) for c in team})
    baselines: dict[str, RunStats] = {}
    for cell in team:
        if cell.baseline is not None:
            baselines.setdefault(cell.baseline.run_id, cell.baseline)
    for number, (name, value_of) in enumerate(panels):
        axes = figure.add_subplot(1, 3, number + 1)
        missing = 0
        for index, key in enumerate(keys):
            cells = sorted(groups[key], key=lambda c: int(c.values.get("size", 0)))
            # Groups side by side around each size (x is log 2), so equal values do not hide each other.
            dodge = 2 ** ((index - (len(keys) - 1) / 2) * 0.05)
            points = [(int(c.values["size"]) * dodge, value_of(c)) for c in cells]
            shown = [(x, y) for x, y in points if y is not None]
            missing += len(points) - len(shown)
            if shown:
                axes.plot(*zip(*shown, strict=True), "-", marker=MARKERS[index % len(MARKERS)],
                          color=COLOURS[index % len(COLOURS)], linewidth=1.8, markersize=6,
                          label=_group_label(key, keys))
        if number < 2:
            for index, (run_id, base) in enumerate(sorted(baselines.items())):
                level = _metric(base, metric) if number == 0 else base.dollars_per_task
                if level is not None:
                    axes.axhline(level, linestyle="--", color=SOLO_COLOUR, linewidth=1.2,
                                 dashes=(5, 2 + 2 * index), label=f"solo baseline: {run_id}")
        else:
            axes.axhline(0.0, linestyle="--", color=SOLO_COLOUR, linewidth=1.2, label="solo baseline (0)")
        if missing:
            why = "not scored (--evaluate)" if number == 0 else "n/a: not scored, or no added cost"
            axes.text(0.02, 0.02, f"{missing} cell(s) {why}", transform=axes.transAxes, fontsize=8, color="#666666")
        axes.set_xscale("log", base=2)
        axes.set_xticks(sizes, [str(s) for s in sizes])
        axes.minorticks_off()
        if sizes:
            axes.set_xlim(sizes[0] / 1.4, sizes[-1] * 1.4)
        axes.set_xlabel("team size (workers)")
        axes.set_title(name, fontsize=10)
        if number == 0 and metric in ("reward", "rate"):
            axes.set_ylim(-0.03, 1.05)
        if number == 1:
            axes.yaxis.set_major_formatter("${x:,.4g}")
            axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        if number == 1:  # every cell that ran has a cost: this panel always has its lines
            axes.legend(fontsize=7, loc="best")
    figure.suptitle(f"sweep {report.manifest.get('sweep_id', report.root.name)}: against team size "
                    f"({len(team)} team cell(s); lines: cells differing only in size)", fontsize=11)
    return png_bytes(figure)


def by_cell(report: SweepReport) -> bytes | None:
    """One bar per cell (the solo baselines in grey): reward (or resolve rate), dollars per task, efficiency."""
    from matplotlib.ticker import MaxNLocator

    cells = [c for c in report.cells if c.stats is not None]
    if not cells:
        return None
    metric = report.metric
    groups = _groups([c for c in cells if c.kind == "team"])
    colour_of = {c.name: COLOURS[i % len(COLOURS)] for i, key in enumerate(groups) for c in groups[key]}
    figure = new_figure(14.0, max(3.2, 1.4 + 0.32 * len(cells)))
    positions = list(range(len(cells)))[::-1]  # the first cell on top
    panels = [(report.metric_name, lambda c: _metric(c.stats, metric)),
              ("dollars per task (mean)", lambda c: c.stats.dollars_per_task),
              (f"efficiency: {'reward' if metric == 'reward' else 'resolve rate'} per added $ over solo",
               lambda c: cell_efficiency(c, metric) if c.kind == "team" else None)]
    for number, (name, value_of) in enumerate(panels):
        axes = figure.add_subplot(1, 3, number + 1)
        values = [value_of(c) for c in cells]
        axes.barh(positions, [v or 0.0 for v in values], height=0.7,
                  color=[SOLO_COLOUR if c.kind == "solo" else colour_of[c.name] for c in cells])
        for y, v, cell in zip(positions, values, cells, strict=True):
            if v is None:
                text = " n/a" if cell.kind == "team" or number < 2 else " baseline"
            else:
                text = f" {v:.1%}" if number == 0 else f" ${v:,.4g}" if number == 1 else f" {v:+.3g}"
            axes.text(max(v or 0.0, 0.0), y, text, va="center", fontsize=7, color="#444444")
        axes.xaxis.set_major_locator(MaxNLocator(4))
        axes.margins(x=0.18)
        if number == 0:
            axes.set_xticks([0.0, 0.25, 0.5, 0.75, 1.0], ["0", "25%", "50%", "75%", "100%"])
            axes.set_xlim(0, 1.2)
        if number == 0:
            axes.set_yticks(positions, [c.name for c in cells], fontsize=7)
        else:
            axes.set_yticks(positions, [""] * len(cells))
        if number == 1:
            axes.xaxis.set_major_formatter("${x:,.4g}")
        if number == 2:
            axes.axvline(0.0, color=SOLO_COLOUR, linewidth=1)
        axes.set_title(name, fontsize=10)
        axes.grid(axis="x", alpha=0.3)
    figure.suptitle(f"sweep {report.manifest.get('sweep_id', report.root.name)}: by cell (solo baselines grey)",
                    fontsize=11)
    return png_bytes(figure)


def write_sweep_report(report: SweepReport) -> dict[str, Path]:
    """The sweep's report and its figures in the sweep's directory (pipeline.rundir.layout.SweepLayout)."""
    files = SweepLayout(report.root)
    figures = {}
    made = ((files.by_size_figure, "Reward, dollars and efficiency by team size", by_size(report)),
            (files.by_cell_figure, "Reward, dollars and efficiency by cell", by_cell(report)))
    for path, caption, png in made:
        if png:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(png)
            figures[caption] = path
    text = markdown(f"swepipe sweep {report.manifest.get('sweep_id', report.root.name)}", [table(report)],
                    {caption: path.relative_to(files.root).as_posix() for caption, path in figures.items()})
    write_text_atomic(files.report, text)
    return {files.report.name: files.report, **{path.name: path for path in figures.values()}}
