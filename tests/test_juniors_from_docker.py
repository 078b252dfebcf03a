"""run --juniors-from on a bundled task, scored: the pool is an earlier swepipe run's prediction (one half of the
two-file fix) and an official-format predictions file's patch (the other half); no junior of the run's own; the
scripted senior and principal see both and write the whole fix, which resolves. The report shows the imported spend
apart, and coverage is drawn over the imported pool."""

from __future__ import annotations

import json

import pytest
import yaml
from scripted_pipeline import (
    SUBMIT,
    apply_patch_command,
    bash,
    brief_from_patch,
    edits_from_patch,
    patch_per_file,
    reply,
    write_config,
)
from test_run_docker import TWO_FILES, swepipe

from pipeline.analysis.coverage import run_coverage
from pipeline.analysis.load import load_run
from pipeline.records import Rollout, read_predictions
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_a_pool_of_another_run_and_a_predictions_file_resolves_with_one_senior_and_one_principal(tmp_path):
    task = TWO_FILES
    first, second = patch_per_file(task.patch).values()
    # A: a swepipe run whose one junior fixes the first file (vote strategy: its candidate is the prediction)
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({"junior": [[bash(apply_patch_command(first)), SUBMIT]]}))
    write_config(tmp_path / "a-config.yaml", tmp_path / "a.yaml", juniors={"k": 1})
    swepipe("run", "--strategy", "vote", "--instance-ids", task.instance_id, "--config", "a-config.yaml",
            "--run-id", "A", cwd=tmp_path)
    # B: the other half, as the official harness's input
    (tmp_path / "B.json").write_text(json.dumps([{"instance_id": task.instance_id, "patch": second,
                                                  "prefix": "someone-else"}]))
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({
        "senior": [bash("git grep -n 'def defer' -- '*.py' | head"), reply(brief_from_patch(task.patch))],
        "principal": [reply(edits_from_patch(task.patch))]}))
    write_config(tmp_path / "config.yaml", tmp_path / "script.yaml", juniors={"k": 0})

    done = swepipe("run", "--instance-ids", task.instance_id, "--config", "config.yaml", "--run-id", "pooled",
                   "--juniors-from", "A", "--juniors-from", "B.json", "--evaluate", cwd=tmp_path)
    assert "(swepipe run): a candidate for 1 of 1 task(s)" in done.stdout
    layout = RunLayout(tmp_path / "runs" / "pooled")
    paths = layout.task(task.instance_id)
    rollouts = [Rollout.load(paths.junior_files.rollout(index)) for index in (0, 1)]
    assert [r.patch for r in rollouts] == [first, second] and all(r.imported_from for r in rollouts)
    assert rollouts[0].imported_cost == pytest.approx(json.loads(
        (tmp_path / "runs" / "A" / "predictions.jsonl").read_text())["cost"]["total"])
    request = (paths.principal_files.request).read_text()
    assert "def defer" in request and "RetryLater" in request  # the principal's call holds both candidates
    prediction = finished_predictions(layout.predictions)[task.instance_id]
    assert prediction["resolved"] is True and prediction["imported_from"] == ["A", "B.json"]
    assert "junior" not in prediction["cost"] or prediction["cost"]["junior"] == 0

    report = swepipe("report", "pooled", cwd=tmp_path)
    assert "candidates imported from" in report.stdout and "imported spend" in report.stdout
    swepipe("whatif", "pooled", cwd=tmp_path)  # the analyses read the imported rollouts as any others
    swepipe("compare", "A", "pooled", cwd=tmp_path)
    swepipe("coverage", "pooled", cwd=tmp_path)
    assert (layout.root / "figures" / "coverage-pooled.png").stat().st_size > 0
    # Over the imported pool: either candidate alone holds half the gold patch's added lines, both hold all.
    covered = run_coverage(load_run(layout.root), {task.instance_id: task.patch})
    assert covered.max_k == 2 and [share for _, share, _ in covered.curve("hunks", "added")] == [0.5, 1.0]


