"""Scoring one prediction: the tests in a fresh container of the task's image (their /workspace sent on its standard
input, the canaries planted beside them), then the parser apart from them, here or in another container, on the
tests' output as Docker recorded it (pipeline.evaluation.protocol says why), with integrity checks beside the
official verdict (pipeline.evaluation.integrity)."""

from __future__ import annotations

import itertools
import shutil
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import requests
from docker.errors import NotFound

from pipeline import __version__
from pipeline.control import stopping
from pipeline.errors import RuntimeUnavailable, SwepipeError, describe, transport_errors
from pipeline.evaluation import canaries, host_parser
from pipeline.evaluation.capture import StreamCapture, log_config, start_marker
from pipeline.evaluation.engine import EngineDown, InfraError, engine_down, through_breaker
from pipeline.evaluation.files import archive_digests, tar_stream
from pipeline.evaluation.integrity import (
    GRADER_OUTPUTS,
    IntegrityFinding,
    canary_findings,
    conflicting_findings,
    grader_findings,
    infrastructure_notes,
    summary_findings,
    summary_missing_findings,
)
from pipeline.evaluation.logs import LOG_LIMIT, save_capped
from pipeline.evaluation.parsing import OUTPUT_LIMIT, SEND_TIME, ParserContainer
from pipeline.evaluation.profiles import DEFAULT_PROFILE, scoring_profile
from pipeline.evaluation.protocol import (
    ENTRY_SCRIPT,
    GRADER_FILES,
    PARSE_SCRIPT,
    PARSER,
    PATCH,
    PROTOCOL_VERSION,
    RUN_SCRIPT,
    TEST_LOGS,
    WORKSPACE,
    OutputShapeError,
    dockerfile_env_exports,
    entry_script,
    judge,
    parser_script,
    passed_names,
    read_output,
    strip_binary_sections,
)
from pipeline.evaluation.summaries import RunnerSummaries, read_summaries
from pipeline.records import EvalResult
from pipeline.records.evaluation import EvalCategory
from pipeline.rundir.layout import ScoringFiles
from pipeline.rundir.storage import redact_file
from pipeline.runtime import containers
from pipeline.runtime.images.names import image_name
from pipeline.runtime.images.prepare import ensure_image
from pipeline.runtime.limits import DEFAULT_DISK, ContainerLimits, container_limits, with_disk_quota
from pipeline.runtime.output import BoundedOutput
from pipeline.tasks import Task
from pipeline.text import patchtext

PARSER_TIME = 60.0  # seconds the parser has at least, whatever the tests left of the time limit


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


@dataclass
class ScoringRun:
    """What the two containers of one scoring gave, beside the files they left in the output folder."""

    identity: ImageIdentity = field(default_factory=lambda: ImageIdentity())  # the image's (``image_identity``)
    exit_code: int | None = None  # the tests' container's
    timed_out: bool = False
    apply_status: str | None = None  # git apply's exit status, from the marker line
    canary_status: str | None = None  # the canaries' status, from the marker line (pipeline.evaluation.canaries)
    tests_started: bool = False  # the marker line was seen: the setup ended and the tests ran
    grader: list[IntegrityFinding] = field(default_factory=list)  # grader_written findings
    parser_exit_code: int | None = None
    output_size: int | None = None  # bytes of output.json; None: the parser wrote none
    parser_unfit_here: str | None = None  # why the parser ran in the task's image (None: on this machine, host_parser)
    summaries: RunnerSummaries = field(default_factory=RunnerSummaries)  # read from the tests' whole output
    output_dropped: int = 0  # bytes of the tests' output past the spool's limit (capture.SpoolBudget)


