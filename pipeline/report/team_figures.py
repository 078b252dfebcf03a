"""The team analysis as PNG figures: each drawn from data a function returns first (so tests read the numbers)."""

from __future__ import annotations

import math

from pipeline.analysis.table import elided
from pipeline.analysis.team.records import DIRECTIONS, OTHER, STAGES, TeamRun, TeamTask
from pipeline.analysis.team.summaries import by_lead_model, summarise, timeline
from pipeline.report.plotting import distinct_labels, new_figure, png_bytes
from pipeline.text.printable import short_id

MAX_TIMELINE_TASKS = 6  # small multiples per run; the rest are in the per-task table
MIN_ROWS = 3  # a panel's height in rows at least, so bars keep one thickness across panels
COLOURS = {"planning": "#8fb3d9", "implementation": "#7aa874", "verification": "#f2b36f", "lead": "#5f5f5f",
           "lead blocked": "#e4e4e4", "after the lead submitted": "none", "?": "#b0b0b0"}
DIRECTION_COLOURS = {"worker→lead": "#8fb3d9", "worker→worker": "#9b7bb8", "lead→worker": "#5f5f5f",
                     "other": "#d4c36a"}
NAMES = {"lead": "lead working", "lead blocked": "lead blocked on workers",
         "after the lead submitted": "lost: after the lead submitted"}


def timeline_tasks(run: TeamRun, limit: int = MAX_TIMELINE_TASKS) -> tuple[list[TeamTask], int]:
    """The tasks a run's timeline shows (those that delegated first, then by instance id) and how many could be."""
    drawable = [t for t in run.tasks if t.delegations is not None or t.waits is not None]
    drawable.sort(key=lambda t: (not t.delegations, t.instance_id))
    return drawable[:limit], len(drawable)


def timeline_figure(run: TeamRun, limit: int = MAX_TIMELINE_TASKS) -> tuple[bytes, str] | None:
    """Lead and workers over time, one panel per task (at most ``limit``), one row per agent, bars from start to
    end coloured by stage; the lead's blocked intervals pale, messages sent as ticks, the lead's submit as a line.
    Returns (PNG, what the caption should say about the tasks left out)."""
    shown, drawable = timeline_tasks(run, limit)
    if not shown:
        return None
    columns = 1 if len(shown) == 1 else 2
    grid_rows = math.ceil(len(shown) / columns)
    agents = [max(MIN_ROWS, len(timeline(t))) for t in shown]
    height = sum(max(agents[i:i + columns]) * 0.42 + 1.3 for i in range(0, len(shown), columns))
    figure = new_figure(7.0 * columns, min(max(height, 3.0), 22.0))
    used: dict[str, None] = {}
    for number, task in enumerate(shown, start=1):
        axes = figure.add_subplot(grid_rows, columns, number)
        rows = timeline(task)
        for y, row in enumerate(rows):
            for bar in row.bars:
                kind = bar.kind
                if kind == "after the lead submitted":
                    axes.barh(y, bar.end - bar.start, left=bar.start, height=0.62, color="none", hatch="///",
                              edgecolor="#c9545d", linewidth=0.8, zorder=3)
                else:
                    thin = kind == "lead blocked"
                    axes.barh(y, max(bar.end - bar.start, task.end * 0.004), left=bar.start,
                              height=0.3 if thin else 0.62, color=COLOURS.get(kind, COLOURS["?"]),
                              edgecolor="#999999" if thin else "white", linewidth=0.6, zorder=2 if not thin else 3,
                              hatch=".." if bar.open_end else None)
                used[kind] = None
            for time, malformed in row.marks:  # on the sender's row, over its bar
                axes.plot([time], [y], marker="X" if malformed else "o", markersize=6 if malformed else 5,
                          markerfacecolor="#c9545d" if malformed else "white", markeredgecolor="#222222",
                          markeredgewidth=0.8, zorder=5, linestyle="none")
                used["malformed message" if malformed else "message sent"] = None
        lost = bool(task.lost_work)
        if task.lead_seconds:
            axes.axvline(task.lead_seconds, color="#c9545d" if lost else "#333333", linestyle="--", linewidth=1.0)
            used["lead submitted (lost work)" if lost else "lead ended"] = None
        axes.set_yticks(range(len(rows)), [row.agent for row in rows], fontsize=8)
        axes.set_ylim(max(len(rows), MIN_ROWS) - 0.4, -0.6)  # the lead on top
        axes.set_xlim(0, task.end * 1.03 or 1.0)
        axes.set_xlabel("seconds from the team's start", fontsize=8)
        axes.tick_params(axis="x", labelsize=8)
        total = task.total
        axes.set_title(f"{short_id(task.instance_id)} ({total if total is not None else '?'} delegation"
                       f"{'s' if total != 1 else ''})", fontsize=9)
        axes.grid(axis="x", alpha=0.3)
    _legend(figure, used, 3 if columns == 1 else 4)
    figure.suptitle(f"lead and workers over time\n{elided(run.run_id, 90)}", fontsize=10)
    left_out = drawable - len(shown)
    note = (f" ({len(shown)} of {drawable} tasks with team records: those that delegated first, then by "
            "instance id; every task is in the per-task table)" if left_out else "")
    return png_bytes(figure), note


