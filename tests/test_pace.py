"""A run's pace: done of total, the rate, and the time and dollars left at it, from this session's tasks only."""

from __future__ import annotations

import math

import pytest

from pipeline.run.pace import Pace, duration


def test_before_a_task_of_this_session_ends_only_the_count_is_said():
    pace = Pace(total=20, done_before=5, started=100.0)
    assert pace.line(now=4000.0) == "5/20 done"


def test_the_rate_and_what_is_left_come_from_this_session_s_tasks():
    pace = Pace(total=20, done_before=5, started=0.0)  # the 5 of an earlier session took no time of this one
    pace.add(0.10)
    pace.add(0.30)
    # 2 tasks in 30 min: 4 an hour; 13 left take 3 h 15 min and 13 x $0.20
    assert pace.line(now=1800.0) == "7/20 done, 4 tasks/h, about 3 h 15 min and $2.60 left at this rate"


def test_a_finished_run_says_its_rate_and_nothing_left():
    pace = Pace(total=2, done_before=0, started=0.0)
    pace.add(1.0)
    pace.add(1.0)
    assert pace.line(now=60.0) == "2/2 done, 120 tasks/h"


@pytest.mark.parametrize("cost", [None, "0.5", math.nan, math.inf, -1.0, True, {"total": 1}])
def test_a_cost_that_is_no_finite_dollar_amount_counts_as_none(cost):
    pace = Pace(total=3, done_before=0, started=0.0)
    pace.add(cost)
    assert pace.spent == 0.0
    assert pace.line(now=600.0) == "1/3 done, 6 tasks/h, about 20 min left at this rate"  # no dollars guessed


@pytest.mark.parametrize(("seconds", "said"), [(0, "under a minute"), (29, "under a minute"), (90, "2 min"),
                                               (3600, "1 h"), (3 * 3600 + 300, "3 h 5 min"),
                                               (2 * 86400 + 4 * 3600, "2 d 4 h"), (86400, "1 d")])
def test_durations_are_said_to_the_minute(seconds, said):
    assert duration(seconds) == said


def test_each_finished_task_s_log_line_and_the_progress_line_say_the_pace(tmp_path):
    from types import SimpleNamespace

    from pipeline.records import Prediction
    from pipeline.run.bookkeeping import plan, record_prediction
    from pipeline.rundir.layout import RunLayout

    layout = RunLayout(tmp_path / "run")
    layout.root.mkdir()
    layout.predictions.write_text('{"instance_id": "a", "model_patch": "", "cost": {"total": 9.0}}\n')
    run = SimpleNamespace(roles=("junior",), layout=layout, evaluation=None)
    tasks = [SimpleNamespace(instance_id=name) for name in ("a", "b", "c")]
    summary, todo = plan(tasks, run)
    assert [t.instance_id for t in todo] == ["b", "c"] and summary.pace.line() == "1/3 done"
    lines: list[str] = []
    record_prediction(summary, run, Prediction.of({"instance_id": "b", "model_patch": "", "source": "none",
                                                   "cost": {"junior": 0.25, "total": 0.25}}), lines.append)
    [line] = lines
    assert line.startswith("task b: source none | junior $0.2500") and " | 2/3 done, " in line
    assert line.endswith(" and $0.25 left at this rate")  # the earlier session's $9 is not this session's rate
    assert "tasks/h" in summary.line() and "done" not in summary.line()  # the bar counts done of total itself
