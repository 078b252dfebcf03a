"""Adaptive rollouts (juniors.schedule) and the skip rule (principal.skip_when), with the scripted model through
litellm in local clones (tests/local_opener.py): waves up to K stopping when the pool converges, every decision in
junior/pool.json, resume without new rollouts, and the top candidate submitted with no senior or principal call."""

import json
import subprocess
import sys

import pytest
import yaml
from conftest import demo_task
from test_ablations import PRINCIPAL_EDIT, brief, run_in_process, write_run_config

from pipeline.errors import SwepipeError
from pipeline.job import TaskJob
from pipeline.juniors.stage import junior_stage
from pipeline.models.budget import Budget
from pipeline.models.ledger import Ledger
from pipeline.pool_rules import CandidatePool
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import TaskPaths
from pipeline.settings.config import Juniors, Limits, PrincipalConfig, RunConfig, ScheduleConfig
from pipeline.settings.model_spec import ModelSpec

USAGE = {"prompt_tokens": 100, "completion_tokens": 10}


def bash(command: str) -> dict:
    return {"content": f"Next.\n```bash\n{command}\n```", "usage": USAGE}


SUBMIT = bash("submit")
FIX = [bash("sed -i 's/a - b/a + b/' calc.py"), SUBMIT]
OTHER = [bash("sed -i 's/a - b/b + a/' calc.py"), SUBMIT]
THIRD = [bash("sed -i 's/a - b/(a + b)/' calc.py"), SUBMIT]
TEST_ONLY = [bash("mkdir -p tests && printf 'from calc import add\\n\\ndef test_add():\\n    assert add(1, 2) == 3\\n'"
                  " > tests/test_calc.py"), SUBMIT]
NOTHING = [SUBMIT]  # submits without an edit
BROKEN = [{"error": "bad_request"}]  # the provider refuses the request: the rollout fails, no patch


def new_module(n: int) -> list[dict]:
    """A rollout whose candidate adds its own new module beside calc.py (a new file for the pool's union)."""
    return [bash(f"printf 'VALUE = {n}\\n' > helpers_{n}.py && sed -i 's/a - b/a + b/' calc.py"), SUBMIT]


def juniors_job(tmp_path, repo, scripts, *, k, schedule=None, run_id="sched", name="task"):
    script = tmp_path / f"{name}-script.yaml"
    if not script.exists():
        script.write_text(yaml.safe_dump({"junior": scripts}))
    config = RunConfig(models={"junior": ModelSpec(model=f"scripted/{script}", prices={"input": 1.0, "output": 2.0})},
                       juniors=Juniors(k=k, schedule=ScheduleConfig(**schedule) if schedule else ScheduleConfig()),
                       limits=Limits(max_steps=4), containers={"impl": "local_opener:open_local"})
    return TaskJob(task=demo_task(repo), config=config, paths=TaskPaths(tmp_path / name), run_id=run_id,
                   image_template="unused", budget=Budget("run").child("task", None))


def pool_json(job) -> dict:
    return json.loads((job.paths.junior / "pool.json").read_text())


def rollout_files(job) -> list[str]:
    return sorted(p.name for p in job.paths.junior.glob("rollout-*.json"))


def junior_agents(job) -> list[str]:
    return sorted({row.agent for row in Ledger.read(job.paths.ledger) if row.role == "junior"})


def test_a_schedule_that_converges_after_the_first_wave_runs_k0_rollouts_and_says_why(tmp_path, local_repo):
    job = juniors_job(tmp_path, local_repo, [FIX], k=8, schedule={"enabled": True, "first": 3, "wave": 2,
                                                                   "top_share": 0.6, "min_submitted": 3})
    records, pool = junior_stage(job)
    assert [r.index for r in records] == [0, 1, 2] and rollout_files(job) == [f"rollout-0{i}.json" for i in range(3)]
    assert [(r.seed, r.temperature) for r in records] == [(0, 0.0), (1, 1.0), (2, 0.5)]  # index-based, as K
    assert junior_agents(job) == ["rollout-00", "rollout-01", "rollout-02"]  # nothing else was started
    assert pool.rollouts == 3 and pool.candidates[0].votes == 3
    schedule = pool_json(job)["schedule"]
    assert (schedule["k"], schedule["rollouts_run"], schedule["stopped_early"], schedule["not_started"]) == (8, 3, True,
                                                                                                            5)
    [decision] = schedule["decisions"]
    assert (decision["wave"], decision["rollouts"], decision["decision"], decision["converged"]) == (1, 3, "stop", True)
    assert decision["rules"] == {"top_share": True, "no_new_files": None}
    assert (decision["submitted"], decision["top_submitted_votes"], decision["top_share"]) == (3, 3, 1.0)
    assert "3 of 3 submitted" in decision["reason"] and "no earlier wave" in decision["reason"]
    assert pool_json(job)["candidates"][0]["votes"] == 3  # the pool itself is the pool of the rollouts that ran