def _legend(figure, used: dict[str, None], columns: int) -> None:
    from matplotlib.artist import Artist
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Artist] = []
    for kind in used:
        if kind in ("message sent", "malformed message"):
            malformed = kind == "malformed message"
            handles.append(Line2D([], [], marker="X" if malformed else "o", linestyle="none",
                                  markerfacecolor="#c9545d" if malformed else "white", markeredgecolor="#222222",
                                  label=kind if malformed else "message sent (sender's row)"))
        elif kind.startswith("lead submitted") or kind == "lead ended":
            handles.append(Line2D([], [], linestyle="--", color="#c9545d" if "lost" in kind else "#333333",
                                  label=kind))
        elif kind == "after the lead submitted":
            handles.append(Patch(facecolor="none", hatch="///", edgecolor="#c9545d", label=NAMES[kind]))
        else:
            handles.append(Patch(facecolor=COLOURS.get(kind, COLOURS["?"]), edgecolor="#999999",
                                 label=NAMES.get(kind, f"worker: {kind}")))
    order = {name: i for i, name in enumerate(["lead", "lead blocked", *STAGES])}
    handles.sort(key=lambda h: order.get(next((k for k, v in NAMES.items() if v == h.get_label()),
                                             str(h.get_label()).removeprefix("worker: ")), 99))
    figure.legend(handles=handles, loc="outside lower center", ncols=min(columns, len(handles)), fontsize=8)


def summary_data(runs: list[TeamRun]) -> dict:
    """The numbers the summary figure draws: per run, delegations per task by stage, messages per task by
    direction and the malformed share, the lead's blocked share; per lead model, delegations per task and the
    share of tasks with any delegation."""
    summaries = [summarise(run.run_id, run.tasks) for run in runs]
    return {
        "runs": [s.name for s in summaries],
        "stages": {stage: [s.by_stage_mean[stage] for s in summaries] for stage in STAGES},
        "directions": {d: [s.directions.get(d, 0) / s.message_tasks if s.message_tasks else None for s in summaries]
                       for d in (*DIRECTIONS, OTHER)},
        "malformed": [s.malformed_share for s in summaries],
        "blocked_share": [s.blocked_share for s in summaries],
        "lead_models": [(s.name, s.delegations_mean, s.any_delegation, s.tasks) for s in by_lead_model(runs)],
    }



