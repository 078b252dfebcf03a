"""Pulling task images from a registry, on real Docker: a registry's rate limit (429) retried with backoff and named
when it persists, with the user's `docker login` credentials; a stop that cuts the wait short; the next task's image
pulled while the current task runs (within the image budget; a failed prefetch is no error); the preflight of
`swepipe eval`.

The registry is tests/fake_registry.py on 127.0.0.1 (the engine pulls from it over plain HTTP, as it trusts
127.0.0.0/8 by default); nothing leaves the loopback interface. The run tests serve bundled task images from a
`docker save` archive under new image ids, removed after; the bundled images are never touched.
"""

import base64
import json
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest
import yaml
from fake_registry import FakeRegistry, digest, from_docker_save
from leftovers import run_containers
from scripted_pipeline import SUBMIT, write_config

from pipeline.cli.eval_command import predictions_run_id
from pipeline.control import stopping
from pipeline.errors import RuntimeUnavailable
from pipeline.runtime import containers
from pipeline.runtime.images import disk as image_disk
from pipeline.runtime.images import prepare as images
from pipeline.runtime.images.names import image_name, local_image
from pipeline.runtime.images.prepare import ensure_image
from pipeline.tasks import load_tasks
from pipeline.tasks.datasets import BUNDLED_IMAGE_TEMPLATE

pytestmark = [pytest.mark.docker]
TASKS = {t.repo.split("/")[-1]: t for t in load_tasks("bundled")}
PYTHON = [TASKS["cursorly"], TASKS["ledgerkit"], TASKS["markroll"]]  # their images share all but a small top layer


def scored(folder):
    """Where `swepipe eval --predictions preds.jsonl` run in ``folder`` writes its results."""
    return folder / "runs" / predictions_run_id(folder / "preds.jsonl") / "eval"


def swepipe(*args, cwd):
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "COLUMNS": "250"}, stdin=subprocess.DEVNULL, timeout=900)


def remove_images(prefix: str) -> None:
    """Every image named ``prefix``... and the sanitised copies made of them."""
    client = containers.client()
    found = [i for i in client.images.list() if any(t.startswith(prefix) for t in i.tags)]
    for copy in image_disk.sanitised_images({i.id for i in found}):
        for tag in copy.tags:
            client.images.remove(tag, force=True)
    for image in found:
        for tag in image.tags:
            if tag.startswith(prefix):
                client.images.remove(tag, force=True)


def tag_pulls(registry: FakeRegistry, repository: str, tag: str) -> list[int]:
    """The answers to the engine's manifest requests by tag: a pull asks HEAD (then GET when refused)."""
    return [r["status"] for r in registry.requests if r["path"] == f"/v2/{repository}/manifests/{tag}"]


# ---------------------------------------------------------------- retries at the engine's boundary


@pytest.fixture
def repository():
    return f"swepipe-test-pull-{uuid.uuid4().hex[:8]}"


def test_a_rate_limited_pull_is_retried_with_backoff_and_the_users_docker_login(tmp_path, monkeypatch, repository):
    with FakeRegistry(credentials=("swepipe", "s3cret")) as registry:
        image_id = registry.add_tiny_image(repository, "v1", label=repository)
        registry.rate_limited[(repository, "v1")] = 2  # the first two pulls are refused
        # What `docker login 127.0.0.1:PORT` leaves: the SDK reads it when the client is made, as the CLI does.
        config = tmp_path / "docker-config"
        config.mkdir()
        login = base64.b64encode(b"swepipe:s3cret").decode()
        (config / "config.json").write_text(json.dumps({"auths": {registry.host: {"auth": login}}}))
        monkeypatch.setenv("DOCKER_CONFIG", str(config))
        monkeypatch.setattr(containers, "_client", None)
        monkeypatch.setattr(images, "PULL_BACKOFF", 0.5)
        name = f"{registry.host}/{repository}:v1"
        started = time.monotonic()
        try:
            pulled = ensure_image(name, show_progress=False)
            took = time.monotonic() - started
        finally:
            remove_images(f"{registry.host}/{repository}")
    assert pulled.id == image_id
    assert tag_pulls(registry, repository, "v1") == [429, 429, 429, 429, 200]  # refused twice, the third pull got it
    assert took >= 0.5 * 0.5 + 1.0 * 0.5  # two waits, each at least half its exponential step
    asked = [r for r in registry.requests if r["path"].startswith(f"/v2/{repository}/")]
    assert asked and all(r["authorization"] == f"Basic {login}" for r in asked)  # every try carried the login