def test_a_schedule_that_does_not_converge_runs_waves_up_to_k(tmp_path, local_repo):
    job = juniors_job(tmp_path, local_repo, [new_module(n) for n in range(5)], k=5,
                      schedule={"enabled": True, "first": 2, "wave": 2, "top_share": 0.6, "min_submitted": 2})
    records, pool = junior_stage(job)
    assert len(records) == 5 and len(pool.candidates) == 5
    decisions = pool_json(job)["schedule"]["decisions"]
    assert [(d["wave"], d["rollouts"], d["decision"], d["converged"]) for d in decisions] == [
        (1, 2, "go on", False), (2, 4, "go on", False), (3, 5, "stop", False)]
    assert decisions[1]["new_files"] == ["helpers_2.py", "helpers_3.py"]
    assert decisions[1]["rules"] == {"top_share": False, "no_new_files": False}
    assert "all K=5 rollouts run" in decisions[2]["reason"]
    assert pool_json(job)["schedule"]["stopped_early"] is False
    assert junior_agents(job) == [f"rollout-0{i}" for i in range(5)]


def test_the_no_new_files_rule_stops_when_a_wave_adds_no_file(tmp_path, local_repo):
    # Three different fixes of calc.py: no agreement (rule a is off anyway), but the second wave touches no new file.
    job = juniors_job(tmp_path, local_repo, [FIX, OTHER, THIRD, OTHER], k=8,
                      schedule={"enabled": True, "first": 2, "wave": 2, "top_share": None, "no_new_files": True})
    records, pool = junior_stage(job)
    assert len(records) == 4 and rollout_files(job)[-1] == "rollout-03.json"
    first, second = pool_json(job)["schedule"]["decisions"]
    assert (first["decision"], first["rules"]["no_new_files"]) == ("go on", None)
    assert (second["decision"], second["converged"], second["rules"]) == ("stop", True, {"top_share": None,
                                                                                         "no_new_files": True})
    assert second["new_files"] == [] and second["files"] == ["calc.py"]
    assert "added no file" in second["reason"]


def test_rollouts_that_all_fail_never_count_as_agreement(tmp_path, local_repo):
    # No rollout leaves a candidate: nothing agrees (rule a), and a wave that proposed nothing adds no file without
    # saying anything about convergence (rule b), so the schedule runs to K.
    job = juniors_job(tmp_path, local_repo, [NOTHING, BROKEN], k=4,
                      schedule={"enabled": True, "first": 2, "wave": 2, "top_share": 0.5, "min_submitted": 1})
    records, pool = junior_stage(job)
    assert len(records) == 4 and pool.candidates == [] and {r.exit_reason for r in records} >= {"submitted"}
    decisions = pool_json(job)["schedule"]["decisions"]
    assert [(d["decision"], d["converged"]) for d in decisions] == [("go on", False), ("stop", False)]
    assert decisions[1]["rules"] == {"top_share": False, "no_new_files": False}
    assert "no rollout left a source candidate" in decisions[1]["reason"]
    assert "this wave left no source candidate" in decisions[1]["reason"]


