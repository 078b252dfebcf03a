"""The team analysis as the report shows it: each number of a summary as a table cell (n/a, and why, where a
record is missing), and the three team tables built from them."""

from __future__ import annotations

from pipeline.analysis import table as tab
from pipeline.analysis.team.records import DIRECTIONS, OTHER, STAGES, TeamRun
from pipeline.analysis.team.summaries import TeamSummary, by_lead_model, summarise
from pipeline.text.printable import short_id


def setup_cell(run: TeamRun) -> str:
    """The run's team settings: mode, size, submit guard, directory, lead prompt."""
    team = run.team_config
    if not team:
        return "n/a (no config.yaml)"
    sizing = team.get("sizing") or "lead"
    size = team.get("size") or (3 if sizing == "fixed" else 16)
    size_text = f"{size} workers (fixed)" if sizing == "fixed" else f"up to {size} workers (lead sizes)"
    on = {True: "on", False: "off"}
    return (f"{team.get('mode') or 'blocking'}, {size_text}, submit guard {on[run.guard]}, "
            f"directory {on[team.get('directory', True) is not False]}, {team.get('lead_prompt') or 'minimal'} prompt")


def delegations_cell(s: TeamSummary) -> str:
    if s.delegations_mean is None:
        return f"{tab.NA} (no delegation record)"
    unknown = f", {s.tasks - s.counted} task(s) without a record" if s.counted != s.tasks else ""
    return f"{s.delegations_mean:.2f} ({s.delegations_median:g}){unknown}"


def stages_cell(s: TeamSummary) -> str:
    if s.delegations_mean is None:
        return tab.NA
    return " / ".join(f"{s.by_stage_mean[stage]:.2f}" for stage in STAGES)


def any_cell(s: TeamSummary) -> str:
    if s.any_delegation is None:
        return tab.NA
    return f"{round(s.any_delegation * s.counted)}/{s.counted} = {s.any_delegation:.0%}"


def directions_cell(s: TeamSummary) -> str:
    if not s.message_tasks:
        return f"{tab.NA} (no messages.json)"
    shown = " / ".join(str(s.directions.get(d, 0)) for d in DIRECTIONS)
    other = f" (+{s.directions[OTHER]} other)" if s.directions.get(OTHER) else ""
    return f"{shown}{other}; {s.messages / s.message_tasks:.2f} per task"


def malformed_cell(s: TeamSummary) -> str:
    if not s.message_tasks:
        return tab.NA
    if not s.messages:
        return "no message"
    return f"{s.malformed}/{s.messages} = {s.malformed_share:.0%}"


def blocked_cell(s: TeamSummary) -> str:
    if not s.wait_tasks:
        return f"{tab.NA} (no lead_waits.json)"
    of = f" over {s.wait_tasks} of {s.tasks} tasks" if s.wait_tasks != s.tasks else ""
    return f"{tab.seconds(s.blocked_mean)} ({tab.seconds(s.blocked_median)}){of}"


def blocked_share_cell(s: TeamSummary) -> str:
    if s.blocked_share is None:
        return tab.NA if s.wait_tasks else f"{tab.NA} (no lead_waits.json)"
    return f"{s.blocked_share:.1%}"


def lost_cell(s: TeamSummary, guard: bool | None = None) -> str:
    if not s.lost_tasks and guard:
        return "none (submit guard on)"
    if s.lost_tasks is None:
        return f"{tab.NA} (not recorded)"
    if not s.lost_tasks:
        return f"none in {s.lost_recorded} task(s)"
    return (f"{s.lost_tasks}/{s.lost_recorded} tasks: {s.lost_workers} worker(s), {s.lost_commands} command(s), "
            f"{s.lost_files} file(s) changed after the submit")


