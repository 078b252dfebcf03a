"""Sealed, on the record (issue 42): each task's prediction says how its agents' containers were sealed (commits
reachable, refs, remotes, reflogs and objects beyond the base, as found right after the sanitise step) and whether
they had the network; the report and the end of the run state it for the run, loudly when the network was on or a
container was not sealed. Whole runs through `swepipe run` with scripted models in local clones
(tests/local_opener.py, which sanitise as an image is); tests/test_sealed_record_docker.py reads a real image's."""

from __future__ import annotations

import html
import json
import re

import pytest
import yaml
from conftest import demo_task, git
from fuzzing import fuzz
from hostile import hostile_line, hostile_text, in_markdown, in_terminal
from hypothesis import given
from hypothesis import strategies as st
from scripted_pipeline import bash, brief_from_patch, edits_from_patch, reply
from typer.testing import CliRunner

from pipeline.analysis.sealing import seal_count, seal_warnings, sealed_words
from pipeline.cli import app
from pipeline.records import Prediction, TaskContainers, read_predictions
from pipeline.records.sealing import ContainerSeal
from pipeline.report.render import markdown
from pipeline.rundir.layout import RunLayout
from pipeline.runtime.seal import Seal, read_facts
from pipeline.text.terminal import literal_console

HEADER = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n"
FIX = HEADER + " def add(a, b):\n-    return a - b\n+    return a + b\n"
SUBMIT = bash("submit")


@pytest.fixture
def task(tmp_path, local_repo):
    """A one-task dataset (leaky_repo: its gold commit hidden behind a branch, a tag, a reflog and a stash), and a
    pipeline's scripted replies: two juniors that fix it, a senior, a principal."""
    task = demo_task(local_repo)
    (tmp_path / "tasks.jsonl").write_text(task.model_dump_json() + "\n")
    script = {"junior": [[bash("sed -i 's/a - b/a + b/' calc.py"), SUBMIT]] * 2,
              "senior": [bash("git log --oneline --all"), reply(brief_from_patch(FIX))],
              "principal": [reply(edits_from_patch(FIX))]}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    return task


def configure(tmp_path, opener: str = "open_local", network: bool = False) -> None:
    spec = {"model": f"scripted/{tmp_path / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "models": {role: spec for role in ("junior", "senior", "principal")}, "juniors": {"k": 2},
        "limits": {"max_steps": 6}, "containers": {"impl": f"local_opener:{opener}", "network": network}}))


def run(tmp_path, run_id: str) -> str:
    done = CliRunner().invoke(app, ["run", "--dataset", str(tmp_path / "tasks.jsonl"), "--config",
                                    str(tmp_path / "config.yaml"), "--runs-dir", str(tmp_path / "runs"),
                                    "--run-id", run_id], env={"COLUMNS": "250"})
    assert done.exit_code == 0, done.output
    return done.output


def report(tmp_path, run_id: str) -> list[str]:
    """report.md's lines, as shown (Markdown's escapes read); what `swepipe report` printed opens with its
    warnings."""
    done = CliRunner().invoke(app, ["report", str(tmp_path / "runs" / run_id), "--dataset",
                                    str(tmp_path / "tasks.jsonl")], env={"COLUMNS": "250"})
    assert done.exit_code == 0, done.output
    lines = (tmp_path / "runs" / run_id / "report.md").read_text().replace("\\", "").splitlines()
    warnings = [line for line in lines if line.startswith("Warning: ")]
    assert [line for line in done.output.splitlines() if line.startswith("Warning: ")] == warnings
    return lines


def prediction(tmp_path, run_id: str, task) -> Prediction:
    return read_predictions(RunLayout(tmp_path / "runs" / run_id).predictions).records[task.instance_id]


ROLES = ["rollout-00", "rollout-01", "senior", "principal"]


