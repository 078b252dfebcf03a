"""Scoring and images on a real local Ray cluster (tests/ray_cluster.py, every node on 127.0.0.1):
`swepipe eval --executor ray` gives the thread path's verdicts with the driver writing every file, and resumes;
the image preflight runs on every node and names the ones that cannot have an image; a node prunes the run's
images within the budget after its tasks; container limits are sized from the node that runs the task."""

import json
import time

import pytest
import yaml
from fake_registry import FakeRegistry
from ray_cluster import NODES, SLOTS, no_containers_left, scratch_left
from scripted_pipeline import SUBMIT, write_config
from test_eval_candidates import make_run as make_candidates_run
from test_image_cache_docker import CHOSEN, dataset, repository, throwaway  # noqa: F401 - repository: a fixture
from test_run_docker import swepipe

from pipeline.cli.eval_command import predictions_run_id
from pipeline.models.ledger import Ledger
from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.runtime import containers
from pipeline.runtime.images import disk as image_disk
from pipeline.runtime.images.names import local_image
from pipeline.runtime.limits import MEMORY_SHARE, MIB, format_size, machine_memory
from pipeline.tasks import load_tasks
from pipeline.tasks.datasets import BUNDLED_IMAGE_TEMPLATE

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TASKS = {t.repo.split("/")[-1]: t for t in load_tasks("bundled")}
FIRST, SECOND = TASKS["tinyq"], TASKS["cursorly"]
IDS = f"{FIRST.instance_id},{SECOND.instance_id}"
VERDICT = ("instance_id", "resolved", "category", "patch_empty", "patch_applied", "binary_sections_stripped",
           "FAIL_TO_PASS", "PASS_TO_PASS", "near_misses", "statuses", "timed_out", "flaky_tests")
ARTEFACTS = ("patch.diff", "entryscript.sh", "entry.log", "stdout.log", "stderr.log", "output.json", "result.json")


def _verdict(result: dict) -> dict:
    found = {key: result.get(key) for key in VERDICT}
    found["attempts"] = [(a["attempt"], a["resolved"], a["category"]) for a in result.get("attempts", [])]
    return found


