"""The image lifecycle on real Docker: `swepipe images check` (present, missing, an unreachable registry), the
preflight of `swepipe run`, pruning least recently used first with the in-use guard, and a run whose image budget
is smaller than the images it needs.

Every image here is a throwaway built for the test (a LABEL on a bundled image: a new image id, so its own
sanitised copy, and no new layer), removed after; the bundled images and other tests' images are never touched.
"""

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest
import yaml
from leftovers import run_containers
from scripted_pipeline import SUBMIT, write_config

from pipeline.runtime import containers
from pipeline.runtime.images import cache as image_cache
from pipeline.runtime.images import disk as image_disk
from pipeline.runtime.images import prune as image_prune
from pipeline.runtime.images.names import image_name, local_image
from pipeline.runtime.images.prepare import prepare_image
from pipeline.tasks import load_tasks
from pipeline.tasks.datasets import BUNDLED_IMAGE_TEMPLATE

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TASKS = {t.repo.split("/")[-1]: t for t in load_tasks("bundled")}
CHOSEN = [TASKS["cronlite"], TASKS["cursorly"], TASKS["flagpole"]]


def swepipe(*args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "COLUMNS": "250", **(env or {})}, stdin=subprocess.DEVNULL, timeout=900)


@pytest.fixture
def repository():
    """A repository name of throwaway task images; every image under it (and their sanitised copies) removed after."""
    name = f"swepipe-test-cache-{uuid.uuid4().hex[:8]}"
    yield name
    client = containers.client()
    ids = {i.id for i in client.images.list(name=name)}
    for copy in image_disk.sanitised_images(ids):
        for tag in copy.tags:
            client.images.remove(tag, force=True)
    for image in client.images.list(name=name):
        for tag in image.tags:
            client.images.remove(tag, force=True)


def throwaway(repository: str, task, tag: str | None = None) -> str:
    """An image of ``task`` under ``repository`` with its own id: the bundled image plus a label."""
    source = image_name(BUNDLED_IMAGE_TEMPLATE, task.to_row())
    target = f"{repository}:{tag or task.to_row()['dockerhub_tag']}"
    dockerfile = f"FROM {source}\nLABEL swepipe.test={repository}\n".encode()
    containers.client().images.build(fileobj=io.BytesIO(dockerfile), tag=target, rm=True)
    return target


def dataset(tmp_path, tasks):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t.to_row()) + "\n" for t in tasks))
    return path