def test_test_only_candidates_do_not_count_as_source_agreement(tmp_path, local_repo):
    # Two of three rollouts agree, but only on a test file: the one source candidate holds 1 of 3 submitted votes.
    job = juniors_job(tmp_path, local_repo, [FIX, TEST_ONLY, TEST_ONLY, FIX], k=4,
                      schedule={"enabled": True, "first": 3, "wave": 1, "top_share": 0.6, "min_submitted": 3,
                                "no_new_files": False})
    records, pool = junior_stage(job)
    assert "tests/test_calc.py" in records[1].patch and pool.empty == [1, 2]
    first, second = pool_json(job)["schedule"]["decisions"]
    assert (first["decision"], first["top_submitted_votes"], first["submitted"]) == ("go on", 1, 3)
    assert first["rules"]["top_share"] is False and "1 of 3 submitted" in first["reason"]
    assert (second["rollouts"], second["decision"], second["converged"]) == (4, "stop", False)  # K reached


def test_a_rerun_of_a_stopped_schedule_starts_no_rollout(tmp_path, local_repo, monkeypatch):
    schedule = {"enabled": True, "first": 2, "wave": 2, "top_share": 0.9, "min_submitted": 2}
    job = juniors_job(tmp_path, local_repo, [FIX], k=6, schedule=schedule)
    junior_stage(job)
    assert rollout_files(job) == ["rollout-00.json", "rollout-01.json"]
    rows = len(Ledger.read(job.paths.ledger))
    # The rerun's rule would not stop there (rule a off, rule b needs a second wave): the decision on disk stands.
    monkeypatch.setenv("SWEPIPE_TEST_REFUSE", "1")  # opening a workspace fails the test
    again = juniors_job(tmp_path, local_repo, [FIX], k=6, schedule={**schedule, "top_share": None})
    records, pool = junior_stage(again)
    assert len(records) == 2 and pool.rollouts == 2 and len(Ledger.read(job.paths.ledger)) == rows
    decisions = pool_json(again)["schedule"]["decisions"]
    assert [(d["rollouts"], d["decision"], d["converged"]) for d in decisions] == [(2, "stop", True)]


def test_a_schedule_cut_short_mid_wave_finishes_that_wave(tmp_path, local_repo):
    schedule = {"enabled": True, "first": 2, "wave": 2, "top_share": 0.9, "min_submitted": 2}
    job = juniors_job(tmp_path, local_repo, [new_module(n) for n in range(4)], k=4, schedule=schedule)
    junior_stage(job)
    full = pool_json(job)
    assert [d["decision"] for d in full["schedule"]["decisions"]] == ["go on", "stop"]
    # What a kill during the second wave leaves: rollout 2 done, rollout 3 not, pool.json from the first wave.
    (job.paths.junior / "rollout-03.json").unlink()
    cut = {**full, "schedule": {**full["schedule"], "decisions": full["schedule"]["decisions"][:1]}}
    (job.paths.junior / "pool.json").write_text(json.dumps(cut))
    kept = [line for line in job.paths.ledger.read_text().splitlines() if '"rollout-03"' not in line]
    job.paths.ledger.write_text("\n".join(kept) + "\n")
    again = juniors_job(tmp_path, local_repo, [new_module(n) for n in range(4)], k=4, schedule=schedule)
    records, _ = junior_stage(again)
    assert [r.index for r in records] == [0, 1, 2, 3]
    new_rows = [row.agent for row in Ledger.read(job.paths.ledger)][len(kept):]
    assert new_rows == ["rollout-03", "rollout-03"]  # only the missing rollout of the wave ran again
    decisions = pool_json(again)["schedule"]["decisions"]
    assert decisions[0] == full["schedule"]["decisions"][0]  # the first wave's decision kept as it was (its time too)
    assert [(d["rollouts"], d["decision"]) for d in decisions] == [(2, "go on"), (4, "stop")]


def test_with_the_schedule_off_every_rollout_runs_as_before(tmp_path, local_repo):
    # The same rollouts that converge after 3 above: with enabled false, all K run and pool.json is today's.
    assert RunConfig().juniors.schedule.enabled is False and RunConfig().principal.skip_when.top_share is None
    job = juniors_job(tmp_path, local_repo, [FIX], k=5, schedule={"enabled": False, "first": 1, "top_share": 0.1})
    records, pool = junior_stage(job)
    assert len(records) == 5 and pool.rollouts == 5
    assert set(pool_json(job)) == {"format", *CandidatePool.__dataclass_fields__}  # no schedule record
    assert junior_agents(job) == [f"rollout-0{i}" for i in range(5)]


