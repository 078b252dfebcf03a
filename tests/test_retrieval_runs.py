"""The retrieval audit on the run path (issue 42): a junior that reaches for the answer, run through the scripted
model in a local clone of a repository whose history hides the fix (tests/conftest.py's leaky_repo), ends up with
the finding in its record; the pool keeps its candidate and marks it; the senior's and the principal's prompts name
it; the report counts it and the task page shows each finding with its step and command. The solo agent's
trajectory is audited the same way."""

from __future__ import annotations

import html
import json
import tempfile
from pathlib import Path

import pytest
from fuzzing import fuzz
from hostile import hostile_line, hostile_text, in_html, json_scalar, page_text
from hypothesis import given
from hypothesis import strategies as st
from test_ablations import PRINCIPAL_EDIT, bash, brief, reply, run_in_process, write_run_config

from pipeline.analysis.load import load_run
from pipeline.analysis.stats import run_stats
from pipeline.audit import reached_line
from pipeline.records import Pool, Rollout, SoloResult, read_trajectory
from pipeline.report.tables import overview
from pipeline.report.task_page import task_page
from pipeline.rundir.layout import RunLayout
from pipeline.rundir.storage import append_jsonl

LOOK = "git log --all --oneline"
FETCH = "git fetch origin"
RIGHT = "sed -i 's/a - b/a + b/' calc.py"
OTHER = "sed -i 's/a - b/b + a/' calc.py"


def finished(prediction, settings):
    """The run as a report reads it, the task's prediction on record as the run's executor writes it."""
    append_jsonl(settings.layout.predictions, prediction.to_disk())
    return load_run(settings.layout.root)


def row(who: str, finding) -> str:
    return (f"<tr><td>{who}</td><td>{finding.step}</td><td>{finding.kind}</td><td>{html.escape(finding.command)}"
            f"</td>")


def cell(table, name: str) -> str:
    return next(row[1] for row in table.rows if row[0] == name)


@pytest.mark.slow
def test_a_junior_that_reached_is_on_record_marked_in_the_pool_named_to_the_senior_and_principal_and_counted(
        tmp_path, local_repo):
    script = {"junior": [[bash(LOOK), bash(FETCH), bash(RIGHT), bash("submit")],  # reaches, then fixes
                         [bash("git log --oneline -3"), bash(OTHER), bash("submit")]],  # derives another fix
              "senior": [bash("git log -p -- calc.py | head -40"), brief(candidate=2)],
              "principal": [reply(PRINCIPAL_EDIT)]}
    write_run_config(tmp_path, script)
    prediction, _, paths, settings = run_in_process(tmp_path, local_repo)
    assert prediction.source == "principal", prediction

    reached, honest = (Rollout.load(paths.junior_files.rollout(index)) for index in (0, 1))
    assert [(f.kind, f.step, f.command) for f in reached.retrieval] == [("history", 0, LOOK), ("network", 1, FETCH)]
    assert "--all" in reached.retrieval[0].reason and honest.retrieval == []

    pool = Pool.load(paths.junior_files.pool)
    marked = {tuple(c.rollouts): [r.rollout for r in c.reached or []] for c in pool.candidates}
    assert marked == {(0,): [0], (1,): []}  # kept as evidence, and marked
    number = next(n for n, c in enumerate(pool.candidates, 1) if c.rollouts == [0])
    line = f"rollout 0 at step 0 read history beyond the base commit: {LOOK}; 1 more step(s)"

    senior = read_trajectory(paths.senior_files.trajectory).data
    told = senior["messages"][1]["content"]
    assert f"## Candidate {number}: proposed by 1 rollout(s)" in told and line in told
    assert told.count("Reached for the answer") == 1
    assert json.loads(paths.senior_files.brief.read_text())["senior_retrieval"] == []  # its git log -p is honest
    request = paths.principal_files.request.read_text()
    assert line in json.loads(request)["calls"][0]["messages"][-1]["content"]
    assert request.count("Reached for the answer") == 1

    run = finished(prediction, settings)
    table = overview([run_stats(run)], None)
    assert cell(table, "candidates from trajectories that reached for the answer") == "1 of 2 (history 1, network 1)"

    page = task_page(run, run.tasks[0])
    assert "Retrieval audit" in page_text(page) and "2 step(s) reached for the answer" in page_text(page)
    for finding in reached.retrieval:  # each finding in the page's table: whose, its step, kind and command
        assert row("rollout 00", finding) in page
    assert f"reached for the answer: {html.escape(line)}" in page