@pytest.fixture
def silent_registry():
    """A registry address that accepts connections and never answers (a hung registry)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held, stop = [], threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_images_check_reports_present_missing_and_sizes(tmp_path, repository):
    present, absent = CHOSEN[0], CHOSEN[1]
    throwaway(repository, present)
    data = dataset(tmp_path, [present, absent])
    template = f"{repository}:{{dockerhub_tag}}"

    done = swepipe("images", "check", "--dataset", str(data), "--image-template", template, "--instance-ids",
                   present.instance_id, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    size = image_disk.disk_bytes([containers.client().images.get(image_name(template, present.to_row())).id])
    assert size > 300e6  # the bundled image's layers, counted as Docker stores them
    assert f"{size / 1e9:.2f} GB" in done.stdout and "images: 1 of 1 present" in done.stdout
    assert "free for Docker" in done.stdout

    (tmp_path / "budget.yaml").write_text(yaml.safe_dump({"containers": {"image_cache_gb": 0.1}}))
    done = swepipe("images", "check", "--dataset", str(data), "--image-template", template, "--config",
                   "budget.yaml", "--registry-timeout", "5", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "images: 1 of 2 present" in done.stdout and "1 cannot be had" in done.stdout
    assert "cache budget 0.10 GB" in done.stdout and "take more than the cache budget" in done.stdout
    # A local name with no registry host goes to Docker Hub, which is unreachable here: not a hang, a reason.
    assert "missing" in done.stdout and "unknown (registry" in done.stdout
    assert "no registry confirmed it has them" in done.stdout and absent.to_row()["dockerhub_tag"] in done.stdout


def test_unreachable_registry_is_reported_within_the_timeout(tmp_path, silent_registry):
    task = CHOSEN[0]
    started = time.monotonic()
    done = swepipe("images", "check", "--instance-ids", task.instance_id, "--image-template",
                   f"{silent_registry}/swepipe/none:{{dockerhub_tag}}", "--registry-timeout", "3", cwd=tmp_path)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stdout + done.stderr
    assert "unknown (registry unreachable: " in " ".join(done.stdout.split())
    assert took < 120  # bounded by the timeout, not by the engine's own (minutes) wait on a silent registry


def test_run_stops_at_once_when_an_image_cannot_be_had(tmp_path):
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"junior": [[SUBMIT]]}))
    write_config(tmp_path / "config.yaml", tmp_path / "script.yaml", juniors={"k": 1})
    task = CHOSEN[0]
    args = ("run", "--strategy", "vote", "--instance-ids", task.instance_id, "--config", "config.yaml",
            "--image-template", "nosuch.invalid/swepipe/none:{dockerhub_tag}", "--run-id", "pre")
    done = swepipe(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "images: 0 of 1 present" in done.stdout and "no registry confirmed" in " ".join(done.stderr.split())
    assert "--skip-image-check" in done.stderr
    assert not (tmp_path / "runs" / "pre" / "tasks").exists()  # nothing started, nothing spent

    done = swepipe(*args, "--skip-image-check", cwd=tmp_path)  # the task is tried, and fails as infra
    assert done.returncode == 1 and "images:" not in done.stdout, done.stdout + done.stderr


def test_prune_removes_least_recently_used_first_and_never_an_image_in_use(repository):
    names = [throwaway(repository, task) for task in CHOSEN]
    client = containers.client()
    sanitised = {name: prepare_image(name, task.base_commit) for name, task in zip(names, CHOSEN, strict=True)}
    for name in (names[1], names[0], names[2]):  # least recently used: names[1], then names[0]
        image_disk.touch(name)
        time.sleep(0.01)
    ids = [client.images.get(n).id for n in names]
    whole = image_disk.disk_bytes([*ids, *(client.images.get(s).id for s in sanitised.values())])
    alone = image_disk.disk_bytes([ids[2], client.images.get(sanitised[names[2]]).id])
    two = image_disk.disk_bytes([*ids[1:], *(client.images.get(sanitised[n]).id for n in names[1:])])

    # A running swepipe container of the least recently used image's sanitised copy: that pair stays.
    busy = client.containers.run(sanitised[names[1]], ["sleep", "300"], detach=True,
                                 labels=containers.labels("image-cache-test"))
    try:
        result = image_prune.prune(names, two)
    finally:
        busy.remove(force=True)
    assert result.before == whole
    assert names[1] in result.kept_in_use
    assert result.removed == [sanitised[names[0]], names[0]]  # next least recently used, its copy first
    assert result.after == two
    assert local_image(names[0]) is None and local_image(sanitised[names[0]]) is None
    assert local_image(names[1]) is not None and local_image(names[2]) is not None
    assert local_image(image_name(BUNDLED_IMAGE_TEMPLATE, CHOSEN[0].to_row())) is not None  # its tag

    # Protected by name (a task running now): kept; with nothing in use, the least recently used goes first.
    result = image_prune.prune(names, alone, protect=[names[2]])
    assert result.removed == [sanitised[names[1]], names[1]] and result.after == alone


def test_run_with_a_budget_smaller_than_its_images_holds_it_after_each_task(tmp_path, repository):
    names = [throwaway(repository, task) for task in CHOSEN]
    client = containers.client()
    sizes = [image_disk.disk_bytes([client.images.get(n).id]) for n in names]
    everything = image_disk.disk_bytes(client.images.get(n).id for n in names)
    budget = max(sizes) * 1.2  # room for any one task's image and its sanitised copy, not for all three
    assert everything > budget
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"junior": [[SUBMIT]]}))
    write_config(tmp_path / "config.yaml", tmp_path / "script.yaml", juniors={"k": 1},
                 containers={"image_cache_gb": budget / 1e9})
    done = swepipe("run", "--strategy", "vote", "--dataset", str(dataset(tmp_path, CHOSEN)), "--config",
                   "config.yaml", "--image-template", f"{repository}:{{dockerhub_tag}}", "--run-id", "cache-budget",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = tmp_path / "runs" / "cache-budget"
    assert len((run / "predictions.jsonl").read_text().splitlines()) == 3
    rows = [json.loads(line) for line in (run / "image_cache.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "after_task" in r]  # the prunes (a prefetch is a line too)
    assert [r["after_task"] for r in rows] and sorted(r["after_task"] for r in rows) == sorted(
        t.instance_id for t in CHOSEN)
    for row in rows:  # measured after each task: the run's images (in use by a running task or not) within budget
        assert row["run_images_bytes"] <= budget, row
    assert any(row["removed"] for row in rows)  # the budget made it remove images
    # Measured here too, from Docker: what is left of the run's images and their copies fits.
    left = [i.id for n in names if (i := local_image(n)) is not None]
    assert image_disk.disk_bytes([*left, *(c.id for c in image_disk.sanitised_images(set(left)))]) <= budget
    assert not run_containers("cache-budget")


def test_a_registry_that_does_not_answer_is_asked_once_per_wave_not_once_per_image(silent_registry):
    """731 images on an unreachable registry must not take 731 timeouts: after the first answer of 'unknown', the
    host's other images are not asked again."""
    from pipeline.runtime.images.preflight import preflight

    names = [f"{silent_registry}/swepipe/none:task-{n}" for n in range(40)]
    result = preflight(names, registry_timeout=2)
    answers = [status.registry for status in result.images]
    assert all(answer.startswith("unknown (registry unreachable: ") for answer in answers)
    assert sum("(not asked again)" in answer for answer in answers) == 40 - 16  # only the first wave waited


