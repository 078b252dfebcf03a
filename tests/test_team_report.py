"""The report's team analysis over hand-made team run directories (the shapes pipeline/team/roster.py writes):
delegations by stage, messages by direction, the lead blocked, lost work, by lead model, the timeline's data."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.analysis.load import load_run
from pipeline.analysis.team import (
    by_lead_model,
    lead_model_table,
    summarise,
    team_by_task,
    team_overview,
    team_runs,
    timeline,
)
from pipeline.report.build import build_report, write_report
from pipeline.report.team_figures import MAX_TIMELINE_TASKS, summary_data, timeline_figure, timeline_tasks
from pipeline.rundir.layout import ReportFiles

T0 = 1_796_000_000.0  # the team's start, Unix seconds


def worker(name: str, stage: str, sessions: list[tuple[float, float | None]], state: str = "collected") -> dict:
    """A delegations.json record: sessions as (start, end) seconds from the team's start, as workers.py writes."""
    return {"worker": name, "by": "lead", "stage": stage, "task": f"{stage} task of {name}", "writable": ["."],
            "lead_step": 0, "delegated_at": T0 + sessions[0][0], "started_at": T0 + sessions[0][0],
            "ended_at": None if sessions[-1][1] is None else T0 + sessions[-1][1], "offset": sessions[0][0],
            "sessions": [{"lead_step": 0, "started": start, "started_at": T0 + start, "instructions": None,
                          **({} if end is None else {"ended": end, "ended_at": T0 + end, "exit_reason": "submitted"})}
                         for start, end in sessions],
            "state": state, "exit_reason": "submitted", "report": "done"}


def message(sender: str, to: str | None, at: float, malformed: bool = False) -> dict:
    return {"id": 0, "from": sender, "to": to, "text": "hi", "sent": at, "time": T0 + at, "delivered": None,
            "malformed": malformed, **({"problem": "not valid YAML"} if malformed else {})}


def make_team_run(root: Path, name: str, tasks: list[dict], lead: str = "big-lead", mode: str = "blocking",
                  guard: bool = True, config: bool = True) -> Path:
    """A team run directory. A task: {"id", "workers" (delegations.json records, or None for no file),
    "messages" (or None), "waits" ([(start, end, workers)] from the team's start, or None for no file),
    "lead_seconds", "lost_work" (the prediction's; absent when not given), "eval", "cost"}."""
    run = root / name
    (run / "tasks").mkdir(parents=True)
    if config:
        (run / "config.yaml").write_text(yaml.safe_dump({
            "strategy": "team", "models": {"lead": {"model": lead}, "worker": {"model": "small-worker"}},
            "team": {"mode": mode, "size": None, "sizing": "lead", "submit_guard": guard, "directory": True,
                     "lead_prompt": "minimal"}}))
    lines = []
    for task in tasks:
        team = run / "tasks" / task["id"] / "team"
        team.mkdir(parents=True)
        records = task.get("workers")
        if records is not None:
            (team / "delegations.json").write_text(json.dumps({"mode": mode, "started": T0, "delegations": records}))
        if task.get("messages") is not None:
            (team / "messages.json").write_text(json.dumps(task["messages"]))
        if task.get("waits") is not None:
            (team / "lead_waits.json").write_text(json.dumps(
                [{"start": T0 + s, "end": None if e is None else T0 + e, "workers": w} for s, e, w in task["waits"]]))
        if task.get("lead_seconds") is not None:
            (team / "lead.trajectory.json").write_text(json.dumps({"name": "lead", "started": T0 + 0.01,
                                                                   "seconds": task["lead_seconds"], "steps": []}))
        cost = task.get("cost", {"lead": 0.2, "worker": 0.1})
        prediction = {"instance_id": task["id"], "model_patch": "diff", "strategy": "team", "source": "team",
                      "error": None, "exit_reason": "submitted", "models": {"lead": lead, "worker": "small-worker"},
                      "cost": {**cost, "total": sum(cost.values())}, "seconds": {"team": 99.0},
                      "delegations": task.get("counts")}
        if "lost_work" in task:
            prediction["lost_work"] = task["lost_work"]
        if task.get("eval") is not None:
            (run / "tasks" / task["id"] / "eval").mkdir()
            (run / "tasks" / task["id"] / "eval" / "result.json").write_text(json.dumps(task["eval"]))
        lines.append(json.dumps(prediction))
    (run / "predictions.jsonl").write_text("\n".join(lines) + "\n")
    return run