def test_a_rate_limit_that_persists_is_named_with_what_to_do_and_other_errors_are_not_retried(monkeypatch, repository):
    monkeypatch.setattr(images, "PULL_ATTEMPTS", 3)
    monkeypatch.setattr(images, "PULL_BACKOFF", 0.1)
    with FakeRegistry() as registry:
        registry.add_tiny_image(repository, "v1", label=repository)
        registry.rate_limited[(repository, "v1")] = -1  # every pull refused
        name = f"{registry.host}/{repository}:v1"
        with pytest.raises(RuntimeUnavailable) as limited:
            ensure_image(name, show_progress=False)
        with pytest.raises(RuntimeUnavailable) as missing:
            ensure_image(f"{registry.host}/{repository}:nosuch", show_progress=False)
    text = " ".join(str(limited.value).split())
    assert "rate limit" in text and "429" in text and "3 time(s)" in text
    assert f"`docker login {registry.host}`" in text  # the registry, named, and what raises the limit
    assert "--image-template" in text and "registry mirror" in text and "private registry" in text
    refused = [r for r in registry.requests if r["method"] == "GET" and r["path"] == f"/v2/{repository}/manifests/v1"]
    assert len(refused) == 3 and {r["status"] for r in refused} == {429}
    # A missing image is not a rate limit: asked once, and its error says what it is.
    assert "rate limit" not in str(missing.value) and "manifest unknown" in str(missing.value)
    assert tag_pulls(registry, repository, "nosuch") == [404, 404]  # one pull (HEAD, then GET), not retried
    assert local_image(name) is None


def test_a_stop_cuts_the_wait_between_pulls_short(monkeypatch, repository):
    monkeypatch.setattr(images, "PULL_BACKOFF", 60.0)  # each wait at least 30 s
    monkeypatch.setattr(images, "PULL_MAX_WAIT", 60.0)
    with FakeRegistry() as registry:
        registry.add_tiny_image(repository, "v1", label=repository)
        registry.rate_limited[(repository, "v1")] = -1
        timer = threading.Timer(1.5, stopping.STOP.set)  # what Ctrl-C does first
        started = time.monotonic()
        timer.start()
        try:
            with pytest.raises(stopping.Stopped):
                ensure_image(f"{registry.host}/{repository}:v1", show_progress=False)
            took = time.monotonic() - started
        finally:
            timer.cancel()
            stopping.STOP.clear()
    assert took < 25, took
    refused = [r for r in registry.requests if r["method"] == "GET" and r["path"] == f"/v2/{repository}/manifests/v1"]
    assert len(refused) == 1  # the stop came during the first wait: no second pull


# ---------------------------------------------------------------- prefetch, in runs


@pytest.fixture(scope="module")
def saved_images(tmp_path_factory):
    """The python bundled tasks' images as a `docker save` archive (their shared layers once)."""
    names = [image_name(BUNDLED_IMAGE_TEMPLATE, task.to_row()) for task in PYTHON]
    archive = tmp_path_factory.mktemp("saved") / "images.tar"
    subprocess.run(["docker", "save", "-o", str(archive), *names], check=True, capture_output=True)
    saved = from_docker_save(archive)
    yield {task.instance_id: saved[name] for task, name in zip(PYTHON, names, strict=True)}
    archive.unlink()


@pytest.fixture
def served(saved_images):
    """A registry serving the python tasks' images under a new repository (new image ids: a label), so they are
    missing here until pulled; the engine has learned their layers once (a first pull), as a machine that ran
    tasks of the same repositories has."""
    repository = f"swepipe-test-prefetch-{uuid.uuid4().hex[:8]}"
    with FakeRegistry() as registry:
        for task in PYTHON:
            config, layers = saved_images[task.instance_id]
            config = {**config, "config": {**config["config"], "Labels": {
                **(config["config"].get("Labels") or {}), "swepipe.test": repository}}}
            registry.add_image(repository, task.to_row()["dockerhub_tag"], json.dumps(config).encode(), layers)
        config, layers = saved_images[PYTHON[0].instance_id]
        registry.add_image(repository, "warm", json.dumps({**config, "config": {**config["config"], "Labels": {
            "swepipe.test": repository + "-warm"}}}).encode(), layers)
        try:
            ensure_image(f"{registry.host}/{repository}:warm", show_progress=False)
            registry.requests.clear()
            yield registry, repository
        finally:
            remove_images(f"{registry.host}/{repository}")


def dataset(tmp_path, tasks):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t.to_row()) + "\n" for t in tasks))
    return path


def script(tmp_path, delay: float):
    """One junior reply per task, after ``delay`` seconds (a model's latency: the task runs that long)."""
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"junior": [[{**SUBMIT, "delay": delay}]]}))


