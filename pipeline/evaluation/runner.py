"""Scoring one prediction in a fresh container of the task's image."""

from __future__ import annotations

import json
import tarfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import requests

from pipeline import __version__, patchtext, stopping
from pipeline.errors import RuntimeUnavailable, SwepipeError, describe, is_transport_error
from pipeline.evaluation.engine import EngineDown, InfraError, engine_down, through_breaker
from pipeline.evaluation.files import extract_archive, tar_of
from pipeline.evaluation.logs import LOG_LIMIT, save_capped
from pipeline.evaluation.profiles import DEFAULT_PROFILE, scoring_profile
from pipeline.records import EvalResult
from pipeline.storage import redact_file
from pipeline.evaluation.protocol import (PROTOCOL_VERSION, WORKSPACE, dockerfile_env_exports, entry_script, judge,
                                          parse_statuses, strip_binary_sections)
from pipeline.runtime import containers
from pipeline.runtime.image_names import image_name
from pipeline.runtime.images import ensure_image
from pipeline.runtime.limits import ContainerLimits, container_limits, with_disk_quota
from pipeline.tasks import Task

CATEGORIES = ("resolved", "tests_failed", "patch_failed", "timeout", "infra_error")
TEST_LOGS = ("stdout.log", "stderr.log")
COLLECTED = {*TEST_LOGS, "output.json", "apply_status"}


@dataclass
class EvalSettings:
    image_template: str
    run_scripts: Path | None = None  # <dir>/<instance_id>/{run_script.sh,parser.py}
    dockerfiles: Path | None = None  # <dir>/{base,instance}_dockerfile/<instance_id>/Dockerfile
    timeout: float | None = None  # None: the profile's
    platform: str | None = None
    network: bool = False  # off, as for agents; --eval-network for tasks whose tests need it
    run_id: str = "eval"
    limits: ContainerLimits | None = None  # None: the defaults for one container (pipeline.runtime.limits)
    log_limit: int = LOG_LIMIT  # bytes kept of each log (pipeline.evaluation.logs)
    profile: str = DEFAULT_PROFILE  # the resources and time limit (pipeline.evaluation.profiles)
    seed: int | None = None  # given to the tests as SWEPIPE_SCORING_SEED (validate's replica number)

    @property
    def time_limit(self) -> float:
        return self.timeout or scoring_profile(self.profile).timeout

    def container_limits(self) -> ContainerLimits:
        """The limits of a scoring container: the given (or one container's default), shaped by the profile."""
        return scoring_profile(self.profile).limits(self.limits or container_limits())


def evaluate(task: Task, patch: str, out_dir: Path, settings: EvalSettings) -> dict:
    """Run the official protocol for one patch; writes the artefacts and returns the result record."""
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    applied_patch = strip_binary_sections(patch)
    patchtext.write(out_dir / "patch.diff", applied_patch)
    limits = settings.container_limits()
    record = {"instance_id": task.instance_id, "resolved": False, "category": "infra_error",
              "patch_empty": not patch.strip(), "patch_applied": None,
              "binary_sections_stripped": applied_patch != patch, "network": settings.network,
              "limits": limits.describe(),
              "scorer": {"swepipe": __version__, "protocol": PROTOCOL_VERSION, "profile": settings.profile,
                         "timeout": settings.time_limit}}
    if settings.seed is not None:
        record["scorer"]["seed"] = settings.seed
    try:
        workspace = _workspace_files(task, applied_patch, settings)
        (out_dir / "entryscript.sh").write_bytes(workspace["entryscript.sh"])
        image = image_name(settings.image_template, task.to_row())
        record["image"] = image
        exit_code, timed_out, identity = through_breaker(
            lambda: _run_container(task, image, workspace, out_dir, settings, limits))
        record["scorer"].update(identity)
        record["entry_exit_code"] = exit_code
        record.update(_judge_outputs(task, out_dir, timed_out))
        record["category"] = _category(record)
    except (InfraError, SwepipeError) as error:  # InfraError: Docker failed under it (pipeline.evaluation.engine)
        record["error"] = str(error)
    record["duration"] = round(time.monotonic() - started, 2)
    return record


def _workspace_files(task: Task, patch: str, settings: EvalSettings) -> dict[str, bytes]:
    scripts = {}
    for name in ("run_script.sh", "parser.py"):
        path = settings.run_scripts / task.instance_id / name if settings.run_scripts else None
        if path is None or not path.is_file():
            raise InfraError(f"no {name} for {task.instance_id}" + (f" under {settings.run_scripts}" if path else
                             "; pass --run-scripts DIR laid out as DIR/<instance_id>/" + name))
        scripts[name] = path.read_bytes()
    exports = []
    if settings.dockerfiles:
        contents = []
        for kind in ("base_dockerfile", "instance_dockerfile"):
            path = settings.dockerfiles / kind / task.instance_id / "Dockerfile"
            if not path.is_file():
                raise InfraError(f"no Dockerfile at {path}")
            contents.append(path.read_text(encoding="utf-8", errors="replace"))
        exports = dockerfile_env_exports(*contents)
    return {**scripts, "patch.diff": patchtext.to_bytes(patch),
            "entryscript.sh": entry_script(task, exports).encode("utf-8")}