def team_overview(runs: list[TeamRun]):
    """Delegation, messages, the blocked lead and lost work, one column per team run."""
    summaries = [summarise(run.run_id, run.tasks) for run in runs]
    models = [" / ".join(dict.fromkeys(f"{t.lead_model} / {t.worker_model}" for t in run.tasks)) for run in runs]
    rows = [["lead / worker model", *models],
            ["team", *(setup_cell(run) for run in runs)],
            ["team tasks", *(str(s.tasks) for s in summaries)],
            ["delegations/task mean (median)", *(delegations_cell(s) for s in summaries)],
            ["  planning / implementation / verification per task", *(stages_cell(s) for s in summaries)],
            ["tasks with any delegation", *(any_cell(s) for s in summaries)],
            ["messages worker→lead / worker→worker / lead→worker", *(directions_cell(s) for s in summaries)],
            ["malformed messages", *(malformed_cell(s) for s in summaries)],
            ["lead blocked on workers/task mean (median)", *(blocked_cell(s) for s in summaries)],
            ["  share of the lead's wall time", *(blocked_share_cell(s) for s in summaries)],
            ["lost work (lead submitted while workers ran)", *(lost_cell(s, run.guard)
                                                              for s, run in zip(summaries, runs, strict=True))]]
    notes = ["From each task's team/ records: delegations.json (a delegation per worker started), messages.json "
             "(a message to 'all' counts once per recipient; malformed: a message action the harness could not "
             "read), lead_waits.json (the intervals the lead was blocked waiting on workers: a blocking lead, or "
             "a wait), the lead's trajectory (its wall time) and the prediction's lost_work.",
             "Blocked share: the blocked seconds over the lead's wall time, summed over the tasks with both. "
             "Lost work: with the submit guard off, workers still running when the lead submitted; their commands "
             "and the files they changed after the submit are not in the prediction. n/a: the run kept no such "
             "record (runs from before it was written)."]
    return tab.Table("Team: delegation, messages, the lead's waits", ["", *(run.run_id for run in runs)], rows, notes)


def lead_model_table(runs: list[TeamRun]):
    """How often each lead model delegates, across the runs given."""
    rows = []
    for s in by_lead_model(runs):
        rows.append([s.name, ", ".join(s.runs), str(s.tasks), delegations_cell(s), stages_cell(s), any_cell(s),
                     blocked_share_cell(s)])
    return tab.Table("Team: delegation by lead model", ["lead model", "runs", "team tasks",
                                                        "delegations/task mean (median)",
                                                        "planning / impl. / verif. per task",
                                                        "tasks with any delegation", "lead blocked share"], rows,
                     ["Every team task of the runs given, grouped by the lead's model (the prediction's models, else "
                      "the run's config)."])


def team_by_task(run: TeamRun):
    """One row per team task of ``run``."""
    rows = []
    for t in run.tasks:
        counts = ([str(t.counts.get(stage, 0)) for stage in STAGES] + [str(t.total)] if t.counts is not None
                  else [tab.NA] * 4)
        directions = t.directions()
        messages = " / ".join(str(directions.get(d, 0)) for d in DIRECTIONS) if directions is not None else tab.NA
        malformed = (f"{t.malformed}/{len(t.messages)}" if t.messages else "0" if t.messages is not None
                     else tab.NA)
        blocked = tab.NA if t.blocked is None else tab.seconds(t.blocked) + (
            f" ({t.blocked_share:.0%})" if t.blocked_share is not None else "")
        if t.lost_work is None:
            lost = "guard on" if t.guard else tab.NA
        elif not t.lost_work:
            lost = "none"
        else:
            lost = "; ".join(f"{w.worker}: {w.commands} cmd, {len(w.files)} file(s)" for w in t.lost_work)
        rows.append([short_id(t.instance_id), t.lead_model, *counts, messages, malformed, blocked, lost])
    return tab.Table(f"Team tasks of {run.run_id}",
                     ["instance", "lead model", "planning", "implementation", "verification", "delegations",
                      "messages w→l / w→w / l→w", "malformed", "lead blocked (share)", "lost work"], rows)