BLOCKING = [
    {"id": "a", "lead_seconds": 100.0,
     "workers": [worker("worker-0", "planning", [(5, 30)]), worker("worker-1", "planning", [(5, 40)]),
                 worker("worker-2", "implementation", [(45, 70), (80, 90)])],  # resumed once
     "messages": [message("worker-0", "lead", 20), message("worker-0", "worker-1", 22),
                  message("lead", "worker-2", 50), message("worker-1", "lead", 25, malformed=True)],
     "waits": [(5, 40, ["worker-0", "worker-1"]), (45, 70, ["worker-2"]), (60, 65, ["worker-2"])]},  # overlap
    {"id": "b", "lead_seconds": 50.0, "workers": [], "messages": [], "waits": []},  # never delegated
    {"id": "c", "lead_seconds": 80.0,
     "workers": [worker("worker-0", "verification", [(10, 20)])],
     "messages": [message("lead", "worker-0", 12), message("worker-0", None, 15, malformed=True)],
     "waits": [(10, 20, ["worker-0"]), (30, None, ["worker-0"])]},  # a wait cut short: no end, not counted
]


def test_team_numbers_by_task_and_by_run(tmp_path):
    run = make_team_run(tmp_path, "blocking", BLOCKING)
    [team] = team_runs([load_run(run)])
    a, b, c = team.tasks
    assert a.counts == {"planning": 2, "implementation": 1, "verification": 0} and a.total == 3
    assert b.total == 0 and c.counts["verification"] == 1
    assert a.directions() == {"worker→lead": 2, "worker→worker": 1, "lead→worker": 1}
    assert (a.malformed, c.malformed) == (1, 1) and c.directions() == {"lead→worker": 1, "other": 1}
    assert a.blocked == pytest.approx(35 + 25) and a.blocked_share == pytest.approx(0.6)  # overlap once
    assert c.blocked == pytest.approx(10) and b.blocked == 0.0
    s = summarise("blocking", team.tasks)
    assert s.delegations_mean == pytest.approx(4 / 3) and s.delegations_median == 1
    assert s.by_stage_mean == pytest.approx({"planning": 2 / 3, "implementation": 1 / 3, "verification": 1 / 3})
    assert s.any_delegation == pytest.approx(2 / 3)
    assert s.messages == 6 and s.malformed == 2 and s.malformed_share == pytest.approx(1 / 3)
    assert s.blocked_mean == pytest.approx(70 / 3) and s.blocked_share == pytest.approx(70 / 230)
    table = team_overview([team])
    cells = {row[0]: row[1] for row in table.rows}
    assert cells["delegations/task mean (median)"] == "1.33 (1)"
    assert cells["  planning / implementation / verification per task"] == "0.67 / 0.33 / 0.33"
    assert cells["tasks with any delegation"] == "2/3 = 67%"
    assert cells["messages worker→lead / worker→worker / lead→worker"] == "2 / 1 / 2 (+1 other); 2.00 per task"
    assert cells["malformed messages"] == "2/6 = 33%"
    assert cells["lead blocked on workers/task mean (median)"] == "23.3 s (10.0 s)"
    assert cells["  share of the lead's wall time"] == "30.4%"
    assert cells["lost work (lead submitted while workers ran)"] == "none (submit guard on)"
    assert cells["team"] == ("blocking, up to 16 workers (lead sizes), submit guard on, directory on, minimal "
                             "prompt")
    rows = {row[0]: row for row in team_by_task(team).rows}
    assert rows["a"][2:] == ["2", "1", "0", "3", "2 / 1 / 1", "1/4", "60.0 s (60%)", "guard on"]
    assert rows["b"][2:] == ["0", "0", "0", "0", "0 / 0 / 0", "0", "0.0 s (0%)", "guard on"]