def test_a_run_records_how_every_container_was_sealed_and_the_report_states_it(tmp_path, task, local_repo):
    configure(tmp_path)
    shown = run(tmp_path, "sealed")
    found = prediction(tmp_path, "sealed", task)
    assert "+    return a + b" in found.model_patch
    assert sorted(c.role for c in found.containers) == sorted(ROLES)  # the juniors' open side by side
    for container in found.containers:
        # leaky_repo's base has two commits; its gold commit behind a branch, a tag, a reflog and a stash is gone
        assert container.to_dict() | {"role": "", "read_only": False} == {
            "role": "", "read_only": False, "runtime": "local", "sanitised": True, "sealed": True, "network": False,
            "commits": 2, "other_refs": 0, "remotes": 0, "reflogs": 0, "unreachable_objects": 0, "submodules": 0}
    assert [c.role for c in found.containers if c.read_only] == ["senior"]
    carried = TaskContainers.read(RunLayout(tmp_path / "runs" / "sealed").task(task.instance_id).containers)
    assert carried.containers == found.containers
    assert "sealed: 4 of 4 containers; network off" in shown and "Warning" not in shown
    lines = report(tmp_path, "sealed")
    assert "sealed: sealed: 4 of 4 containers; network off; 4 a local clone (no container: the network setting not " \
           "enforced)" in lines
    assert any(line.startswith("| agents' containers | sealed: 4 of 4 containers; network off") for line in lines)
    assert not any("Warning" in line for line in lines)
    page = html.unescape((tmp_path / "runs" / "sealed" / "report_tasks" / "sealed" / f"{task.instance_id}.html"
                          ).read_text())
    assert "agents' containers <b>sealed: 4 of 4 containers; network off" in page


def test_the_network_on_is_reported_loudly_first(tmp_path, task):
    configure(tmp_path, network=True)
    shown = run(tmp_path, "online")
    found = prediction(tmp_path, "online", task)
    assert {c.role: c.network for c in found.containers} == {  # the read-only view never has it
        "rollout-00": True, "rollout-01": True, "senior": False, "principal": True}
    warning = shown.index("Warning: online: the agents' containers had the network (3 of 4, containers.network on)")
    assert shown.find("run online", warning) > warning  # the end of the run's summary opens with it, before its
    # table (titled with the run, a grid or turned into blocks, whatever the terminal's width)
    assert "sealed: 4 of 4 containers; network on in 3 of 4 (containers.network on)" in shown
    lines = report(tmp_path, "online")
    assert lines[2].startswith("Warning: online: the agents' containers had the network (3 of 4, containers.network "
                               "on): they could fetch the repository, its fix or a newer release")


@pytest.mark.parametrize("opener, why", [
    # the clone's branch, tags and origin's refs, its remote, their reflogs, the gold commit's objects
    ("open_unsanitised", r"not sanitised, \d+ ref\(s\) besides HEAD, 1 remote\(s\), \d+ reflog\(s\), \d+ "
                         r"object\(s\) the base does not reach"),
    ("open_with_planted_ref", r"1 ref\(s\) besides HEAD")])
def test_a_container_that_is_not_sealed_is_reported_as_not_sealed(tmp_path, task, opener, why):
    configure(tmp_path, opener=opener)
    shown = " ".join(run(tmp_path, "leaky").split())
    found = prediction(tmp_path, "leaky", task)
    assert [c.sealed for c in found.containers] == [False] * 4
    warning = shown.index("Warning: leaky: 4 of 4 containers were not sealed (history beyond the base within an "
                          f"agent's reach): {task.instance_id} principal")
    assert shown.find("run leaky", warning) > warning and re.search(f"rollout-00: {why}(;| run leaky)", shown)
    assert "sealed: 0 of 4 containers; network off" in shown
    lines = report(tmp_path, "leaky")
    assert lines[2].startswith("Warning: leaky: 4 of 4 containers were not sealed")
    page = html.unescape((tmp_path / "runs" / "leaky" / "report_tasks" / "leaky" / f"{task.instance_id}.html"
                          ).read_text())
    assert re.search(f"not sealed <b>[^<]*rollout-00: {why}", page)


def test_a_run_from_before_says_not_recorded(tmp_path, task):
    configure(tmp_path)
    run(tmp_path, "old")
    layout = RunLayout(tmp_path / "runs" / "old")
    lines = [json.loads(line) for line in layout.predictions.read_text().splitlines()]
    layout.predictions.write_text("".join(json.dumps({k: v for k, v in line.items() if k != "containers"}) + "\n"
                                          for line in lines))
    shown = report(tmp_path, "old")
    assert "old: not recorded" in shown
    assert any(line.startswith("| agents' containers | not recorded |") for line in shown)


