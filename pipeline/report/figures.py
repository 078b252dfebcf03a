"""The report's figures as PNG bytes (pipeline.report.plotting: matplotlib's Agg canvas, no pyplot state)."""

from __future__ import annotations

from pipeline.analysis.coverage import RunCoverage
from pipeline.analysis.load import RunData
from pipeline.analysis.stats import RunStats
from pipeline.report.plotting import distinct_labels, dollars_axis, new_figure, png_bytes
from pipeline.text.printable import short_id

STAGE_COLOURS = {"junior": "#8fb3d9", "senior": "#f2b36f", "principal": "#c9545d", "solo": "#7aa874", "team": "#9b7bb8"}
OTHER_COLOURS = ["#b0b0b0", "#6f6f6f", "#d4c36a"]
MAX_LABELLED_TASKS = 40
MAX_MARKED_TASKS = 150  # past this, verdict marks are clutter


def cost_by_stage(run: RunData, stats: RunStats) -> bytes | None:
    """Stacked dollars per task by stage, tasks sorted by their total; a mark shows each task's verdict."""
    if not run.tasks:
        return None
    tasks = sorted(run.tasks, key=lambda t: (t.total_cost, t.instance_id))
    stages = [s for s in stats.stages if any(t.cost(s) for t in tasks)] or list(stats.stages[:1])
    labelled = len(tasks) <= MAX_LABELLED_TASKS
    figure = new_figure(max(6.0, min(14.0, 2.5 + 0.38 * len(tasks))), 5.2 if labelled else 4.2)
    axes = figure.add_subplot()
    positions = list(range(len(tasks)))
    bottom = [0.0] * len(tasks)
    dense = len(tasks) > MAX_MARKED_TASKS  # bars touch, drawn without antialiasing so no moiré shows
    for number, stage in enumerate(stages):
        values = [t.cost(stage) for t in tasks]
        axes.bar(positions, values, bottom=bottom, width=1.0 if dense else 0.75, label=stage, linewidth=0,
                 antialiased=not dense, color=STAGE_COLOURS.get(stage, OTHER_COLOURS[number % len(OTHER_COLOURS)]))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    top = max(bottom) or 1.0
    marks = {True: ("o", "#2e8b57", "resolved"), False: ("x", "#444444", "not resolved"),
             None: ("$?$", "#999999", "not scored")}
    for verdict, (marker, colour, name) in marks.items() if not dense else ():
        xs = [i for i, t in enumerate(tasks) if t.resolved is verdict]
        if xs:
            axes.scatter(xs, [bottom[i] + top * 0.04 for i in xs], marker=marker, color=colour,
                         s=28 if verdict is not None else 40, label=name, zorder=3)
    pad = max(0.0, (8 - len(tasks)) / 2)  # a few tasks still look like bars, not walls
    axes.set_xlim(-0.6 - pad, len(tasks) - 0.4 + pad)
    axes.set_ylim(0, top * 1.15)
    axes.set_ylabel("dollars")
    axes.yaxis.set_major_formatter("${x:,.4g}")
    plural = "s" if len(tasks) != 1 else ""
    # Two lines: a long run id must not push the title off a narrow figure.
    variant = f" ({stats.variant})" if stats.variant not in ("n/a", *stats.strategies) else ""
    axes.set_title(f"{run.run_id}{variant}\ndollars per task by stage ({len(tasks)} task{plural}, sorted by total)",
                   fontsize=10)
    if labelled:
        axes.set_xticks(positions, [short_id(t.instance_id) for t in tasks], rotation=55, ha="right", fontsize=7)
    else:
        axes.set_xticks([])
        axes.set_xlabel("tasks")
    axes.legend(fontsize=8, loc="upper left")
    axes.grid(axis="y", alpha=0.3)
    return png_bytes(figure)


def coverage_curves(coverage: RunCoverage) -> bytes | None:
    """Removed- and added-line coverage and the context's size against pool size k: the candidates' hunks, plus
    the code expansion, plus the senior model's spans (its points as markers, its lift over the expansion
    shaded), and the context sent at k=K."""
    if not coverage.tasks:
        return None
    figure = new_figure(13.0, 4.5)
    panels = [("removed", "removed-line coverage"), ("added", "added-line coverage"),
              ("tokens", "context tokens (approx.)")]
    styles = [("hunks", "candidates", "#7da7d9", "--", "s", 7, 2.2),
              ("expansion", "+ code expansion", "#e0a04f", "-", "o", 6, 1.8)]
    senior_colour = "#c9545d"
    final_k = coverage.max_k
    for number, (metric, title) in enumerate(panels, start=1):
        axes = figure.add_subplot(1, 3, number)
        for which, label, colour, line, marker, size, width in styles:
            points = [(k, v) for k, v, _ in coverage.curve(which, metric) if v is not None]
            if points:
                axes.plot(*zip(*points, strict=True), line, marker=marker, markersize=size, linewidth=width,
                          color=colour, label=label)
        senior = [(k, value, lift) for k, value, lift, _ in coverage.senior_curve(metric)
                  if value is not None and lift is not None]  # both known or neither
        if senior:
            ks = [k for k, _, _ in senior]
            values = [v for _, v, _ in senior]
            # The senior saw the first k rollouts, not the mean over orderings the curves show: its lift is
            # measured against '+ code expansion' on those same rollouts, drawn dotted, and shaded from there.
            bases = [v - lift for _, v, lift in senior]
            if len(senior) > 1:
                axes.plot(ks, bases, ":", marker="o", markersize=5, markerfacecolor="white", linewidth=1.4,
                          color=styles[1][2], label="+ code expansion, the senior's rollouts")
                axes.fill_between(ks, bases, values, color=senior_colour, alpha=0.18, linewidth=0,
                                  label="senior model's lift")
            else:
                axes.vlines(ks, bases, values, color=senior_colour, alpha=0.25, linewidth=9,
                            label="senior model's lift")
            axes.plot(ks, values, "-" if len(ks) > 1 else "", marker="D", markersize=7, linewidth=1.6,
                      color=senior_colour, label="+ senior model", zorder=3)
        final, sent = coverage.final(metric)
        if final is not None:
            axes.scatter([final_k], [final], marker="*", s=150, color="#2e8b57", zorder=4,
                         label=f"context sent ({sent} task{'s' if sent != 1 else ''})")
        axes.set_title(title, fontsize=10)
        axes.set_xlabel("pool size k (rollouts)")
        axes.set_xticks(range(1, final_k + 1))
        axes.set_xlim(0.7, final_k + 0.3)
        if metric != "tokens":
            axes.set_ylim(-0.03, 1.03)
        elif _spread(axes) > 20:  # the context sent can dwarf the candidates' hunks
            axes.set_yscale("log")
            axes.set_title(title + ", log scale", fontsize=10)
        else:
            axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        if number == 1:
            axes.legend(fontsize=8, loc="lower right")
    figure.suptitle(coverage_title(coverage), fontsize=11)
    return png_bytes(figure)