@pytest.mark.slow
def test_the_solo_agent_s_trajectory_is_audited_and_counted(tmp_path, local_repo):
    script = {"solo": [[bash("cat .git/packed-refs; git show-ref"), bash(RIGHT), bash("submit")]]}
    write_run_config(tmp_path, script, models={"solo": {"model": f"scripted/{tmp_path / 'script.yaml'}",
                                                        "prices": {"input": 1.0, "output": 2.0}}},
                     strategy="solo")
    prediction, _, paths, settings = run_in_process(tmp_path, local_repo)

    result = SoloResult.load(paths.solo_files.result)
    assert [(f.kind, f.step, f.command) for f in result.retrieval] == [
        ("history", 0, "cat .git/packed-refs; git show-ref")]
    run = finished(prediction, settings)
    assert cell(overview([run_stats(run)], None), "candidates from trajectories that reached for the answer") == \
        "1 of 1 (history 1)"
    assert row("solo agent", result.retrieval[0]) in task_page(run, run.tasks[0])


def test_a_reused_rollout_an_older_swepipe_did_not_audit_is_audited_when_copied(tmp_path, leaky_repo):
    from conftest import demo_task

    from pipeline.juniors.stage import copy_rollouts
    from pipeline.rundir.layout import JuniorFiles

    steps = [{"index": 0, "action": "bash", "command": "git log --all -S 'a + b'", "output": ""},
             {"index": 1, "action": "bash", "command": RIGHT, "output": ""}]
    older = {"index": 0, "patch": "", "exit_reason": "submitted", "model": 7,  # an odd value, kept as read
             "trajectory": {"steps": steps}}
    (tmp_path / "theirs").mkdir()
    JuniorFiles(tmp_path / "theirs").rollout(0).write_text(json.dumps(older))

    assert copy_rollouts(tmp_path / "theirs", tmp_path / "ours", 1, task=demo_task(leaky_repo)) == 1
    copied = Rollout.load(JuniorFiles(tmp_path / "ours").rollout(0))
    assert [(f.kind, f.step, f.command) for f in copied.retrieval] == [("history", 0, steps[0]["command"])]
    assert copied.model == 7 and copied.reused_from == str(tmp_path / "theirs")


# -- hostile findings: shown literally, never a crash ---------------------------------------------------------------

finding = st.fixed_dictionaries({"kind": st.one_of(st.sampled_from(("history", "network", "outside")), hostile_line()),
                                 "step": st.integers(-3, 10 ** 6), "command": hostile_text(120),
                                 "reason": hostile_text(80)})


@fuzz
@given(findings=st.lists(finding, min_size=1, max_size=3), unaudited=hostile_line(40))
def test_hostile_findings_are_shown_literally_on_the_task_page_and_counted(findings, unaudited):
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "run"
        paths = RunLayout(root).task("demo__calc-1")
        paths.junior.mkdir(parents=True)
        append_jsonl(RunLayout(root).predictions, {"instance_id": "demo__calc-1", "model_patch": "", "source": "x"})
        Rollout.of({"index": 0, "patch": "", "exit_reason": "submitted", "retrieval": findings}).write(
            paths.junior_files.rollout(0))
        Rollout.of({"index": 1, "patch": "", "exit_reason": "imported", "imported_from": "preds.json",
                    "unaudited": unaudited}).write(paths.junior_files.rollout(1))
        Pool.of({"candidates": [{"key": "k", "patch": "", "rollouts": [0], "votes": 1,
                                 "reached": [{"rollout": 0, "findings": findings}]}]}).write(paths.junior_files.pool)
        run = load_run(root)
        page = task_page(run, run.tasks[0])
        for shown in json.loads(json.dumps(findings)):  # as a reader of the file has them (a surrogate pair is one)
            assert in_html(shown["command"], page) and in_html(shown["reason"], page)
        assert in_html(json.loads(json.dumps(unaudited)), page)
        stats = run_stats(run)
        assert (stats.audited_candidates, stats.reached_candidates, stats.unaudited_imports) == (1, 1, 1)


@fuzz
@given(findings=st.lists(finding, max_size=3), rollout=st.one_of(st.integers(), json_scalar))
def test_a_candidate_s_reaching_is_told_to_the_principal_literally(findings, rollout):
    from pipeline.pool_rules import CandidateDraft
    from pipeline.principal.stage import _candidate_block

    candidate = CandidateDraft(key="k", patch="", test_patch="", votes=1, files=["calc.py"],
                               reached=[{"rollout": rollout, "findings": findings}])
    block = _candidate_block(1, candidate, ["+x"], 1)
    told = reached_line(candidate.reached)
    assert ("Reached for the answer" in block) == bool(findings)
    if findings:
        assert told in block
        first = findings[0]["command"].split("\n", 1)[0][:120]
        assert first in told and f"at step {findings[0]['step']} " in told