def summary_figure(runs: list[TeamRun]) -> bytes | None:
    data = summary_data(runs)
    if not data["runs"]:
        return None
    names = distinct_labels(data["runs"])
    positions = list(range(len(names)))
    figure = new_figure(max(11.0, 3.2 * 4), 4.6)
    panels = figure.subplots(1, 4)

    axes = panels[0]
    bottom = [0.0] * len(names)
    for stage in STAGES:
        values = [v or 0.0 for v in data["stages"][stage]]
        axes.bar(positions, values, bottom=bottom, color=COLOURS[stage], label=stage, width=0.6)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    _na_marks(axes, positions, [v is None for v in data["stages"]["planning"]])
    _finish(axes, names, "delegations per task by stage", "delegations per task (mean)", max(bottom, default=0))

    axes = panels[1]
    bottom = [0.0] * len(names)
    shown_directions = [d for d in (*DIRECTIONS, OTHER) if d != OTHER or any(data["directions"][OTHER])]
    for direction in shown_directions:
        values = [v or 0.0 for v in data["directions"][direction]]
        axes.bar(positions, values, bottom=bottom, color=DIRECTION_COLOURS[direction], label=direction, width=0.6)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    top = max(bottom, default=0)
    columns = zip(bottom, data["malformed"], data["directions"]["worker→lead"], strict=True)
    for x, (height, share, per_task) in enumerate(columns):
        label = f"{share:.0%}" if share is not None else "none" if per_task is not None else None
        if label:
            axes.annotate(label, (x, height), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=7,
                          color="#c9545d" if share else "#555555")
    _na_marks(axes, positions, [v is None for v in data["directions"]["worker→lead"]])
    _finish(axes, names, "messages by direction (on top: % malformed)", "messages per task (mean)", top)

    axes = panels[2]
    shares = data["blocked_share"]
    axes.bar(positions, [v or 0.0 for v in shares], color=COLOURS["lead"], width=0.6)
    for x, share in enumerate(shares):
        if share is not None:
            axes.annotate(f"{share:.0%}", (x, share), textcoords="offset points", xytext=(0, 3), ha="center",
                          fontsize=8)
    _na_marks(axes, positions, [v is None for v in shares])
    _finish(axes, names, "lead blocked on workers", "share of the lead's wall time", 1.0, legend=False)
    axes.set_ylim(0, 1.1)
    axes.yaxis.set_major_formatter("{x:.0%}")

    axes = panels[3]
    models = data["lead_models"]
    model_names = [elided(name, 30) for name, *_ in models]
    values = [mean or 0.0 for _, mean, _, _ in models]
    axes.bar(range(len(models)), values, color="#c9545d", width=0.6)
    for x, (_, mean, share, tasks) in enumerate(models):
        label = "n/a" if share is None else f"{share:.0%} of {tasks}\ndelegate"
        axes.annotate(label, (x, mean or 0.0), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=7)
    _finish(axes, model_names, "delegation by lead model", "delegations per task (mean)", max(values, default=0),
            legend=False)
    title = data["runs"][0] if len(data["runs"]) == 1 else f"{len(data['runs'])} runs, labelled by what sets them apart"
    figure.suptitle(f"team analysis: {elided(title, 110)}", fontsize=11)
    return png_bytes(figure)


def _na_marks(axes, positions: list[int], missing: list[bool]) -> None:
    for x, gone in zip(positions, missing, strict=True):
        if gone:
            axes.annotate("n/a", (x, 0), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8,
                          color="#777777")


def _finish(axes, names: list[str], title: str, ylabel: str, top: float, legend: bool = True) -> None:
    axes.set_xticks(range(len(names)), names, rotation=30 if len(names) > 2 else 0, ha="right" if len(names) > 2
                    else "center", fontsize=8)
    axes.set_xlim(-0.7, len(names) - 0.3)
    axes.set_ylim(0, (top or 1.0) * (1.75 if legend else 1.25))  # room for the legend above the bars
    axes.set_title(title, fontsize=10)
    axes.set_ylabel(ylabel, fontsize=8)
    axes.grid(axis="y", alpha=0.3)
    if legend:
        axes.legend(fontsize=7, loc="upper left")