@pytest.mark.slow
def test_the_next_tasks_image_is_pulled_while_a_task_runs_and_a_failed_prefetch_is_no_error(tmp_path, served):
    registry, repository = served
    first, second, third = PYTHON
    registry.rate_limited[(repository, third.to_row()["dockerhub_tag"])] = 1  # the prefetch of the third fails
    script(tmp_path, delay=8)
    write_config(tmp_path / "config.yaml", tmp_path / "script.yaml", juniors={"k": 1},
                 containers={"image_cache_gb": 100})
    done = swepipe("run", "--strategy", "vote", "--dataset", str(dataset(tmp_path, PYTHON)), "--config", "config.yaml",
                   "--image-template", f"{registry.host}/{repository}:{{dockerhub_tag}}", "--run-id", "ahead",
                   "--workers", "1", "--skip-image-check", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = tmp_path / "runs" / "ahead"
    predictions = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    assert sorted(p["instance_id"] for p in predictions) == sorted(t.instance_id for t in PYTHON)
    assert not any(p.get("infra_error") for p in predictions)  # (an empty patch is their answer: no edit scripted)
    rows = [json.loads(line) for line in (run / "image_cache.jsonl").read_text().splitlines()]
    ahead = {row["for_task"]: row for row in rows if "prefetch" in row}
    finished = {row["after_task"]: row for row in rows if "after_task" in row}
    assert set(ahead) == {second.instance_id, third.instance_id}, rows  # never the first: it runs at once

    # The second task's image came while the first task ran, and the second task did not pull it again.
    assert ahead[second.instance_id]["outcome"] == "pulled", rows
    assert ahead[second.instance_id]["time"] < finished[first.instance_id]["time"]
    assert tag_pulls(registry, repository, second.to_row()["dockerhub_tag"]) == [200]
    # The third's prefetch was refused (a rate limit): recorded, not an error; its task pulled the image itself.
    assert ahead[third.instance_id]["outcome"] == "failed", rows
    assert "toomanyrequests" in ahead[third.instance_id]["reason"]
    assert tag_pulls(registry, repository, third.to_row()["dockerhub_tag"]) == [429, 429, 200]
    assert not run_containers("ahead")


@pytest.mark.slow
def test_a_prefetch_that_would_pass_the_image_budget_is_not_made(tmp_path, served):
    registry, repository = served
    first, second = PYTHON[:2]
    client = containers.client()
    alone = image_disk.disk_bytes([client.images.get(image_name(BUNDLED_IMAGE_TEMPLATE, first.to_row())).id])
    budget = alone * 1.3  # one task's image and its sanitised copy fit; a second image (by the estimate) does not
    script(tmp_path, delay=4)
    write_config(tmp_path / "config.yaml", tmp_path / "script.yaml", juniors={"k": 1},
                 containers={"image_cache_gb": budget / 1e9})
    done = swepipe("run", "--strategy", "vote", "--dataset", str(dataset(tmp_path, [first, second])), "--config",
                   "config.yaml", "--image-template", f"{registry.host}/{repository}:{{dockerhub_tag}}",
                   "--run-id", "tight", "--workers", "1", "--skip-image-check", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = tmp_path / "runs" / "tight"
    assert len((run / "predictions.jsonl").read_text().splitlines()) == 2
    rows = [json.loads(line) for line in (run / "image_cache.jsonl").read_text().splitlines()]
    ahead = [row for row in rows if "prefetch" in row]
    assert [(row["for_task"], row["outcome"]) for row in ahead] == [(second.instance_id, "skipped")], rows
    assert "budget" in ahead[0]["reason"] and ahead[0]["estimate_bytes"] >= alone * 0.9
    for row in rows:
        if "after_task" in row:
            assert row["run_images_bytes"] <= budget, row
    assert tag_pulls(registry, repository, second.to_row()["dockerhub_tag"]) == [200]  # by its task, once


@pytest.mark.slow
def test_a_task_scored_in_a_pulled_image_records_the_registry_digest_a_reader_can_pull_again(tmp_path, served):
    registry, repository = served
    task = PYTHON[0]
    tag = task.to_row()["dockerhub_tag"]
    (tmp_path / "preds.jsonl").write_text(json.dumps({"instance_id": task.instance_id,
                                                      "model_patch": task.patch}) + "\n")
    done = swepipe("eval", "--predictions", "preds.jsonl", "--image-template",
                   f"{registry.host}/{repository}:{{dockerhub_tag}}", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((scored(tmp_path) / task.instance_id / "result.json").read_text())
    assert result["resolved"] is True
    manifest = registry.manifests[(repository, tag)]
    assert result["scorer"]["image_digest"] == f"{registry.host}/{repository}@{digest(manifest)}"
    assert result["scorer"]["image_id"] == containers.client().images.get(f"{registry.host}/{repository}:{tag}").id


# ---------------------------------------------------------------- the preflight of eval


def test_eval_says_at_once_when_an_image_cannot_be_had(tmp_path, repository):
    task = PYTHON[0]
    (tmp_path / "preds.jsonl").write_text(json.dumps({"instance_id": task.instance_id,
                                                      "model_patch": task.patch}) + "\n")
    with FakeRegistry() as registry:  # answers, and has no such image
        args = ("eval", "--predictions", "preds.jsonl", "--image-template",
                f"{registry.host}/{repository}:{{dockerhub_tag}}")
        done = swepipe(*args, cwd=tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "images: 0 of 1 present" in done.stdout
        stderr = " ".join(done.stderr.split())
        assert "no registry confirmed" in stderr and "manifest unknown" in stderr and "--skip-image-check" in stderr
        assert not (scored(tmp_path) / task.instance_id).exists()  # nothing scored

        done = swepipe(*args, "--skip-image-check", cwd=tmp_path)  # scored, and fails as infrastructure
    assert "images:" not in done.stdout, done.stdout + done.stderr
    result = json.loads((scored(tmp_path) / task.instance_id / "result.json").read_text())
    assert result["category"] == "infra_error"