def test_rollouts_reused_from_another_run_are_taken_wave_by_wave(tmp_path, local_repo, monkeypatch):
    earlier = juniors_job(tmp_path, local_repo, [FIX], k=4, name="earlier")
    junior_stage(earlier)  # fixed K: four rollouts paid in that run
    monkeypatch.setenv("SWEPIPE_TEST_REFUSE", "1")
    job = juniors_job(tmp_path, local_repo, [FIX], k=4, name="reuse",
                      schedule={"enabled": True, "first": 2, "wave": 2, "min_submitted": 2})
    job.reuse_juniors_from = earlier.paths
    records, pool = junior_stage(job)
    assert [r.index for r in records] == [0, 1] and all(r.reused_from for r in records)
    assert rollout_files(job) == ["rollout-00.json", "rollout-01.json"]  # the others are not copied in
    assert not job.paths.ledger.exists() and pool_json(job)["schedule"]["stopped_early"] is True


# -- principal.skip_when: through `swepipe run`'s task runner ------------------------------------------------------


def test_skip_when_submits_the_top_candidate_without_senior_or_principal(tmp_path, local_repo, monkeypatch):
    script = {"junior": [FIX]}  # no senior or principal replies: a call to either would fail
    write_run_config(tmp_path, script, juniors={"k": 3}, principal={"skip_when": {"top_share": 0.6,
                                                                                   "min_submitted": 3}})
    prediction, rows, paths, _ = run_in_process(tmp_path, local_repo)
    assert prediction.source == "skip:junior_top" and "+    return a + b" in prediction.model_patch, prediction
    assert prediction.error is None and prediction.skip_check.skip is True
    assert {row.role for row in rows} == {"junior"} and prediction.cost["senior"] == 0 \
        and prediction.cost["principal"] == 0
    result = json.loads((paths.principal / "result.json").read_text())
    assert (result["source"], result["calls"], result["cost"], result["candidate"]) == ("skip:junior_top", 0, 0.0, 1)
    assert (paths.principal / "patch.diff").read_text() == prediction.model_patch
    brief_record = json.loads((paths.senior / "brief.json").read_text())
    assert brief_record["source"] == "skipped" and "3 of 3 submitted" in brief_record["analysis"]
    assert not (paths.senior / "trajectory.json").exists() and not (paths.principal / "request.json").exists()
    # A rerun skips again from the records on disk and opens no workspace.
    monkeypatch.setenv("SWEPIPE_TEST_REFUSE", "1")
    again, rows_again, _, _ = run_in_process(tmp_path, local_repo)
    assert again.source == "skip:junior_top" and again.model_patch == prediction.model_patch
    assert len(rows_again) == len(rows)
    # With the rule now off it would be a run done two ways under one config.yaml: refused, naming the change.
    write_run_config(tmp_path, script, juniors={"k": 3})
    with pytest.raises(SwepipeError, match=r"principal\.skip_when\.top_share: 0\.6 -> unset"):
        run_in_process(tmp_path, local_repo)


def test_skip_when_does_not_skip_when_the_juniors_disagree_or_fail(tmp_path, local_repo):
    script = {"junior": [FIX, OTHER, BROKEN],  # 1 of 2 submitted rollouts for the top: below the share
              "senior": [bash("cat calc.py"), brief(candidate=1)], "principal": [{"content": PRINCIPAL_EDIT,
                                                                                 "usage": USAGE}]}
    write_run_config(tmp_path, script, juniors={"k": 3}, principal={"skip_when": {"top_share": 0.6,
                                                                                   "min_submitted": 2}})
    prediction, rows, paths, _ = run_in_process(tmp_path, local_repo)
    assert prediction.source == "principal" and prediction.skip_check.skip is False, prediction
    assert prediction.skip_check.top_share == 0.5 and "1 of 2 submitted" in prediction.skip_check.reason
    assert {row.role for row in rows} == {"junior", "senior", "principal"}
    assert json.loads((paths.senior / "brief.json").read_text())["source"] == "senior"