def test_lost_work_with_the_guard_off(tmp_path):
    lost = [{"worker": "worker-1", "commands": ["pytest -x", "sed -i s/a/b/ calc.py"], "files": ["calc.py"]}]
    tasks = [{"id": "a", "lead_seconds": 30.0, "mode": "async",
              "workers": [worker("worker-0", "implementation", [(2, 20)]),
                          worker("worker-1", "verification", [(3, 45)], state="stopped")],
              "messages": [], "waits": [], "lost_work": lost},
             {"id": "b", "lead_seconds": 30.0, "workers": [worker("worker-0", "planning", [(1, 10)])],
              "messages": [], "waits": [], "lost_work": []},
             {"id": "c", "lead_seconds": 30.0, "workers": [], "messages": [], "waits": [],
              "lost_work": {"worker-0": {"commands": ["ls"], "changed_files": ["x.py", "y.py"]}}}]  # another shape
    run = make_team_run(tmp_path, "async", tasks, mode="async", guard=False)
    [team] = team_runs([load_run(run)])
    a, b, c = team.tasks
    assert [(w.worker, w.commands, w.files) for w in a.lost_work] == [("worker-1", 2, ["calc.py"])]
    assert b.lost_work == [] and [(w.worker, w.commands, w.files) for w in c.lost_work] == [("worker-0", 1,
                                                                                             ["x.py", "y.py"])]
    cells = {row[0]: row[1] for row in team_overview([team]).rows}
    assert cells["lost work (lead submitted while workers ran)"] == ("2/3 tasks: 2 worker(s), 3 command(s), 3 file(s) "
                                                                     "changed after the submit")
    assert "submit guard off" in cells["team"] and cells["team"].startswith("async")
    rows = {row[0]: row[-1] for row in team_by_task(team).rows}
    assert rows == {"a": "worker-1: 2 cmd, 1 file(s)", "b": "none", "c": "worker-0: 1 cmd, 2 file(s)"}
    # The timeline marks what worker-1 did after the lead submitted at 30 s.
    bars = {row.agent: [(b.start, b.end, b.kind) for b in row.bars] for row in timeline(a)}
    assert bars["worker-1"] == [(3, 45, "verification"), (30, 45, "after the lead submitted")]
    assert bars["worker-0"] == [(2, 20, "implementation")]


def test_timeline_rows_bars_and_marks(tmp_path):
    run = make_team_run(tmp_path, "blocking", BLOCKING)
    [team] = team_runs([load_run(run)])
    rows = timeline(team.tasks[0])
    assert [row.agent for row in rows] == ["lead", "worker-0", "worker-1", "worker-2"]
    lead = [(b.start, b.end, b.kind) for b in rows[0].bars]
    assert lead == [(0, 100, "lead"), (5, 40, "lead blocked"), (45, 70, "lead blocked")]  # overlaps joined
    assert [(b.start, b.end, b.kind) for b in rows[3].bars] == [(45, 70, "implementation"), (80, 90, "implementation")]
    assert rows[1].marks == [(20, False), (22, False)] and rows[2].marks == [(25, True)]
    assert rows[0].marks == [(50, False)]
    # A worker still running when the record was written: drawn to the team's end, marked open.
    records = [worker("worker-0", "planning", [(5, None)], state="running")]
    open_run = make_team_run(tmp_path, "open", [{"id": "x", "lead_seconds": 40.0, "workers": records}])
    [bar] = timeline(team_runs([load_run(open_run)])[0].tasks[0])[1].bars
    assert (bar.start, bar.end, bar.open_end) == (5, 40, True)


def test_delegation_by_lead_model_across_runs(tmp_path):
    one = make_team_run(tmp_path, "one", BLOCKING, lead="gpt-big")
    two = make_team_run(tmp_path, "two", [{"id": "a", "lead_seconds": 10.0,
                                           "workers": [worker(f"worker-{i}", "implementation", [(1, 5)])
                                                       for i in range(5)], "messages": [], "waits": []}],
                        lead="claude-lead")
    three = make_team_run(tmp_path, "three", [{"id": "z", "lead_seconds": 10.0, "workers": [], "messages": [],
                                               "waits": []}], lead="gpt-big")
    runs = team_runs([load_run(p) for p in (one, two, three)])
    found = {s.name: s for s in by_lead_model(runs)}
    assert set(found) == {"gpt-big", "claude-lead"}
    assert found["gpt-big"].tasks == 4 and found["gpt-big"].runs == ["one", "three"]
    assert found["gpt-big"].delegations_mean == pytest.approx(4 / 4) and found["gpt-big"].any_delegation == 0.5
    assert found["claude-lead"].delegations_mean == 5 and found["claude-lead"].any_delegation == 1.0
    table = lead_model_table(runs)
    assert table.rows[0][:6] == ["gpt-big", "one, three", "4", "1.00 (0.5)", "0.50 / 0.25 / 0.25", "2/4 = 50%"]
    assert table.rows[1][:6] == ["claude-lead", "two", "1", "5.00 (5)", "0.00 / 5.00 / 0.00", "1/1 = 100%"]
    data = summary_data(runs)
    assert data["runs"] == ["one", "two", "three"]
    assert data["lead_models"] == [("gpt-big", 1.0, 0.5, 4), ("claude-lead", 5.0, 1.0, 1)]