def evaluate(task: Task, patch: str, out_dir: Path, settings: EvalSettings) -> EvalResult:
    """Run the official protocol for one patch; writes the artefacts (not result.json) and returns the result
    record."""
    out_dir.mkdir(parents=True, exist_ok=True)
    saved = ScoringFiles(out_dir)
    saved.output.unlink(missing_ok=True)  # an earlier scoring's, into the same folder
    started = time.monotonic()
    applied_patch = strip_binary_sections(patch)
    patchtext.write(saved.patch, applied_patch)
    limits = settings.container_limits()
    record: _ResultData = {"instance_id": task.instance_id, "resolved": False, "official_resolved": False,
              "category": EvalCategory.INFRA_ERROR, "patch_sha256": patchtext.digest(patch),
              "patch_empty": not patch.strip(), "patch_applied": None,
              "binary_sections_stripped": applied_patch != patch, "network": settings.network,
              "limits": limits.describe(),
              "scorer": {"swepipe": __version__, "protocol": PROTOCOL_VERSION, "profile": settings.profile,
                         "timeout": settings.time_limit}}
    if settings.seed is not None:
        record["scorer"]["seed"] = settings.seed
    try:
        marker = start_marker(task.instance_id, applied_patch)
        workspace, parsing, plan = _workspace_files(task, applied_patch, settings, marker)
        saved.entry_script.write_bytes(workspace[ENTRY_SCRIPT])
        image = image_name(settings.image_template, task.to_row())
        record["image"] = image
        run = through_breaker(lambda: _run_containers(task, image, workspace, parsing, marker, out_dir, settings,
                                                      limits))
        record["scorer"] = {**record["scorer"], **run.identity}
        record["entry_exit_code"] = run.exit_code
        record["parser_exit_code"] = run.parser_exit_code
        record["scorer"]["parser"] = f"the task's image: {run.parser_unfit_here}" if run.parser_unfit_here else \
            "this machine's Python"
        if run.output_dropped:
            record["tests_output_dropped"] = run.output_dropped
        record.update(_judge_outputs(task, out_dir, run, plan))
        notes = infrastructure_notes(task, applied_patch)
        if notes:
            record["test_infrastructure"] = notes
        record["category"] = _category(record)
    except (InfraError, SwepipeError) as error:  # InfraError: Docker failed under it (pipeline.evaluation.engine)
        record["error"] = str(error)
    record["duration"] = round(time.monotonic() - started, 2)
    return EvalResult.of(record)


def _workspace_files(task: Task, patch: str, settings: EvalSettings,
                     marker: str) -> tuple[dict[str, bytes], dict[str, bytes], canaries.CanaryPlan]:
    """The files of the tests' /workspace, those of the parser's (but the logs), and the canaries planted."""
    scripts = {}
    for name in (RUN_SCRIPT, PARSER):
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
    plan = canaries.plan(task, scripts[RUN_SCRIPT].decode("utf-8", errors="replace"), patch)
    entry = entry_script(task, exports, marker, canaries.plant_script(plan, patch), plan.arguments)
    tests = {**scripts, PATCH: patchtext.to_bytes(patch), ENTRY_SCRIPT: entry.encode("utf-8")}
    return tests, {PARSER: scripts[PARSER], PARSE_SCRIPT: parser_script(exports).encode("utf-8")}, plan


def _run_containers(task: Task, image: str, workspace: dict[str, bytes], parsing: dict[str, bytes], marker: str,
                    out_dir: Path, settings: EvalSettings, limits: ContainerLimits) -> ScoringRun:
    """The tests, then the parser, each in a fresh container of ``image``; their outputs saved in ``out_dir``.
    Every Docker or transport failure raises InfraError (EngineDown: the engine did not answer), a stop raises
    Stopped."""
    try:
        return _in_containers(task, image, workspace, parsing, marker, out_dir, settings, limits)
    except stopping.Stopped:
        raise
    except transport_errors() + (RuntimeUnavailable,) as error:
        if stopping.requested():  # what this instance got so far is not a result
            raise stopping.Stopped(task.instance_id) from error
        text = str(error) if isinstance(error, RuntimeUnavailable) else \
            f"the container of {image} failed: {describe(error)}"
        raise (EngineDown if engine_down(error) else InfraError)(text) from error


