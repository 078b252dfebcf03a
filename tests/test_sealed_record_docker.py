"""Sealed, on the record, in real containers (issue 42): a bundled task's sanitised image carries what its sanitise
step found (the seal label) and every container of it reports that, with its own network; an image no sanitise step
made is not sealed; a whole scripted run's prediction and end-of-run summary say it."""

import json

import pytest
import yaml
from scripted_pipeline import SUBMIT, bash
from test_run_docker import swepipe

from pipeline.records.prediction import finished_predictions
from pipeline.rundir.layout import RunLayout
from pipeline.runtime import containers
from pipeline.runtime.docker import DockerRuntime
from pipeline.runtime.factory import open_runtime, prepare_task_image
from pipeline.runtime.images.names import image_name
from pipeline.runtime.images.prepare import prepare_image
from pipeline.runtime.seal import SEAL_LABEL
from pipeline.settings.config import Containers
from pipeline.tasks import load_tasks
from pipeline.tasks.datasets import BUNDLED, BUNDLED_IMAGE_TEMPLATE

pytestmark = pytest.mark.docker
TINYQ = next(t for t in load_tasks(BUNDLED) if t.repo.endswith("/tinyq"))


def commits_in(runtime) -> int:
    return int(runtime.run("git rev-list --count HEAD").output)


def test_a_bundled_images_seal_is_kept_with_it_and_read_by_every_container(run_id):
    image = prepare_task_image(TINYQ, Containers(), BUNDLED_IMAGE_TEMPLATE)
    kept = json.loads(containers.client().images.get(image).labels[SEAL_LABEL])
    assert kept["sanitised"] is True and [r["path"] for r in kept["repositories"]] == ["."]
    with open_runtime(TINYQ, "rollout-00", Containers(), run_id=run_id, image_template=BUNDLED_IMAGE_TEMPLATE) as rt:
        seal = rt.seal
        assert seal.sealed and seal.network is False and seal.runtime == "docker"
        assert seal.repositories[0].commits == commits_in(rt) > 0
        assert seal.record_fields() == {"runtime": "docker", "sanitised": True, "network": False, "sealed": True,
                                        "commits": commits_in(rt), "other_refs": 0, "remotes": 0, "reflogs": 0,
                                        "unreachable_objects": 0, "submodules": 0}
    online = Containers(network=True)
    with open_runtime(TINYQ, "solo", online, run_id=run_id, image_template=BUNDLED_IMAGE_TEMPLATE) as rt:
        assert rt.seal.sealed and rt.seal.network is True
    with open_runtime(TINYQ, "senior", online, run_id=run_id, image_template=BUNDLED_IMAGE_TEMPLATE,
                      read_only=True) as rt:
        assert rt.seal.sealed and rt.seal.network is False  # a read-only view never gets the network


def test_an_image_no_sanitise_step_made_is_not_sealed(run_id):
    """The bundled image as published (official images hold the fix behind refs and reflogs): no record of a
    sanitise step, so its containers count as not sealed, and say why."""
    source = prepare_image(image_name(BUNDLED_IMAGE_TEMPLATE, TINYQ.to_row()), TINYQ.base_commit, sanitise=False)
    with DockerRuntime(source, TINYQ.base_commit, run_id=run_id) as rt:
        assert not rt.seal.sanitised and not rt.seal.sealed and rt.seal.network is False
        assert rt.seal.record_fields()["missing"] == "the image carries no record of a sanitise step"


@pytest.mark.slow
def test_a_run_in_docker_records_its_containers_and_says_so(tmp_path):
    script = {"solo": [[bash("git log --oneline | wc -l"), SUBMIT]]}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"models": {"solo": {
        "model": f"scripted/{tmp_path / 'script.yaml'}", "prices": {"input": 1.0, "output": 2.0}}}}))
    done = swepipe("run", "--strategy", "solo", "--instance-ids", TINYQ.instance_id, "--config", "config.yaml",
                   "--run-id", "solo-sealed", cwd=tmp_path)
    assert "sealed: 1 of 1 containers; network off" in done.stdout and "Warning" not in done.stdout
    sealed = RunLayout(tmp_path / "runs" / "solo-sealed")
    found = finished_predictions(sealed.predictions)[TINYQ.instance_id]["containers"]
    assert [(c["role"], c["runtime"], c["sealed"], c["network"]) for c in found] == [("solo", "docker", True, False)]