def test_a_resumed_task_keeps_the_containers_an_earlier_session_ran(tmp_path, task, local_repo):
    """The junior containers of a session that was stopped are in the prediction of the session that finishes
    the task, though that one reuses their rollouts and opens none of them."""
    from run_sessions import request

    from pipeline.run.lifecycle import Run
    from pipeline.run.setup import resolve_config
    from pipeline.run.task import record_containers, seeded_run_budget, task_job

    configure(tmp_path)
    with Run.open(request(resolve_config(tmp_path / "config.yaml"), "resumed", tmp_path / "runs",
                          dataset=str(tmp_path / "tasks.jsonl"))) as run:
        settings = run.settings
        earlier = ContainerSeal.model_validate({"role": "rollout-00", "runtime": "docker", "sanitised": True,
                                                "sealed": True, "network": False, "commits": 9})
        paths = settings.layout.task(task.instance_id)
        paths.root.mkdir(parents=True)
        TaskContainers.of({"containers": [earlier.to_dict()]}).write(paths.containers)
        job = task_job(task, settings, seeded_run_budget(settings))
        with job.open_runtime("senior", read_only=True):
            pass
        assert [(c.role, c.commits) for c in record_containers(job)] == [("rollout-00", 9), ("senior", 2)]
        assert [c.role for c in TaskContainers.read(paths.containers).containers] == ["rollout-00", "senior"]


def test_the_seal_script_counts_what_a_repository_holds_beyond_head(tmp_path, leaky_repo):
    """seal.sh alone, on the leaky repository as it is (its gold commit behind refs, a reflog, a stash)."""
    from pipeline.runtime.local import LocalRuntime

    with LocalRuntime(leaky_repo["path"], leaky_repo["base"], sanitise=False) as runtime:
        git(runtime.workdir, "hash-object", "-w", "--stdin")  # an object nothing reaches (an empty blob)
        facts = runtime._found_seal(False)
        assert not facts.sealed and facts.repositories[0].commits == 2
        assert facts.repositories[0].remotes == 1 and facts.repositories[0].refs >= 4
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime:
        assert runtime.seal.sealed
        git(runtime.workdir, "hash-object", "-w", "--stdin")
        again = runtime._found_seal(True)
        assert not again.sealed and again.repositories[0].unreachable == 1


@fuzz
@given(output=hostile_text(200))
def test_the_seal_scripts_output_is_read_whatever_it_holds(output):
    for facts in read_facts(output + "\nswepipe seal: 1 0 0 0 5 5 " + output.replace("\n", " ")):
        assert facts.commits is None or facts.commits >= 0


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | hostile_text(20),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile_text(8), inner, max_size=3),
                    max_leaves=8)
FACTS = st.dictionaries(st.sampled_from(["path", "commits", "refs", "remotes", "reflogs", "objects", "reachable"]),
                        JSON)
LABELS = st.one_of(hostile_text(100), JSON.map(json.dumps), st.fixed_dictionaries(
    {"sanitised": JSON, "repositories": st.lists(FACTS, max_size=3) | JSON}).map(json.dumps))


@fuzz
@given(label=LABELS)
def test_an_images_seal_label_is_read_whatever_it_holds(label):
    """A label is data (an image built elsewhere may carry one): read, or said unreadable, never a crash, and what it
    gives is a record the task can keep."""
    seal = Seal.from_label(label).with_network(False, "docker")
    entry = ContainerSeal.model_validate({"role": "rollout-00", **seal.record_fields()})
    assert entry.sealed is seal.sealed and (not seal.sealed or entry.unreachable_objects == 0)


@fuzz
@given(role=hostile_line(40), missing=hostile_line(60))
def test_a_role_and_a_reason_are_shown_literally_in_the_warning(role, missing):
    entry = ContainerSeal.model_validate({"role": role, "runtime": "unknown", "sanitised": False, "sealed": False,
                                         "network": None, "missing": missing})
    found = Prediction.of({"instance_id": "t1", "model_patch": "", "containers": [entry.to_dict()]})
    count = seal_count([found], False)
    warning = seal_warnings("r", count)[-1]
    assert f"t1 {role}: not known ({missing})" in warning
    assert sealed_words(count) == "sealed: 0 of 1 containers; not known in 1 of 1"
    console = literal_console(record=True, width=300)
    console.print(warning, soft_wrap=True)
    assert in_terminal(f"t1 {role}: not known ({missing})", console.export_text())
    assert in_markdown(warning, markdown("r", [], {}, lead=[warning]))


def test_rollouts_that_ran_elsewhere_are_said_to_be_left_out_of_the_count():
    senior = {"role": "senior", "read_only": True, "runtime": "docker", "sanitised": True, "sealed": True,
              "network": False, "commits": 3, "other_refs": 0, "remotes": 0, "reflogs": 0, "unreachable_objects": 0}
    imported = Prediction.of({"instance_id": "t1", "model_patch": "", "imported_from": ["mini-runs"],
                              "containers": [senior]})
    assert sealed_words(seal_count([imported], False)) == (
        "sealed: 1 of 1 containers; network off; 1 task(s) with rollouts that ran elsewhere (reused or imported), "
        "whose containers are not counted")
    assert seal_warnings("r", seal_count([imported], False)) == []
