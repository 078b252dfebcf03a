"""`swepipe export`: a run's predictions in the forms other tools read, and its agents' trajectories.

- ``official``: the input of SWE-Bench Pro's ``swe_bench_pro_eval.py``, a JSON list of
  ``{"instance_id", "patch", "prefix"}`` (the harness names its output files ``<prefix>_output.json``, so the
  prefix is a plain file name).
- ``swebench``: swebench's predictions, ``{"instance_id", "model_patch", "model_name_or_path"}``; a JSON list
  in a ``.json`` file, JSON Lines in a ``.jsonl`` file (the harness tells the two apart by the suffix, and reads
  no other).
- ``atif``: one ``<instance_id>/<agent>.atif.json`` per agent, an ATIF v1.8 trajectory (pipeline.interop.atif_export).
- ``trajectories``: one ``<instance_id>/<agent>.traj.json`` per agent, in the shape mini-swe-agent saves
  (``{"info": {"exit_status", "submission", "model_stats": {"instance_cost", "api_calls"}, "config", ...},
  "messages": [...], "trajectory_format": "mini-swe-agent-1"}``), so its inspector and analysis scripts open
  them.

Only tasks with a prediction are exported: an unfinished task (a killed run, an infrastructure error) has none
yet, and is counted in the summary. Everything is written through ``pipeline.rundir.storage``, so secrets stay out;
patches keep their bytes (JSON escapes a byte that is not UTF-8 as ``\\udcXX``, as in the run directory).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import records
from pipeline.errors import SwepipeError
from pipeline.records import Prediction
from pipeline.records.sources import PatchSource
from pipeline.records.trajectory import ExitReason
from pipeline.rundir.layout import PrincipalFiles, RunLayout, TaskPaths
from pipeline.rundir.storage import write_code_atomic, write_json_atomic
from pipeline.settings.model_spec import Role
from pipeline.tasks import check_instance_id
from pipeline.text.secrets import redact_data, redact_values

FORMATS = ("official", "swebench", "trajectories", "atif")
DIRECTORY_FORMATS = ("trajectories", "atif")  # written as a folder of files, one per agent
TRAJECTORY_FORMAT = "mini-swe-agent-1"
TRAJECTORY_SUFFIX = ".traj.json"
_PATCH_KEY = {"official": "patch", "swebench": "model_patch"}
_NAME_KEY = {"official": "prefix", "swebench": "model_name_or_path"}


# -- the run ----------------------------------------------------------------------------------------------


@dataclass
class LeftOut:
    """What of a run an export leaves out (its predictions read by pipeline.records.read_predictions, the last
    line of each instance winning, as a rerun's does)."""

    torn: bool = False  # the last line was cut short by a killed write
    unreadable: list[int] = field(default_factory=list)  # other lines that are not a prediction
    unfinished: list[str] = field(default_factory=list)  # tasks of the run without a prediction


def left_out(layout: RunLayout, lines: records.PredictionLines) -> LeftOut:
    tasks = layout.tasks
    started = {p.name for p in tasks.iterdir() if p.is_dir()} if tasks.is_dir() else set()
    infra = records.read_predictions(layout.infra_errors)
    started |= {*infra.records, *infra.unreadable}
    return LeftOut(torn=lines.torn,
                   unreadable=sorted([*lines.nameless, *(number for number, _ in lines.unreadable.values())]),
                   unfinished=sorted(started - set(lines.records)))


def require_predictions(root: Path, lines: records.PredictionLines) -> LeftOut:
    """What the export leaves out; refused when the run has no prediction at all."""
    found = left_out(RunLayout(root), lines)
    if lines.records:
        return found
    waiting = f" ({len(found.unfinished)} task(s) unfinished)" if found.unfinished else ""
    raise SwepipeError(f"run {root.name} ({root}) has no predictions yet{waiting}: nothing to export; finish it "
                       "with `swepipe run` and the same --run-id")


# -- summary ------------------------------------------------------------------------------------------------


@dataclass
class ExportSummary:
    path: Path
    format: str
    exported: int = 0
    empty: int = 0  # predictions whose patch is empty, exported empty
    not_utf8: int = 0  # patches with bytes that are not UTF-8
    files: int = 0  # trajectories: .traj.json files written
    by_agent: dict[str, int] = field(default_factory=dict)
    left_out: LeftOut | None = None

    def line(self) -> str:
        """One line: what was exported and what was left out, and why."""
        if self.format in DIRECTORY_FORMATS:
            agents = ", ".join(f"{kind} {count}" for kind, count in sorted(self.by_agent.items()))
            parts = [f"{self.files} trajectories of {self.exported} task(s)" + (f" ({agents})" if agents else "")]
        else:
            parts = [f"{self.exported} prediction(s) exported"]
            if self.empty:
                parts.append(f"{self.empty} with an empty patch, exported empty (the harness scores it unresolved)")
            if self.not_utf8:
                parts.append(f"{self.not_utf8} patch(es) with bytes that are not UTF-8, kept as \\udcXX escapes "
                             "(swepipe eval applies them byte for byte; a harness that writes the patch as UTF-8 "
                             "text cannot)")
        found = self.left_out
        if found is not None:
            if found.unfinished:
                parts.append(f"{len(found.unfinished)} task(s) without a prediction left out (unfinished or an "
                             "infrastructure error; `swepipe run` with the same --run-id finishes them)")
            if found.torn:
                parts.append("the last line of predictions.jsonl was cut short by a killed write and is left out")
            if found.unreadable:
                parts.append(f"unreadable line(s) {', '.join(map(str, found.unreadable))} of predictions.jsonl "
                             "left out")
        return "; ".join(parts)


# -- official and swebench ------------------------------------------------------------------------------


def default_output(root: Path, fmt: str) -> Path:
    return RunLayout(root).exports / (fmt if fmt in DIRECTORY_FORMATS else f"{fmt}.json")


def export_predictions(root: Path, fmt: str, output: Path | None = None, name: str | None = None) -> ExportSummary:
    """Write the run's predictions in ``fmt`` (official or swebench) to ``output`` (default
    runs/<id>/export/<fmt>.json); ``name`` is the prefix / model_name_or_path (default: the run id)."""
    if fmt not in _PATCH_KEY:
        raise SwepipeError(f"unknown export format {fmt!r} for predictions: choose official or swebench")
    path = output or default_output(root, fmt)
    if path.is_dir():
        raise SwepipeError(f"--output {path} is a directory; give the file to write (e.g. {path / (fmt + '.json')})")
    jsonl = fmt == "swebench" and path.suffix == ".jsonl"
    if fmt == "swebench" and path.suffix not in (".json", ".jsonl"):
        raise SwepipeError(f"--output {path}: swebench's harness reads only .json (a JSON list) or .jsonl "
                           "(JSON Lines) predictions; name the file so")
    name = default_name(root) if name is None else name
    if fmt == "official" and ("/" in name or "\0" in name or name in (".", "..")):
        raise SwepipeError(f"--prefix {name!r}: the official harness names its files <prefix>_output.json, so the "
                           "prefix must be a plain file name (no '/')")
    lines = records.read_predictions(RunLayout(root).predictions)
    summary = ExportSummary(path=path, format=fmt, left_out=require_predictions(root, lines))
    entries = []
    for instance_id, record in sorted(lines.records.items()):
        patch = record.model_patch or ""
        summary.exported += 1
        summary.empty += not patch.strip()
        summary.not_utf8 += _has_undecodable_bytes(patch)
        entries.append({"instance_id": instance_id, _PATCH_KEY[fmt]: patch, _NAME_KEY[fmt]: name})
    if jsonl:
        # write_code_atomic only takes the environment's secret values out, so the patches stay whole; every
        # other field was redacted in full by redact_data, as write_json_atomic does.
        write_code_atomic(path, "".join(json.dumps(redact_data(entry)) + "\n" for entry in entries))
    else:
        write_json_atomic(path, entries)
    return summary


def default_name(root: Path) -> str:
    """The run id, as a plain file name: it names the run, and through its config.yaml, its models."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in root.name) or "swepipe"


def _has_undecodable_bytes(text: str) -> bool:
    return any(0xDC80 <= ord(c) <= 0xDCFF for c in text)


# -- trajectories -----------------------------------------------------------------------------------------


@dataclass
class ExportedTrajectory:
    agent: str  # the file's name without .traj.json: junior-rollout-00, senior, principal, solo, lead, worker-1
    kind: str  # junior, senior, principal, solo, lead, worker
    messages: list[dict]
    exit_status: str | None
    submission: str | None
    submission_is_patch: bool
    cost: float
    api_calls: int
    model: dict
    extra: dict


def tasks_to_export(root: Path, output: Path, format: str, what: str
                    ) -> tuple[ExportSummary, list[tuple[str, Prediction, TaskPaths]]]:
    """The summary of an export of ``what`` (its files, one folder per task) into ``output``, and the tasks with a
    prediction, each with its files; refused when ``output`` is a file or an instance id cannot name a folder."""
    if output.exists() and not output.is_dir():
        raise SwepipeError(f"--output {output} is a file; {what} are written into a directory")
    layout = RunLayout(root)
    lines = records.read_predictions(layout.predictions)
    summary = ExportSummary(path=output, format=format, left_out=require_predictions(root, lines))
    tasks = []
    for instance_id, prediction in sorted(lines.records.items()):
        try:
            check_instance_id(instance_id)
        except ValueError as error:
            raise SwepipeError(f"{layout.predictions}: instance id {error}; it cannot name a folder of "
                               "trajectories") from None
        tasks.append((instance_id, prediction, layout.task(instance_id)))
    summary.exported = len(tasks)
    return summary, tasks


def export_trajectories(root: Path, output: Path) -> ExportSummary:
    """Write <output>/<instance_id>/<agent>.traj.json for every agent of every task with a prediction."""
    summary, tasks = tasks_to_export(root, output, "trajectories", "trajectories")
    for instance_id, prediction, paths in tasks:
        for trajectory in task_trajectories(paths, prediction):
            write_trajectory(output / instance_id / f"{trajectory.agent}{TRAJECTORY_SUFFIX}", trajectory,
                             run_id=root.name, instance_id=instance_id)
            summary.files += 1
            summary.by_agent[trajectory.kind] = summary.by_agent.get(trajectory.kind, 0) + 1
    return summary


def task_trajectories(paths: TaskPaths, prediction: Prediction) -> list[ExportedTrajectory]:
    """Every agent's trajectory a task left: its juniors, senior and principal, or its solo agent, or its team's
    lead and workers. A record that is missing or unreadable is skipped (an ablated stage has none)."""
    models = prediction.models or {}
    found = []
    for path in paths.junior_files.rollouts().values():
        rollout = records.Rollout.read(path)
        if isinstance(rollout, records.Rollout) and rollout.trajectory is not None:
            found.append(_from_agent_run(
                f"junior-{path.stem}", "junior", rollout.trajectory,
                submission=rollout.patch, is_patch=True,
                model={"model_name": rollout.model or models.get(Role.JUNIOR),
                       "temperature": rollout.temperature, "seed": rollout.seed},
                extra={"reused_from": rollout.reused_from, "patch_source": rollout.patch_source},
                exit_reason=rollout.exit_reason))
    senior = records.read_trajectory(paths.senior_files.trajectory).data
    if isinstance(senior, dict):
        found.append(_from_agent_run("senior", "senior", senior, submission=senior.get("submission"),
                                     is_patch=False, model={"model_name": models.get(Role.SENIOR)}))
    principal = _principal(paths.principal_files, models.get(Role.PRINCIPAL))
    if principal is not None:
        found.append(principal)
    solo = records.read_trajectory(paths.solo_files.trajectory).data
    if isinstance(solo, dict):
        solo_result = records.SoloResult.read(paths.solo_files.result)
        patch = solo_result.patch if isinstance(solo_result, records.SoloResult) else None
        found.append(_from_agent_run("solo", "solo", solo, submission=patch, is_patch=True,
                                     model={"model_name": models.get(Role.SOLO)}))
    team = paths.team_files
    for name, path in [("lead", team.lead_trajectory), *team.worker_trajectories()]:
        record = records.read_trajectory(path).data
        if not isinstance(record, dict):
            continue
        kind = "lead" if name == "lead" else "worker"
        if kind == "lead":  # the lead hands in the team's patch; a worker, its report
            result = records.TeamResult.read(team.result)
            submission, is_patch = (result.patch if isinstance(result, records.TeamResult) else None), True
        else:
            submission, is_patch = record.get("submission"), False
        found.append(_from_agent_run(name, kind, record, submission=submission, is_patch=is_patch,
                                     model={"model_name": models.get(kind)}))
    return found


def _from_agent_run(agent: str, kind: str, record: dict, *, submission, is_patch: bool, model: dict,
                    extra: dict | None = None, exit_reason: str | None = None) -> ExportedTrajectory:
    """A trajectory from an agent's saved record (pipeline.agent.AgentRun.to_dict()). Each step is one assistant
    message, in order; its numbers (cost, tokens, command, exit code, seconds) go in that message's ``extra``."""
    steps = [s for s in record.get("steps") or [] if isinstance(s, dict)]
    messages, step = [], 0
    for message in record.get("messages") or []:
        if not isinstance(message, dict):
            continue
        message = dict(message)
        if message.get("role") == "assistant" and step < len(steps):
            earlier = message.get("extra")
            message["extra"] = {**(earlier if isinstance(earlier, dict) else {}), **_step_extra(steps[step])}
            step += 1
        messages.append(message)
    reason = exit_reason if exit_reason is not None else record.get("exit_reason")
    return ExportedTrajectory(
        agent=agent, kind=kind, messages=messages, exit_status=reason or None,
        submission=submission if isinstance(submission, str) else None, submission_is_patch=is_patch,
        cost=float(record.get("cost") or 0.0), api_calls=len(steps),
        model={key: value for key, value in model.items() if value is not None},
        extra={"name": record.get("name"), "error": record.get("error"), "steps": len(steps),
               "input_tokens": record.get("input_tokens"), "output_tokens": record.get("output_tokens"),
               "seconds": record.get("seconds"), "resumed": record.get("resumed"),
               **{key: value for key, value in (extra or {}).items() if value is not None}})


def _step_extra(step: dict) -> dict:
    keys = ("index", "action", "command", "exit_code", "timed_out", "format_error", "cost", "input_tokens",
            "output_tokens", "model_seconds", "command_seconds", "seconds", "changed_files")
    return {("step" if key == "index" else key): step[key] for key in keys
            if key in step and step[key] not in (None, [], "")}


def _principal(files: PrincipalFiles, model: str | None) -> ExportedTrajectory | None:
    """The principal's calls as one conversation: each call's new messages (the opening system and user
    message, or the retry's user message) and its reply, so two messages a call after the system prompt."""
    request = _read_json(files.request)
    calls = request.get("calls") if isinstance(request, dict) else None
    if not isinstance(calls, list) or not calls:
        return None
    replies = _read_json(files.replies)
    replies = [r for r in replies if isinstance(r, dict)] if isinstance(replies, list) else []
    result = records.PrincipalResult.read(files.result)
    result = result if isinstance(result, records.PrincipalResult) else records.PrincipalResult()
    messages: list[dict] = []
    for number, call in enumerate(calls):
        sent = [m for m in (call.get("messages") if isinstance(call, dict) else None) or [] if isinstance(m, dict)]
        messages.extend(dict(m) for m in sent[len(messages):])  # what this call added to the conversation
        if number < len(replies):
            reply = replies[number]
            messages.append({"role": "assistant", "content": reply.get("content") or "",
                             "extra": {"step": number, **{key: reply[key] for key in
                                                          ("cost", "input_tokens", "output_tokens") if key in reply}}})
    source, error = result.source, result.error
    if source == PatchSource.PRINCIPAL:
        status = ExitReason.SUBMITTED
    elif isinstance(error, str) and error.startswith("principal call failed"):
        status = ExitReason.MODEL_ERROR
    elif result.to_dict():
        status = ExitReason.FORMAT_ERRORS  # every reply's edits were unusable
    else:
        status = None  # the stage did not finish
    return ExportedTrajectory(
        agent="principal", kind="principal", messages=messages, exit_status=status,
        submission=result.patch if source == PatchSource.PRINCIPAL else "", submission_is_patch=True,
        cost=float(sum(r.get("cost") or 0.0 for r in replies)), api_calls=len(replies),
        model={"model_name": model} if model else {},
        extra={"source": source, "error": error, "failed_attempts": result.failed_attempts,
               "calls": len(calls), "input_tokens": sum(r.get("input_tokens") or 0 for r in replies),
               "output_tokens": sum(r.get("output_tokens") or 0 for r in replies)})


def write_trajectory(path: Path, trajectory: ExportedTrajectory, *, run_id: str, instance_id: str) -> None:
    """One .traj.json in mini-swe-agent's shape; swepipe's own details under info.swepipe and each assistant
    message's ``extra``."""
    data = {
        "info": {
            "exit_status": trajectory.exit_status,
            "submission": None,
            "model_stats": {"instance_cost": trajectory.cost, "api_calls": trajectory.api_calls},
            "config": {"agent_type": f"swepipe.{trajectory.kind}", "model": trajectory.model},
            "swepipe": {"run_id": run_id, "instance_id": instance_id, "agent": trajectory.agent,
                        "role": trajectory.kind, **trajectory.extra},
        },
        "messages": trajectory.messages,
        "trajectory_format": TRAJECTORY_FORMAT,
    }
    clean = redact_data(data)
    submission = trajectory.submission
    # A patch keeps its bytes (only the environment's secret values go, as for patches everywhere); any other
    # submission is text, redacted in full like the rest.
    clean["info"]["submission"] = (None if submission is None else
                                   redact_values(submission) if trajectory.submission_is_patch
                                   else redact_data(submission))
    write_code_atomic(path, json.dumps(clean, indent=2) + "\n")


def _read_json(path: Path):
    """A JSON file's data; None when it is missing or cannot be read (pipeline.records.read_json says why)."""
    return records.read_json(path).data