def _run_container(task: Task, image: str, workspace: dict[str, bytes], out_dir: Path,
                   settings: EvalSettings, limits: ContainerLimits) -> tuple[int | None, bool, dict]:
    """(exit code, timed out, the image's identity: ``image_identity``) of the entry script in a fresh container of
    ``image``, its outputs saved in ``out_dir``. Every Docker or transport failure raises InfraError (EngineDown: the
    engine did not answer), a stop raises Stopped."""
    try:
        return _in_container(task, image, workspace, out_dir, settings, limits)
    except stopping.Stopped:
        raise
    except (RuntimeUnavailable, Exception) as error:  # RuntimeUnavailable is an InfrastructureFault, no Exception
        if not isinstance(error, RuntimeUnavailable) and not is_transport_error(error):
            raise
        if stopping.requested():  # what this instance got so far is not a result
            raise stopping.Stopped(task.instance_id) from error
        text = str(error) if isinstance(error, RuntimeUnavailable) else \
            f"the container of {image} failed: {describe(error)}"
        raise (EngineDown if engine_down(error) else InfraError)(text) from error


def _in_container(task: Task, image: str, workspace: dict[str, bytes], out_dir: Path,
                  settings: EvalSettings, limits: ContainerLimits) -> tuple[int | None, bool, dict]:
    identity = image_identity(ensure_image(image, platform=settings.platform, show_progress=False))
    client = containers.client()
    containers.install_cleanup_handlers()
    container = with_disk_quota(
        client.containers.create, limits, client,
        image=image, entrypoint=["/bin/bash"], command=["-c", f"bash {WORKSPACE}/entryscript.sh"],
        labels=containers.labels(settings.run_id, **{"swepipe.instance_id": task.instance_id[:200]}),
        network_disabled=not settings.network, platform=settings.platform, **limits.docker_options(),
        environment={"SWEPIPE_SCORING_SEED": str(settings.seed)} if settings.seed is not None else None)
    containers.track(container)
    try:
        container.put_archive("/", tar_of(workspace, WORKSPACE))
        container.start()
        exit_code, timed_out = _wait(container, settings.time_limit)
        if stopping.requested():  # what this instance got so far is not a result
            raise stopping.Stopped(task.instance_id)
        save_capped(container.logs(stream=True, follow=False), out_dir / "entry.log", settings.log_limit)
        chunks, _ = container.get_archive(WORKSPACE)
        try:
            extract_archive(chunks, COLLECTED, out_dir, dict.fromkeys(TEST_LOGS, settings.log_limit))
        except tarfile.TarError as error:  # a stream cut short: the engine went away while sending it
            raise InfraError(f"the outputs of the container of {image} cannot be read: {error}") from error
        for log in ("entry.log", *TEST_LOGS):  # not output.json: test names stay exact
            redact_file(out_dir / log)
        return exit_code, timed_out, identity
    finally:
        containers.remove(container)


def image_identity(image) -> dict:
    """What names the scored image exactly: its id (the digest of its config, the same on every machine for the
    same build) and, for an image pulled from a registry, its repository digest (``repo@sha256:...``, what a
    reader can pull again); None for one built here and never pushed."""
    digests = (image.attrs or {}).get("RepoDigests") or []
    return {"image_id": image.id, "image_digest": digests[0] if digests else None}


def _wait(container, timeout: float) -> tuple[int | None, bool]:
    """(exit code, False), or (None, True) when the tests ran out of time (the container is then killed)."""
    started = time.monotonic()
    try:
        return container.wait(timeout=timeout).get("StatusCode"), False
    except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
        if time.monotonic() - started < timeout:
            raise  # the engine went away before the tests' time was up: no timeout, an infrastructure error
        container.kill()
        return None, True


def _judge_outputs(task: Task, out_dir: Path, timed_out: bool) -> dict:
    status_file = out_dir / "apply_status"
    applied = status_file.read_text().strip() == "0" if status_file.exists() else None
    result = {"patch_applied": applied}
    output_file = out_dir / "output.json"
    statuses: dict[str, str] = {}
    if output_file.exists():
        try:
            statuses = parse_statuses(json.loads(output_file.read_text(encoding="utf-8", errors="replace")))
        except (ValueError, json.JSONDecodeError) as error:
            result["error"] = f"output.json cannot be read: {error}"
    elif not timed_out:
        result["error"] = "the parser wrote no output.json (see stdout.log, stderr.log, entry.log)"
    verdict = judge(task, statuses)
    # No output means no test passed: the official verdict is then "not resolved".
    result.update(resolved=verdict.resolved and output_file.exists() and not timed_out, timed_out=timed_out,
                  FAIL_TO_PASS=asdict(verdict.fail_to_pass), PASS_TO_PASS=asdict(verdict.pass_to_pass),
                  near_misses=verdict.near_misses, statuses=statuses)
    return result


def _category(record: dict) -> str:
    if record["resolved"]:
        return "resolved"
    if record.get("timed_out"):
        return "timeout"
    if record["patch_applied"] is False and not record["patch_empty"]:
        return "patch_failed"
    return "tests_failed"


def save_result(out_dir: Path, record: dict) -> None:
    EvalResult.of(record).write(out_dir / "result.json")