def test_an_imported_patch_that_does_not_apply_in_the_task_s_image_is_left_out_of_the_pool(tmp_path):
    """The check runs in a read-only workspace of the task's image without the network: the stale half is named and
    left out, the other half joins the pool, and no container is left."""
    from pipeline.runtime import containers

    task = TWO_FILES
    first, second = patch_per_file(task.patch).values()
    stale = first.replace("\n ", "\n #", 1)  # its first context line is not the base's
    (tmp_path / "C.json").write_text(json.dumps([{"instance_id": task.instance_id, "patch": stale, "prefix": "c"}]))
    (tmp_path / "D.json").write_text(json.dumps([{"instance_id": task.instance_id, "patch": second, "prefix": "d"}]))
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({
        "senior": [reply(brief_from_patch(task.patch))], "principal": [reply(edits_from_patch(task.patch))]}))
    write_config(tmp_path / "config.yaml", tmp_path / "script.yaml", juniors={"k": 0})
    done = swepipe("run", "--instance-ids", task.instance_id, "--config", "config.yaml", "--run-id", "checked",
                   "--juniors-from", "C.json", "--juniors-from", "D.json", cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / "checked")
    paths = layout.task(task.instance_id)
    rollouts = [Rollout.load(paths.junior_files.rollout(index)) for index in (0, 1)]
    assert [r.patch_dropped for r in rollouts] == ["does_not_apply", None] and rollouts[1].patch == second
    assert f"{task.instance_id}: rollout 0 from {tmp_path / 'C.json'} left out of the pool" in \
        " ".join(done.stdout.split())
    seals = {seal.role: seal for seal in read_predictions(layout.predictions).records[task.instance_id].containers}
    assert seals["imported-check"].read_only is True and seals["imported-check"].network is False
    assert not containers.client().containers.list(all=True, filters={"label": f"{containers.RUN_LABEL}=checked"})


def test_a_vote_and_the_senior_s_choice_over_imported_runs_alone_are_scored_and_whatif_reads_them(tmp_path):
    """-k 0 over three imported sources, no junior of the run's own: a vote over them (no model at all) and the
    senior's choice among them (--principal-model none), both scored; the candidates scored, then whatif's pass@k
    and vote@k over the imported pool."""
    task = TWO_FILES
    first, _ = patch_per_file(task.patch).values()
    # A: a swepipe run whose junior writes the whole fix; B: the same fix, C: half of it, as predictions files
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({"junior": [[bash(apply_patch_command(task.patch)), SUBMIT]]}))
    write_config(tmp_path / "a-config.yaml", tmp_path / "a.yaml", juniors={"k": 1})
    swepipe("run", "--strategy", "vote", "--instance-ids", task.instance_id, "--config", "a-config.yaml",
            "--run-id", "A", cwd=tmp_path)
    for name, patch in (("B", task.patch), ("C", first)):
        (tmp_path / f"{name}.json").write_text(json.dumps([{"instance_id": task.instance_id, "patch": patch,
                                                            "prefix": name}]))
    imports = ["--juniors-from", "A", "--juniors-from", "B.json", "--juniors-from", "C.json"]
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"senior": [reply(brief_from_patch(task.patch))]}))
    write_config(tmp_path / "config.yaml", tmp_path / "script.yaml", juniors={"k": 0})

    swepipe("run", "--strategy", "vote", "-k", "0", "--instance-ids", task.instance_id, "--config", "config.yaml",
            "--run-id", "voted", *imports, "--evaluate", cwd=tmp_path)
    voted = finished_predictions(RunLayout(tmp_path / "runs" / "voted").predictions)[task.instance_id]
    assert voted["source"] == "vote" and voted["votes"] == 2 and voted["resolved"] is True
    assert voted["imported_from"] == ["A", "B.json", "C.json"] and voted["cost"].get("total", 0) == 0

    swepipe("run", "-k", "0", "--principal-model", "none", "--instance-ids", task.instance_id, "--config",
            "config.yaml", "--run-id", "chosen", *imports, "--evaluate", cwd=tmp_path)
    chosen = finished_predictions(RunLayout(tmp_path / "runs" / "chosen").predictions)[task.instance_id]
    assert chosen["resolved"] is True and chosen["model_patch"] == task.patch
    assert chosen["cost"].get("principal", 0) == 0 and chosen["cost"]["senior"] > 0

    swepipe("eval", "voted", "--candidates", cwd=tmp_path)
    policies = json.loads(swepipe("whatif", "voted", "--json", cwd=tmp_path).stdout)["policies"]
    rates = {(policy["name"], policy["k"]): policy["resolve_rate"] for policy in policies}
    assert rates[("pass@k", 1)] == pytest.approx(2 / 3) and rates[("pass@k", 3)] == 1.0
    assert rates[("vote@k", 3)] == 1.0  # the full fix, two votes of three