def test_eval_on_two_nodes_gives_the_thread_verdicts_written_by_the_driver_and_resumes(cluster, tmp_path):
    predictions = tmp_path / "preds.jsonl"  # the gold patch of one task, an empty one for the other
    predictions.write_text(json.dumps({"instance_id": FIRST.instance_id, "model_patch": FIRST.patch}) + "\n"
                           + json.dumps({"instance_id": SECOND.instance_id, "model_patch": ""}) + "\n")
    common = ("eval", "--predictions", str(predictions), "--attempts", "2")
    on_ray = ("--output", "onray", "--executor", "ray", "--ray-address", cluster.address)
    done = swepipe(*common, *on_ray, cwd=tmp_path)
    output = " ".join(done.stdout.split())
    assert "ray: 3 node(s), 4 docker_slots, 1 per scoring: up to 4 scoring(s) at once" in output
    assert f"images on {len(NODES)} node(s): " in output and all(f"{n}: images: 2 of 2 present" in output
                                                                for n in NODES)
    swepipe(*common, "--output", "threads", cwd=tmp_path)
    for task in (FIRST, SECOND):
        ray_result = json.loads((tmp_path / "onray" / task.instance_id / "result.json").read_text())
        thread_result = json.loads((tmp_path / "threads" / task.instance_id / "result.json").read_text())
        assert _verdict(ray_result) == _verdict(thread_result), task.instance_id
        assert ray_result["node"] in NODES
        # Sized on the node, for the containers it runs at once (its docker_slots)
        expected = max(512 * MIB, int(machine_memory() * MEMORY_SHARE / SLOTS) // MIB * MIB)
        assert ray_result["limits"]["memory"] == format_size(expected)
        for artefact in ARTEFACTS:  # the workers' scratch copies went back to the driver, which wrote them here
            assert (tmp_path / "onray" / task.instance_id / artefact).is_file(), artefact
    assert json.loads((tmp_path / "onray" / FIRST.instance_id / "result.json").read_text())["resolved"] is True
    # --attempts 2: the unresolved one scored again on its node, its second attempt's files sent back too
    assert (tmp_path / "onray" / SECOND.instance_id / "attempt-2" / "output.json").is_file()
    for name in ("eval_results.json", "infra_errors.json"):
        assert (tmp_path / "onray" / name).read_text() == (tmp_path / "threads" / name).read_text()
    assert json.loads((tmp_path / "onray" / "summary.json").read_text()) == \
        json.loads((tmp_path / "threads" / "summary.json").read_text())
    run_id = predictions_run_id(predictions)
    assert not scratch_left(f"{run_id}-eval")
    assert no_containers_left(f"{run_id}-eval") and no_containers_left(run_id)

    stamps = {t.instance_id: (tmp_path / "onray" / t.instance_id / "result.json").stat().st_mtime_ns
              for t in (FIRST, SECOND)}
    again = swepipe(*common, *on_ray, cwd=tmp_path)  # a rerun scores nothing again
    assert "2 instance(s) already had a result" in again.stdout
    assert "images on" not in again.stdout  # nothing left to score: no preflight either
    assert stamps == {t.instance_id: (tmp_path / "onray" / t.instance_id / "result.json").stat().st_mtime_ns
                      for t in (FIRST, SECOND)}
    (tmp_path / "onray" / SECOND.instance_id / "result.json").unlink()  # as if its scoring had been cut short
    again = swepipe(*common, *on_ray, cwd=tmp_path)
    assert "1 instance(s) already had a result" in again.stdout
    assert stamps[FIRST.instance_id] == (tmp_path / "onray" / FIRST.instance_id / "result.json").stat().st_mtime_ns
    assert _verdict(json.loads((tmp_path / "onray" / SECOND.instance_id / "result.json").read_text())) == \
        _verdict(json.loads((tmp_path / "threads" / SECOND.instance_id / "result.json").read_text()))


def test_a_runs_candidates_are_scored_on_the_cluster_into_the_run_and_a_rerun_scores_none(cluster, tmp_path):
    """`swepipe eval --candidates RUN --executor ray`: the gold candidate resolves and the half one fails on the
    nodes, the driver writes each candidate's artefacts and result.json into the run, and a rerun scores nothing."""
    run, gold_key, half_key = make_candidates_run(tmp_path)
    paths = RunLayout(run).task(FIRST.instance_id)
    command = ("eval", "--candidates", "cands", "--executor", "ray", "--ray-address", cluster.address)
    done = swepipe(*command, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    output = " ".join(done.stdout.split())
    assert "up to 4 scoring(s) at once" in output and f"images on {len(NODES)} node(s): " in output
    assert f"{FIRST.instance_id}: 1 of 2 candidates resolve: {gold_key}" in output
    assert "2 scored now, 0 already had a verdict" in output
    gold = json.loads(paths.candidate_result(gold_key).read_text())
    half = json.loads(paths.candidate_result(half_key).read_text())
    assert (gold["resolved"], gold["category"], gold["votes"], gold["rollouts"]) == (True, "resolved", 2, [0, 2])
    assert (half["resolved"], half["category"], half["votes"], half["rollouts"]) == (False, "tests_failed", 1, [1])
    assert gold["node"] in NODES and half["node"] in NODES
    for key in (gold_key, half_key):  # the nodes' scratch copies went back to the driver, which wrote them here
        for artefact in ARTEFACTS:
            assert (paths.candidates / key / artefact).is_file(), (key, artefact)
    assert (paths.candidates / half_key / "patch.diff").read_text() in FIRST.patch
    summary = json.loads((paths.candidates / "summary.json").read_text())
    assert (summary["total"], summary["resolved"]) == (2, 1)
    assert not scratch_left("cands-candidates")
    assert no_containers_left("cands-candidates")

    stamps = {key: paths.candidate_result(key).stat().st_mtime_ns for key in (gold_key, half_key)}
    again = swepipe(*command, cwd=tmp_path)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "0 scored now, 2 already had a verdict" in " ".join(again.stdout.split())
    assert {key: paths.candidate_result(key).stat().st_mtime_ns for key in stamps} == stamps


def test_an_image_no_node_has_and_no_registry_confirms_stops_the_run_naming_the_nodes(cluster, tmp_path):
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"junior": [[SUBMIT]]}))
    write_config(tmp_path / "config.yaml", tmp_path / "script.yaml", juniors={"k": 1})
    with FakeRegistry() as registry:  # on 127.0.0.1: it has no such image
        template = f"{registry.host}/swepipe/none:{{dockerhub_tag}}"
        started = time.monotonic()
        done = swepipe("run", "--strategy", "vote", "--instance-ids", FIRST.instance_id, "--config", "config.yaml",
                       "--image-template", template, "--run-id", "ray-noimage", "--executor", "ray", "--ray-address",
                       cluster.address, cwd=tmp_path, check=False)
        took = time.monotonic() - started
        asked = [r for r in registry.requests if "/manifests/" in r["path"]]
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    error = " ".join(done.stderr.split())
    image = template.format(dockerhub_tag=FIRST.to_row()["dockerhub_tag"])
    assert f"on {', '.join(NODES)}: 1 image(s) are missing locally and no registry confirmed" in error, error
    assert image in error and "missing (" in error and "--skip-image-check" in error
    output = " ".join(done.stdout.split())
    for node in NODES:  # each node that can run a task was asked, and said so
        assert f"{node}: images: 0 of 1 present" in output
    assert "head:" not in output  # no docker slots: it runs no task, its images do not matter
    assert asked  # the nodes asked the registry (through their Docker engine)
    assert took < 120
    layout = RunLayout(tmp_path / "runs" / "ray-noimage")
    assert not (layout.root / "tasks").exists()  # nothing started, nothing spent
    assert Ledger.read(layout.task(FIRST.instance_id).ledger) == []