def test_old_and_broken_records_show_n_a_not_zero(tmp_path):
    old = {"worker": "worker-0", "by": "lead", "stage": "planning", "task": "x", "writable": [], "lead_step": 0,
           "delegated_at": T0 + 3, "offset": 3.0, "sessions": [{"lead_step": 0, "started": 3.0, "ended": 9.0}],
           "state": "collected"}  # before start/end Unix times, malformed and lead_waits.json existed
    tasks = [{"id": "old", "workers": [old], "messages": [{"id": 0, "from": "worker-0", "to": "lead", "text": "t",
                                                           "sent": 4.0, "delivered": 5.0}]},
             {"id": "gone", "workers": None, "counts": {"planning": 0, "implementation": 2, "verification": 0}},
             {"id": "bent", "workers": []}]
    run = make_team_run(tmp_path, "old", tasks, config=False)
    (run / "tasks" / "gone" / "team" / "messages.json").write_text("{torn")
    (run / "tasks" / "bent" / "team" / "delegations.json").write_text('{"delegations": ["worker-0", 7]}')
    [team] = team_runs([load_run(run)])
    bent, gone, old_task = team.tasks  # sorted by instance id
    assert bent.delegations is None  # a record of the wrong shape is no record: n/a, not "no delegations"
    assert old_task.waits is None and old_task.blocked is None and old_task.lost_work is None
    assert old_task.lead_seconds == 99.0  # no trajectory: the prediction's team seconds
    assert [(s.start, s.end) for d in old_task.delegations for s in d.sessions] == [(3.0, 9.0)]
    assert old_task.directions() == {"worker→lead": 1} and old_task.malformed == 0
    assert gone.delegations is None and gone.counts == {"planning": 0, "implementation": 2, "verification": 0}
    assert gone.messages is None and gone.total == 2
    cells = {row[0]: row[1] for row in team_overview([team]).rows}
    assert cells["lead blocked on workers/task mean (median)"] == "n/a (no lead_waits.json)"
    assert cells["  share of the lead's wall time"] == "n/a (no lead_waits.json)"
    assert cells["malformed messages"] == "0/1 = 0%"
    assert cells["team"] == "n/a (no config.yaml)"
    assert cells["lost work (lead submitted while workers ran)"] == "none (submit guard on)"  # the old default
    rows = {row[0]: row for row in team_by_task(team).rows}
    assert rows["gone"][2:] == ["0", "2", "0", "2", "n/a", "n/a", "n/a", "guard on"]
    assert timeline_tasks(team)[1] == 1  # only the task with records is drawn


def test_a_run_without_team_tasks_has_no_team_analysis(tmp_path):
    from test_report import PIPELINE, make_run

    run = make_run(tmp_path, "pipe", PIPELINE, [{"id": "a", "cost": {"junior": 0.1}}])
    report = build_report([run], None)
    assert report.team == [] and not any(t.title.startswith("Team") for t in report.tables())
    assert not any(path.name.startswith("team") for path in report.figures(ReportFiles(run)))