def test_a_container_removed_while_the_cache_lists_them_is_simply_gone(monkeypatch):
    """Tasks on one Docker engine end side by side: a container another task removes between the listing and its
    inspection must not make the prune after a task (images in use) or a cleanup fail; that prune's failure left
    a task with no image_cache.jsonl line on a cluster."""
    from docker.models.containers import ContainerCollection

    client = containers.client()
    image = image_name(BUNDLED_IMAGE_TEMPLATE, CHOSEN[0].to_row())
    run_id = f"vanishing-{uuid.uuid4().hex[:8]}"
    doomed = client.containers.run(image, ["sleep", "300"], detach=True, labels=containers.labels(run_id))
    stays = client.containers.run(image, ["sleep", "300"], detach=True, labels=containers.labels(run_id))
    real_get = ContainerCollection.get

    def get_after_another_task_removed_it(self, container_id):
        if container_id == doomed.id:
            real_get(self, container_id).remove(force=True)
        return real_get(self, container_id)

    try:
        monkeypatch.setattr(ContainerCollection, "get", get_after_another_task_removed_it)
        assert client.images.get(image).id in image_prune.images_in_use()  # the other container's image
        monkeypatch.undo()
        doomed = client.containers.run(image, ["sleep", "300"], detach=True, labels=containers.labels(run_id))
        monkeypatch.setattr(ContainerCollection, "get", get_after_another_task_removed_it)
        assert containers.remove_labelled(run_id) == [stays.name]
    finally:
        monkeypatch.undo()
        for container in (doomed, stays):
            with contextlib.suppress(Exception):
                container.remove(force=True)


def test_a_docker_engine_gone_after_a_task_fails_its_prune_and_nothing_else(monkeypatch):
    """The prune after a task runs in the task's `finally`: an engine that no longer answers there (a
    RuntimeUnavailable) must be a logged line, never an error that ends the run."""
    from pipeline.errors import RuntimeUnavailable

    said = []
    cache = image_cache.RunImageCache(BUNDLED_IMAGE_TEMPLATE, budget_gb=1.0, log=said.append)
    task = load_tasks("bundled")[0]
    cache.start(task)

    def gone():
        raise RuntimeUnavailable("no Docker engine answers (connection refused)")

    monkeypatch.setattr(containers, "client", gone)
    monkeypatch.setattr(image_cache, "touch", lambda *args: None)  # the access time is kept on disk, not asked
    assert cache.finish(task) is None
    assert any("could not prune after" in line and "no Docker engine answers" in line for line in said)
    cache.close()