def test_nodes_size_limits_for_their_slots_and_prune_the_run_s_images_within_the_budget(cluster, tmp_path,
                                                                                         repository):  # noqa: F811
    names = [throwaway(repository, task) for task in CHOSEN]
    client = containers.client()
    sizes = [image_disk.disk_bytes([client.images.get(n).id]) for n in names]
    budget = max(sizes) * 1.2  # room for one task's image and its sanitised copy, not for all three
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"junior": [[SUBMIT]]}))
    write_config(tmp_path / "config.yaml", tmp_path / "script.yaml", juniors={"k": 1},
                 containers={"image_cache_gb": budget / 1e9, "pids_limit": 300})
    # --workers 4: the driver would size each container for 4 at once; a node runs its docker_slots at once.
    done = swepipe("run", "--strategy", "vote", "--dataset", str(dataset(tmp_path, CHOSEN)), "--config",
                   "config.yaml", "--image-template", f"{repository}:{{dockerhub_tag}}", "--run-id", "nodes",
                   "--workers", "4", "--executor", "ray", "--ray-address", cluster.address, cwd=tmp_path)
    layout = RunLayout(tmp_path / "runs" / "nodes")
    predictions = finished_predictions(layout.predictions)
    assert set(predictions) == {t.instance_id for t in CHOSEN}, done.stdout[-3000:]
    # Limits: the config's own value kept, the rest sized on the node, recorded per task; config.yaml as given.
    expected = max(512 * MIB, int(machine_memory() * MEMORY_SHARE / SLOTS) // MIB * MIB)
    for task in CHOSEN:
        record = json.loads((layout.task(task.instance_id).root / "limits.json").read_text())
        assert record["docker_slots"] == SLOTS and record["given"] == {"pids_limit": 300}
        assert record["limits"]["memory"] == format_size(expected) and record["limits"]["pids"] == 300
    config = yaml.safe_load(layout.config.read_text())["containers"]
    assert config["pids_limit"] == 300 and config["memory"] is None and config["cpus"] is None
    # Images: each node pruned after its tasks (one line each, naming the node); the last prune held the budget.
    rows = [json.loads(line) for line in (layout.root / "image_cache.jsonl").read_text().splitlines()]
    assert sorted(r["after_task"] for r in rows) == sorted(t.instance_id for t in CHOSEN), done.stdout[-3000:]
    assert all(r["node"] for r in rows)
    last = max(rows, key=lambda r: r["time"])
    assert last["run_images_bytes"] <= budget, last
    assert any(r["removed"] for r in rows)
    for row in rows:  # what a node kept over the budget, it kept because a task there held it
        assert row["run_images_bytes"] <= budget or row["running"], row
    left = [i.id for n in names if (i := local_image(n)) is not None]
    assert image_disk.disk_bytes([*left, *(c.id for c in image_disk.sanitised_images(set(left)))]) <= budget
    assert no_containers_left("nodes")


def _sigterm_a_slow_scoring(tmp_path, arguments: list[str], label: str) -> str:
    """``swepipe eval ARGUMENTS`` with a test run that takes its time, stopped by SIGTERM once a scoring container
    of ``label`` is up: exit 143, saying how to resume, nothing left on any node. Its output."""
    import signal
    import subprocess
    import sys

    scripts = tmp_path / "run_scripts" / FIRST.instance_id
    scripts.mkdir(parents=True)
    (scripts / "run_script.sh").write_text("#!/bin/bash\nsleep 120\n")
    (scripts / "parser.py").write_text("print('{}')\n")
    command = [sys.executable, "-m", "pipeline.cli", "eval", *arguments, "--run-scripts", str(tmp_path / "run_scripts")]
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and no_containers_left(label):
            time.sleep(0.2)
        assert not no_containers_left(label), "the scoring never started"
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 143, output[-3000:]
    assert "run the same command again" in " ".join(output.split())
    assert no_containers_left(label)  # on every node (one Docker engine serves the local cluster)
    assert not scratch_left(label)
    return output


def test_sigterm_stops_the_cluster_s_scoring_and_removes_its_containers(cluster, tmp_path):
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text(json.dumps({"instance_id": FIRST.instance_id, "model_patch": FIRST.patch}) + "\n")
    _sigterm_a_slow_scoring(tmp_path, ["--predictions", str(predictions), "--output", "out", "--executor", "ray",
                                       "--ray-address", cluster.address], f"{predictions_run_id(predictions)}-eval")
    assert not (tmp_path / "out" / FIRST.instance_id / "result.json").exists()  # cut short: no verdict


def test_sigterm_stops_the_cluster_s_candidate_scoring_keeping_the_summaries(cluster, tmp_path):
    run, gold_key, half_key = make_candidates_run(tmp_path)
    output = _sigterm_a_slow_scoring(tmp_path, ["--candidates", "cands", "--executor", "ray", "--ray-address",
                                                cluster.address], "cands-candidates")
    assert "to score the rest" in " ".join(output.split())
    paths = RunLayout(run).task(FIRST.instance_id)
    assert not any(paths.candidate_result(key).exists() for key in (gold_key, half_key))  # cut short: no verdict
    summary = json.loads((paths.candidates / "summary.json").read_text())  # says what was scored: nothing
    assert (summary["total"], summary["resolved"], [c["resolved"] for c in summary["candidates"]]) == (2, 0, [None] * 2)


def test_validate_and_compare_give_the_same_files_on_the_cluster_as_on_the_thread_pool(cluster, tmp_path):
    """validate --replicas 2 (a stable task and its seeded flaky copy) and compare of two runs scored by
    `swepipe eval`, once on this machine's thread pool and once on the cluster: the same instances.jsonl,
    reliable.txt and compare --json."""
    from flaky_task import write_dataset

    dataset, scripts, flaky = write_dataset(tmp_path, [FIRST], FIRST)
    outputs = {}
    for where, extra in (("threads", ()), ("ray", ("--executor", "ray", "--ray-address", cluster.address))):
        folder = tmp_path / where
        for run, patches in (("A", [(FIRST, FIRST.patch), (SECOND, SECOND.patch)]),
                             ("B", [(FIRST, FIRST.patch), (SECOND, "")])):
            root = folder / "runs" / run
            root.mkdir(parents=True)
            (root / "config.yaml").write_text(yaml.safe_dump({"limits": {"editor": True}}))
            (root / "predictions.jsonl").write_text("".join(json.dumps(
                {"instance_id": task.instance_id, "model_patch": patch, "strategy": "solo",
                 "cost": {"solo": 0.5, "total": 0.5}}) + "\n" for task, patch in patches))
            swepipe("eval", "--predictions", str(root / "predictions.jsonl"), *extra,
                    cwd=folder)
        compared = swepipe("compare", "runs/A", "runs/B", "--json", cwd=folder).stdout
        validated = swepipe("validate", "--dataset", str(dataset), "--run-scripts", str(scripts), "--replicas", "2",
                            "--image-template", BUNDLED_IMAGE_TEMPLATE, "--output", "validation",
                            *extra, cwd=folder, check=False)
        assert validated.returncode == 1, validated.stdout[-3000:] + validated.stderr[-3000:]  # the flaky one
        outputs[where] = {"compare": json.loads(compared[compared.index("{"):compared.rindex("}") + 1]),
                          **{name: (folder / "validation" / name).read_text()
                             for name in ("instances.jsonl", "reliable.txt")}}
    assert outputs["ray"] == outputs["threads"]
    rows = {row["instance_id"]: row["status"]
            for row in map(json.loads, outputs["ray"]["instances.jsonl"].splitlines())}
    assert rows == {FIRST.instance_id: "reliable", flaky.instance_id: "flaky"}
    pair = outputs["ray"]["compare"]["pairs"][0]
    assert (pair["both"], pair["only_a"], pair["only_b"], pair["neither"]) == (1, 1, 0, 0)
    assert pair["scoring_warnings"] == []  # both scored alike, on either executor