def _in_containers(task: Task, image: str, workspace: dict[str, bytes], parsing: dict[str, bytes], marker: str,
                   out_dir: Path, settings: EvalSettings, limits: ContainerLimits) -> ScoringRun:
    run = ScoringRun(identity=image_identity(ensure_image(image, platform=settings.platform, show_progress=False)))
    started = time.monotonic()
    spool = Path(tempfile.mkdtemp(prefix=".tests-output-", dir=out_dir))  # the tests' whole output, for the parser
    parser: ParserContainer | None = None
    run.parser_unfit_here = host_parser.unfit(parsing[PARSER])
    try:
        tests = _container(task, image, ENTRY_SCRIPT, settings, limits, attached=True, stdin=True, receives=True)
        capture = None
        try:
            capture = StreamCapture(tests, marker, spool, settings.log_limit, limits.disk or DEFAULT_DISK, stdin=True)
            tests.start()
            capture.send(tar_stream(workspace, WORKSPACE), SEND_TIME)
            if run.parser_unfit_here:  # made ready while the tests run
                parser = _parser_container(task, image, parsing, settings, limits)
            run.exit_code, run.timed_out = _wait(tests, settings.time_limit)
            _check_stop(task)
            streams = capture.finish()
            run.tests_started = all(captured.found for captured in streams.values())
            run.apply_status = streams["stdout"].apply_status
            run.canary_status = streams["stdout"].canary_status
            run.output_dropped = capture.budget.dropped
        except BaseException:
            if capture is not None:
                capture.close()
            containers.remove(tests)
            raise
        capture.close()
        with ThreadPoolExecutor(1, thread_name_prefix="swepipe-tests-container") as aside:
            # while the parser reads the output: what the tests left in /workspace, then their container removed
            grader = aside.submit(_workspace_findings_and_removal, tests, workspace)
            run.summaries = read_summaries(*(spool / name for name in TEST_LOGS))
            printed = [captured.setup for captured in streams.values()]
            if run.tests_started and not run.timed_out:
                time_left = max(PARSER_TIME, settings.time_limit - (time.monotonic() - started))
                if not run.parser_unfit_here:
                    parsed = host_parser.parse_here(parsing[PARSER], spool, out_dir, time_left, settings.log_limit,
                                                    OUTPUT_LIMIT, limits.memory)
                    printed.append(parsed.printed)
                    run.parser_exit_code, run.timed_out, run.output_size = (parsed.exit_code, parsed.timed_out,
                                                                            parsed.output_size)
                    if not parsed.timed_out and (parsed.exit_code != 0 or parsed.output_size is None):
                        run.parser_unfit_here = f"it failed here (exit status {parsed.exit_code})"
                        parser = _parser_container(task, image, parsing, settings, limits)
                if parser is not None:
                    printed.append(_parse(task, image, parser, spool, out_dir, run, settings, time_left))
            run.grader = grader.result()
        _save_logs(out_dir, spool, printed, settings.log_limit)
        return run
    finally:
        if parser is not None:
            parser.remove()
        shutil.rmtree(spool, ignore_errors=True)


def _container(task: Task, image: str, script: str, settings: EvalSettings, limits: ContainerLimits,
               attached: bool = False, stdin: bool = False, receives: bool = False) -> Any:  # a docker Container
    """A fresh container of ``image`` that runs ``script`` of its /workspace (not started); ``attached``: its
    streams are read attached (``StreamCapture``), so the engine keeps no log of them; ``stdin``: its standard
    input is open, to be written once (``StreamCapture.send``, ``ParserContainer``); ``receives``: it takes its
    /workspace as a tar on its standard input before it runs ``script`` (one call less than `put_archive`, which
    has the engine mount the container's file system)."""
    run = f"bash {WORKSPACE}/{script}"
    client = containers.client()
    containers.install_cleanup_handlers()
    container = with_disk_quota(
        client.containers.create, limits, client,
        image=image, entrypoint=["/bin/bash"], command=["-c", f"tar -x -C / && {run}" if receives else run],
        labels=containers.labels(settings.run_id, **{"swepipe.instance_id": task.instance_id[:200]}),
        network_disabled=not settings.network, platform=settings.platform,
        log_config=log_config(attached), stdin_open=stdin,
        **limits.docker_options(),
        environment={"SWEPIPE_SCORING_SEED": str(settings.seed)} if settings.seed is not None else None)
    containers.track(container)
    return container


def _parser_container(task: Task, image: str, parsing: dict[str, bytes], settings: EvalSettings,
                      limits: ContainerLimits) -> ParserContainer:
    """The parser's container of the task's image, started, waiting for the tests' output."""
    return ParserContainer(_container(task, image, PARSE_SCRIPT, settings, limits, stdin=True), parsing)


def _check_stop(task: Task) -> None:
    if stopping.requested():  # what this instance got so far is not a result
        raise stopping.Stopped(task.instance_id)