def test_a_stopped_schedule_and_a_skip_go_through_to_the_report_and_coverage(tmp_path, local_repo):
    from pipeline.analysis.coverage import run_coverage
    from pipeline.analysis.load import load_run
    from pipeline.report.build import build_report, write_report

    write_run_config(tmp_path, {"junior": [FIX]},
                     juniors={"k": 6, "schedule": {"enabled": True, "first": 2, "min_submitted": 2}},
                     principal={"skip_when": {"top_share": 0.9, "min_submitted": 2}})
    prediction, _, paths, settings = run_in_process(tmp_path, local_repo)
    assert prediction.source == "skip:junior_top" and len(list(paths.junior.glob("rollout-*.json"))) == 2
    settings.layout.predictions.write_text(json.dumps(prediction.to_dict()) + "\n")
    gold = ("diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n"
            "-    return a - b\n+    return a + b\n")
    coverage = run_coverage(load_run(settings.layout.root), {prediction.instance_id: gold})
    [task] = coverage.tasks
    assert task.rollouts == 2 and len(task.hunks) == 2 and task.final is None  # curves up to the rollouts run
    assert coverage.curve("hunks", "added")[-1] == (2, 1.0, 1)
    report = build_report([settings.layout.root], {prediction.instance_id: gold})
    written = write_report(report, tmp_path / "report", task_pages=False)
    text = next(path for path in written.values() if path.suffix == ".md").read_text()
    assert "skip:junior_top" in text and "skipped" in text  # the prediction's source, the senior's "brief"
    assert "| junior schedule: rollouts/task of K | 2.0 of 6 |" in text
    assert "| junior schedule: how it stopped | top_share: 1 tasks |" in text


def test_print_config_shows_the_schedule_and_the_skip_rule(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--print-config"], capture_output=True,
                          text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "schedule:  # Adaptive rollouts" in text and "skip_when:  # Submit the top junior candidate" in text
    assert "first: 3  # rollouts of the first wave (K0)" in text
    assert "top_share: null  # skip when the top source candidate holds" in text
    loaded = yaml.safe_load(text)
    assert loaded["juniors"]["schedule"]["enabled"] is False and loaded["principal"]["skip_when"]["top_share"] is None


def test_config_refuses_a_share_out_of_range():
    with pytest.raises(ValueError):
        ScheduleConfig(top_share=1.5)
    with pytest.raises(ValueError):
        PrincipalConfig(skip_when={"top_share": 0})


@pytest.mark.docker
@pytest.mark.slow
def test_swepipe_run_in_docker_stops_the_schedule_skips_and_resolves(tmp_path):
    """`swepipe run` on a bundled task: two juniors apply the whole fix, the schedule stops after that first wave
    of K=4, the skip rule submits their candidate with no senior or principal call, and the hidden tests pass."""
    from scripted_pipeline import apply_patch_command, write_config
    from test_run_docker import TWO_FILES, swepipe

    from pipeline.rundir.layout import RunLayout

    task = TWO_FILES
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"junior": [[bash(apply_patch_command(task.patch)),
                                                                      SUBMIT]]}))
    write_config(tmp_path / "config.yaml", tmp_path / "script.yaml",
                 juniors={"k": 4, "schedule": {"enabled": True, "first": 2, "wave": 2, "min_submitted": 2}},
                 principal={"skip_when": {"top_share": 1.0, "min_submitted": 2}})
    swepipe("run", "--instance-ids", task.instance_id, "--config", "config.yaml", "--run-id", "sched", "--evaluate",
            cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / "sched")
    prediction = finished_predictions(layout.predictions)[task.instance_id]
    assert prediction["source"] == "skip:junior_top" and prediction["resolved"] is True, prediction
    paths = layout.task(task.instance_id)
    assert sorted(p.name for p in paths.junior.glob("rollout-*.json")) == ["rollout-00.json", "rollout-01.json"]
    assert json.loads((paths.junior / "pool.json").read_text())["schedule"]["decisions"][0]["decision"] == "stop"
    assert {row.role for row in Ledger.read(paths.ledger)} == {"junior"}