@pytest.mark.slow
def test_report_files_hold_the_team_analysis_and_its_figures(tmp_path):
    many = [{"id": f"t{i:02d}", "lead_seconds": 60.0,
             "workers": [worker("worker-0", "planning", [(1, 20)])] if i % 2 else [], "messages": [], "waits": []}
            for i in range(MAX_TIMELINE_TASKS + 3)]
    blocking = make_team_run(tmp_path, "blocking", BLOCKING)
    crowded = make_team_run(tmp_path, "crowded", many)
    report = build_report([blocking, crowded], None)
    figures = {path.name: made for path, made in report.figures(ReportFiles(blocking)).items()}
    assert {"team-timeline-blocking.png", "team-timeline-crowded.png", "team.png"} <= set(figures)
    caption = figures["team-timeline-crowded.png"][0]
    assert f"{MAX_TIMELINE_TASKS} of {len(many)} tasks" in caption
    shown, drawable = timeline_tasks(report.team[1])
    assert drawable == len(many) and len(shown) == MAX_TIMELINE_TASKS
    assert [t.instance_id for t in shown[:4]] == ["t01", "t03", "t05", "t07"]  # those that delegated first
    assert "of" not in timeline_figure(report.team[0])[1]  # every task drawn: no note
    write_report(report, blocking)
    for name in ("team-timeline-blocking.png", "team-timeline-crowded.png", "team.png"):
        assert (blocking / "figures" / name).read_bytes().startswith(b"\x89PNG")
    markdown = (blocking / "report.md").read_text()
    assert "## Team: delegation, messages, the lead's waits" in markdown
    assert "## Team: delegation by lead model" in markdown and "## Team tasks of blocking" in markdown
    assert "| tasks with any delegation | 2/3 = 67% | 4/9 = 44% |" in markdown
    assert "(figures/team-timeline-blocking.png)" in markdown
    page = (blocking / "report.html").read_text()
    assert "Team tasks of crowded" in page and page.count('src="data:image/png;base64,') == len(figures)


def test_report_command_on_a_team_run(tmp_path):
    run = make_team_run(tmp_path, "blocking", BLOCKING)
    env = {"COLUMNS": "250", "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "MPLCONFIGDIR": str(tmp_path / "mpl"),
           "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "report", str(run), "--dataset",
                           str(tmp_path / "none.jsonl")], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Team: delegation, messages, the lead's waits" in done.stdout and "2/6 = 33%" in done.stdout
    assert (run / "figures" / "team-timeline-blocking.png").exists()


def test_runs_of_a_sweep_are_labelled_by_what_sets_them_apart():
    from pipeline.report.team_figures import distinct_labels

    cells = [f"team-s{size}-implementation-{mode}-lead_a-worker_b-minimal" for size in (1, 4) for mode in
             ("blocking", "async")]
    assert distinct_labels(cells) == ["s1 blocking", "s1 async", "s4 blocking", "s4 async"]
    assert distinct_labels(["only-one-run"]) == ["only-one-run"]
    assert distinct_labels(["a-b", "b-a"]) == ["a-b", "b-a"]  # same words: the ids themselves


def test_the_pareto_figure_names_a_sweeps_cells_shortly_and_coinciding_runs_once():
    """A sweep's cell ids are long and its blocking and async cells often land on the same point: each point gets
    one label, its runs one under another, named by what sets them apart (the figure was unreadable before)."""
    from types import SimpleNamespace

    from pipeline.report.figures import pareto, pareto_labels

    def cell(run_id: str, dollars: float, rate: float) -> SimpleNamespace:  # what the figure reads of RunStats
        return SimpleNamespace(run_id=run_id, strategies=["team"], variant="team", rate=rate, interval=(rate, rate),
                               dollars_per_task=dollars)

    names = [f"team-s{size}-implementation-{mode}-lead_script-worker_script-minimal" for size in (1, 2)
             for mode in ("blocking", "async")]
    solo = cell("solo-script-minimal", 0.0024, 0.0)
    shown = [solo, cell(names[0], 0.0096, 0.0), cell(names[1], 0.0096, 0.0), cell(names[2], 0.0144, 1.0),
             cell(names[3], 0.0144, 1.0)]
    labels, shortened = pareto_labels(shown, solo)
    assert labels == {(0.0024, 0.0): "solo-script-minimal (baseline)", (0.0096, 0.0): "s1 blocking\ns1 async",
                      (0.0144, 1.0): "s2 blocking\ns2 async"}
    assert shortened
    labels, shortened = pareto_labels([cell("pipe", 0.1, 0.5), cell("solo", 0.1, 0.5)], None)
    assert labels == {(0.1, 0.5): "pipe\nsolo"} and not shortened  # short ids stay whole
    assert pareto(shown, solo).startswith(b"\x89PNG")