def coverage_title(coverage: RunCoverage) -> str:
    ks = coverage.senior_ks
    senior = (f"first k rollouts, k = {', '.join(map(str, ks))}" if ks
              else "switched off in this run" if coverage.senior_off else "no brief with spans")
    return (f"{coverage.run_id}: coverage of the gold patch ({len(coverage.tasks)} task(s); curves: mean over "
            f"orderings of the rollouts; senior model: {senior})")


def _spread(axes) -> float:
    """Largest over smallest positive y plotted on ``axes`` (1 when there is nothing to compare)."""
    ys = [y for line in axes.get_lines() for y in line.get_ydata() if y > 0]
    ys += [y for points in axes.collections for _, y in points.get_offsets() if y > 0]
    return max(ys) / min(ys) if ys else 1.0


PARETO_LABEL_WIDTH = 24


def pareto_labels(shown: list[RunStats], baseline: RunStats | None) -> tuple[dict[tuple[float, float], str], bool]:
    """The pareto figure's labels by point, and whether any run id was shortened. Runs at the same dollars and
    rate share one label, their names one under another (a sweep's blocking and async cells often coincide);
    run ids too long to fit (a sweep's cells) are named by the words that set them apart from the other long ids
    ("s2 async"), shorter ones in full."""
    long = [s.run_id for s in shown if len(s.run_id) > PARETO_LABEL_WIDTH]
    names = dict(zip(long, distinct_labels(long, width=PARETO_LABEL_WIDTH), strict=True))
    labels: dict[tuple[float, float], list[str]] = {}
    for s in shown:
        variant = f" [{s.variant}]" if s.variant not in ("n/a", *s.strategies) else ""
        is_base = baseline is not None and s.run_id == baseline.run_id
        text = names.get(s.run_id, s.run_id) + variant + (" (baseline)" if is_base else "")
        labels.setdefault(_point(s), []).append(text)
    return {point: "\n".join(texts) for point, texts in labels.items()}, bool(long)


def _point(stats: RunStats) -> tuple[float, float]:
    """(dollars per task, resolve rate) of a run the pareto figure shows: it shows only those with both."""
    assert stats.dollars_per_task is not None and stats.rate is not None, stats.run_id
    return stats.dollars_per_task, stats.rate


def pareto(stats: list[RunStats], baseline: RunStats | None = None) -> bytes | None:
    """Resolve rate (with its 95% interval) against dollars per task, one point per run; the frontier joined."""
    shown = [s for s in stats if s.rate is not None and s.dollars_per_task is not None]
    if not shown:
        return None
    figure = new_figure(7.5, 5.0)
    axes = figure.add_subplot()
    for s in shown:
        dollars, rate = _point(s)
        low, high = s.interval or (rate, rate)
        is_base = baseline is not None and s.run_id == baseline.run_id
        axes.errorbar([dollars], [rate], yerr=[[rate - low], [high - rate]],
                      fmt="D" if is_base else "o", color="#444444" if is_base else "#c9545d", capsize=4, markersize=7)
    labels, shortened = pareto_labels(shown, baseline)
    for (x, y), text in labels.items():
        low = y < 0.08  # above the point near the floor, else below the frontier
        axes.annotate(text, (x, y), textcoords="offset points", xytext=(8, 7 if low else -7),
                      va="bottom" if low else "top", fontsize=8, linespacing=1.1)
    frontier, best = [], -1.0
    for s in sorted(shown, key=lambda s: (_point(s)[0], -_point(s)[1])):
        if _point(s)[1] > best:
            frontier.append(s)
            best = _point(s)[1]
    if len(frontier) > 1:
        axes.plot([s.dollars_per_task for s in frontier], [s.rate for s in frontier], ":", color="#2e8b57",
                  label="Pareto frontier")
        axes.legend(fontsize=8, loc="lower right")
    dollars_axis(axes, [_point(s)[0] for s in shown], 0.15, 0.35)
    axes.set_ylim(-0.03, 1.05)
    axes.set_xlabel("dollars per task (mean)")
    axes.set_ylabel("resolve rate (95% bootstrap interval)")
    axes.set_title("resolve rate against dollars per task" + ("\n(long run ids: the words that set them apart)"
                                                              if shortened else ""))
    axes.grid(alpha=0.3)
    return png_bytes(figure)