def _workspace_findings_and_removal(container: Any, workspace: dict[str, bytes]) -> list[IntegrityFinding]:
    """The grader_written findings of what the tests' container's /workspace holds; the container removed."""
    try:
        return grader_findings(workspace, _workspace_digests(container))
    finally:
        containers.remove(container)


def _workspace_digests(container: Any) -> dict[str, str] | None:
    """What the tests' /workspace holds of the grader's files and outputs (``archive_digests``); None: it is gone."""
    try:
        chunks, _ = container.get_archive(WORKSPACE)
        return archive_digests(chunks, {*GRADER_FILES, *GRADER_OUTPUTS})
    except NotFound:
        return None
    except tarfile.TarError as error:  # a stream cut short: the engine went away while sending it
        raise InfraError(f"the tests' {WORKSPACE} cannot be read: {error}") from error


def _parse(task: Task, image: str, parser: ParserContainer | None, spool: Path, out_dir: Path, run: ScoringRun,
           settings: EvalSettings, time_left: float) -> BoundedOutput:
    """The parser run on the spooled output in its waiting container; output.json saved in ``out_dir`` (when it
    is no larger than OUTPUT_LIMIT); returns what the parser printed (bounded)."""
    assert parser is not None  # made before the tests ended
    parser.send(spool)
    run.parser_exit_code, run.timed_out = _wait(parser.container, time_left)
    _check_stop(task)
    printed = parser.printed(settings.log_limit)
    run.output_size = parser.save_output(out_dir, image)
    return printed


def _pieces(output: BoundedOutput) -> list[bytes]:
    head, tail = output.kept()
    return [head, f"\n[swepipe: {output.cut:,} bytes cut here]\n".encode() if output.cut else b"", tail]


def _save_logs(out_dir: Path, spool: Path, printed: list[BoundedOutput], limit: int) -> None:
    """stdout.log and stderr.log (the tests' output), entry.log (what the setup and the parser printed: bounded
    ``printed``), each kept up to ``limit`` bytes, secrets redacted."""
    saved = ScoringFiles(out_dir)
    for name, log in zip(TEST_LOGS, (saved.stdout, saved.stderr), strict=True):
        with open(spool / name, "rb") as source:
            save_capped(iter(lambda: source.read(1 << 20), b""), log, limit)
    save_capped(itertools.chain.from_iterable(_pieces(output) for output in printed), saved.entry_log, limit)
    for log in (saved.entry_log, saved.stdout, saved.stderr):  # not output.json: test names stay exact
        redact_file(log)


class ImageIdentity(TypedDict, total=False):
    """The scored image as the result's ``scorer`` names it (``image_identity``); empty when none was found."""

    image_id: str
    image_digest: str | None


def image_identity(image: Any) -> ImageIdentity:
    """What names the scored image exactly: its id (the digest of its config, the same on every machine for the
    same build) and, for an image pulled from a registry, its repository digest (``repo@sha256:...``, what a
    reader can pull again); None for one built here and never pushed."""
    digests = (image.attrs or {}).get("RepoDigests") or []
    return {"image_id": image.id, "image_digest": digests[0] if digests else None}


def _wait(container: Any, timeout: float) -> tuple[int | None, bool]:
    """(exit code, False), or (None, True) when the tests ran out of time (the container is then killed)."""
    started = time.monotonic()
    try:
        return container.wait(timeout=timeout).get("StatusCode"), False
    except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
        if time.monotonic() - started < timeout:
            raise  # the engine went away before the tests' time was up: no timeout, an infrastructure error
        container.kill()
        return None, True


def _judge_outputs(task: Task, out_dir: Path, run: ScoringRun, plan: canaries.CanaryPlan) -> _ResultData:
    """The official verdict from output.json (the canaries' entries taken out), the integrity findings beside it,
    and the verdict that counts."""
    result: _ResultData = {"patch_applied": None if run.apply_status is None else run.apply_status == "0"}
    entries = None
    if run.output_size is not None and run.output_size > OUTPUT_LIMIT:
        result["error"] = f"output.json is {run.output_size:,} bytes, more than swepipe reads ({OUTPUT_LIMIT:,})"
    elif run.output_size is not None:
        try:
            entries = read_output(ScoringFiles(out_dir).output.read_bytes())
        except OutputShapeError as error:
            result["error"] = f"output.json cannot be read: {error}"
    elif not run.tests_started and not run.timed_out:
        result["error"] = "the tests' container never reached the tests (see entry.log)"
    elif not run.timed_out:
        result["error"] = "the parser wrote no output.json (see stdout.log, stderr.log, entry.log)"
    every_entry = list(entries or [])
    outcome = canaries.read_outcome(plan, run.canary_status, entries or [])
    statuses = dict(entries or [])
    passed = passed_names(entries or [])
    verdict = judge(task, statuses, passed)
    integrity = list(run.grader)
    if entries is not None:
        integrity += conflicting_findings(task, entries) + summary_findings(
            run.summaries, dict(every_entry), passed_names(every_entry), outcome.unreported_failures())
    # No output means no test passed: the official verdict is then "not resolved".
    official = verdict.resolved and entries is not None and not run.timed_out
    if official:  # what only a verdict the official protocol resolved must answer for
        integrity += canary_findings(outcome) + summary_missing_findings(plan.runner if plan.summary else None,
                                                                         run.summaries)
    result["canaries"] = _canary_record(outcome)
    result["official_resolved"], result["resolved"] = official, official and not integrity
    result["integrity"], result["timed_out"] = integrity, run.timed_out
    result["FAIL_TO_PASS"], result["PASS_TO_PASS"] = asdict(verdict.fail_to_pass), asdict(verdict.pass_to_pass)
    result["near_misses"], result["statuses"] = verdict.near_misses, statuses
    return result


class _Scorer(ImageIdentity, total=False):
    """How a result was scored (records.evaluation.EvalResult.scorer): swepipe's version and protocol, the profile,
    the time limit, the seed, the image's identity and where the parser ran."""

    swepipe: str
    protocol: str
    profile: str
    timeout: float
    seed: int
    parser: str


class _ResultData(TypedDict, total=False):
    """A scoring's result as it is gathered, before it becomes its EvalResult record."""

    instance_id: str
    resolved: bool
    official_resolved: bool
    category: EvalCategory
    patch_sha256: str
    patch_empty: bool
    patch_applied: bool | None
    binary_sections_stripped: bool
    network: bool
    limits: dict[str, Any]  # the container's limits as pipeline.runtime.limits describes them
    scorer: _Scorer
    image: str
    entry_exit_code: int | None
    parser_exit_code: int | None
    tests_output_dropped: int
    test_infrastructure: list[str]
    error: str
    duration: float
    canaries: _CanaryRecord
    integrity: list[IntegrityFinding]
    timed_out: bool
    FAIL_TO_PASS: dict[str, list[str]]
    PASS_TO_PASS: dict[str, list[str]]
    near_misses: dict[str, str]  # a required test -> the name it was reported under
    statuses: dict[str, str]


class _CanaryTest(TypedDict):
    name: str
    must: str  # pass or fail
    reported: list[str]  # the statuses the runner reported for it


class _CanaryRecord(TypedDict, total=False):
    """The result's canaries (records.evaluation.Canaries), as scoring writes them."""

    planted: bool
    runner: str | None
    reason: str
    target: str
    tests: list[_CanaryTest]


def _canary_record(outcome: canaries.CanaryOutcome) -> _CanaryRecord:
    """What the result says of the canaries: where they were planted and how each was reported, or why none was."""
    plan = outcome.plan
    if not outcome.planted:
        return {"planted": False, "runner": plan.runner.value if plan.runner else None, "reason": outcome.reason()}
    return {"planted": True, "runner": plan.runner.value if plan.runner else None, "target": plan.target,
            "tests": [{"name": c.name, "must": "pass" if c.must_pass else "fail",
                       "reported": outcome.reported.get(c.name, [])} for c in plan.canaries]}


def _category(record: _ResultData) -> EvalCategory:
    if record["resolved"]:
        return EvalCategory.RESOLVED
    if record.get("official_resolved"):
        return EvalCategory.FLAGGED
    if record.get("timed_out"):
        return EvalCategory.TIMEOUT
    if record["patch_applied"] is False and not record["patch_empty"]:
        return EvalCategory.PATCH_FAILED
    return EvalCategory.TESTS_FAILED


def save_result(out_dir: Path, record: EvalResult) -> None:
    record.write(ScoringFiles(out_dir).result)
