"""`swepipe export --format atif`: every agent of a run as an ATIF trajectory (the Agent Trajectory Interchange
Format, Harbor's RFC 0001, v1.8), validated against the ``atif`` package's models before it is written.

One file per agent, ``<output>/<instance_id>/<agent>.atif.json``: each junior rollout, the senior, the principal's
call(s), the solo agent, a team's lead (its workers embedded as ``subagent_trajectories``, linked from the lead's
delegating step by a ``subagent_trajectory_ref``). The steps: the agent's system prompt and task (``system``,
``user``), then one ``agent`` step a reply: the reply as ``message``, its action as ``tool_calls`` (a tool-call
reply's call as sent; a text-format reply's action block as a call of the action's name with the block as
``command``, ``extra.format`` "text"), what the agent saw next as the ``observation`` (exit code, timeout and
changed files in the result's ``extra``), a format or action error as the step it was (no call, the error as the
observation, ``extra.format_error``). Per-step ``metrics`` (prompt tokens, cached tokens, completion tokens, cost)
and timestamps come from the task's ledger (the agent's rows in order); ``final_metrics`` are the agent's ledger
totals, so the trajectories of a run add up to its ledger. What the specification has no place for (the task, the
run, the role, the models of the other roles, the verdict, the submission) is under the root ``extra.swepipe``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, NotRequired, TypedDict, TypeVar, cast

import atif

from pipeline import records
from pipeline.errors import SwepipeError
from pipeline.interop.export import ExportSummary, tasks_to_export
from pipeline.records import Prediction
from pipeline.records.chat import ChatMessage, recorded_messages
from pipeline.records.ledger import LedgerRow, read_ledger
from pipeline.records.sources import PatchSource
from pipeline.records.trajectory import ExitReason
from pipeline.rundir.layout import TaskPaths
from pipeline.rundir.storage import write_code_atomic
from pipeline.settings.model_spec import Role
from pipeline.text.secrets import redact_data, redact_values

ATIF_VERSION = "ATIF-v1.8"  # the specification the atif package's models hold
ATIF_SUFFIX = ".atif.json"
AGENT_NAME = "swepipe"


# The optional parts below may hold None until ``_present`` leaves such keys out, as the files never hold them.


class SourceExtra(TypedDict, total=False):
    """What the root's ``extra.swepipe`` adds of one kind of agent: a junior rollout's settings, the principal's
    outcome."""

    temperature: float | None
    seed: int | None
    reused_from: str | None
    patch_source: str | None
    recorded_cost_usd: float | None
    source: str | None
    error: str | None


class ToolCall(TypedDict):
    """An ATIF tool call: the call as sent, or a text-format action block as a call of the action's name."""

    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]  # the call's arguments: JSON, as the model wrote them
    extra: NotRequired[dict[str, str]]  # {"format": "text"} for an action block


class ResultExtra(TypedDict, total=False):
    exit_code: int | None
    timed_out: bool | None
    changed_files: list[str] | None
    edits: list[dict[str, Any]] | None  # the editor calls as the trajectory file holds them


class SubagentRef(TypedDict):
    trajectory_id: str


class ObservationResult(TypedDict, total=False):
    source_call_id: str
    content: str | None
    extra: ResultExtra | None
    subagent_trajectory_ref: list[SubagentRef]


class Observation(TypedDict):
    results: list[ObservationResult]


class MetricsExtra(TypedDict, total=False):
    cache_write_tokens: int | None
    latency: float | None
    retries: int | None
    call: str | None


class Metrics(TypedDict, total=False):
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int
    cost_usd: float | None
    extra: MetricsExtra


class StepExtra(TypedDict, total=False):
    format_error: str | None
    action: str | None
    model_seconds: float | None
    command_seconds: float | None
    seconds: float | None


class Step(TypedDict):
    """An ATIF step: the opening's system prompt and task, then one a reply."""

    step_id: int
    source: str  # system, user or agent
    message: str
    timestamp: NotRequired[str | None]
    model_name: NotRequired[str | None]
    tool_calls: NotRequired[list[ToolCall] | None]
    observation: NotRequired[Observation | None]
    metrics: NotRequired[Metrics | None]
    extra: NotRequired[StepExtra | None]


class AtifVerdict(TypedDict, total=False):
    resolved: bool | None
    category: str | None


class SwepipeExtra(SourceExtra, total=False):
    """The root's ``extra.swepipe``: what the specification has no place for (its values None are left out)."""

    run_id: str
    instance_id: str
    agent: str
    role: str
    strategy: str | None
    models: dict[str, Any]  # role -> model, as the prediction holds them
    exit_status: str | None
    submission: str | None
    submission_is_patch: bool
    verdict: AtifVerdict | None


class AgentInfo(TypedDict):
    name: str
    version: str
    model_name: NotRequired[str | None]
    extra: dict[str, str]  # {"role": ...}


class FinalMetricsExtra(TypedDict):
    model_calls: int
    failed_calls: int


class FinalMetrics(TypedDict):
    total_prompt_tokens: int
    total_completion_tokens: int
    total_cached_tokens: int
    total_cost_usd: float
    total_steps: int
    extra: FinalMetricsExtra


class RootExtra(TypedDict):
    swepipe: SwepipeExtra


class Trajectory(TypedDict):
    """An ATIF trajectory as swepipe makes it, before the atif package's models check it."""

    schema_version: str
    session_id: str
    trajectory_id: str
    agent: AgentInfo
    steps: list[Step]
    final_metrics: FinalMetrics
    extra: RootExtra
    notes: NotRequired[str]
    subagent_trajectories: NotRequired[list[Trajectory]]


@dataclass
class AgentSource:
    """One agent's records, as the export reads them."""

    name: str  # the file's name without .atif.json: junior-rollout-00, senior, principal, solo, lead, worker-1
    role: Role
    model: str | None
    ledger: list[LedgerRow]  # its rows of the task's ledger, in order
    run: dict[str, Any] | None = None  # an agent's saved run (pipeline.agent.AgentRun.to_dict()); None: the principal
    exit_status: str | None = None
    submission: str | None = None
    submission_is_patch: bool = False
    extra: SourceExtra = field(default_factory=lambda: SourceExtra())
    workers: list[AgentSource] = field(default_factory=list)  # a lead's, embedded
    delegated_at: dict[str, int] = field(default_factory=dict)  # a lead's: worker name -> the lead's step index


def export_atif(root: Path, output: Path) -> ExportSummary:
    """Write <output>/<instance_id>/<agent>.atif.json for every agent of every task with a prediction."""
    summary, tasks = tasks_to_export(root, output, "atif", "ATIF trajectories")
    for instance_id, prediction, paths in tasks:
        context = _TaskContext(run_id=root.name, instance_id=instance_id, prediction=prediction,
                               verdict=_verdict(paths, prediction))
        for source in agent_sources(paths, prediction):
            trajectory = atif_trajectory(source, context)
            write_code_atomic(output / instance_id / f"{source.name}{ATIF_SUFFIX}",
                              json.dumps(trajectory, indent=2) + "\n")
            summary.files += 1
            summary.by_agent[source.role] = summary.by_agent.get(source.role, 0) + 1
    return summary


# -- the agents of a task --------------------------------------------------------------------------------------


def agent_sources(paths: TaskPaths, prediction: Prediction) -> list[AgentSource]:
    """Every agent a task left, with its ledger rows. A record that is missing or unreadable is skipped (an ablated
    stage has none)."""
    models = {role: model for role, model in (prediction.models or {}).items() if isinstance(model, str)}
    ledger = [row for row in read_ledger(paths.ledger) if _well_formed(row)]

    def rows(stage: str, agent: str) -> list[LedgerRow]:
        return sorted((row for row in ledger if row.stage == stage and row.agent == agent), key=lambda r: r.time)

    found = []
    for path in paths.junior_files.rollouts().values():
        rollout = records.Rollout.read(path)
        if isinstance(rollout, records.Rollout) and rollout.trajectory is not None:
            found.append(AgentSource(
                f"junior-{path.stem}", Role.JUNIOR, _text(rollout.model) or models.get(Role.JUNIOR),
                rows("junior", path.stem), run=rollout.trajectory, exit_status=rollout.exit_reason,
                submission=rollout.patch, submission_is_patch=True,
                extra=_present(SourceExtra(temperature=rollout.temperature, seed=rollout.seed,
                                           reused_from=rollout.reused_from, patch_source=rollout.patch_source,
                                           recorded_cost_usd=rollout.cost))))
    senior = records.read_trajectory(paths.senior_files.trajectory).data
    if isinstance(senior, dict):
        found.append(AgentSource("senior", Role.SENIOR, models.get(Role.SENIOR), rows("senior", "senior"), run=senior,
                                 submission=_text(senior.get("submission"))))
    principal = _principal(paths, models.get(Role.PRINCIPAL), rows("principal", ""))
    if principal is not None:
        found.append(principal)
    solo = records.read_trajectory(paths.solo_files.trajectory).data
    if isinstance(solo, dict):
        result = records.SoloResult.read(paths.solo_files.result)
        found.append(AgentSource("solo", Role.SOLO, models.get(Role.SOLO), rows("solo", "solo"), run=solo,
                                 submission=result.patch if isinstance(result, records.SoloResult) else None,
                                 submission_is_patch=True))
    lead = _lead(paths, models, rows)
    if lead is not None:
        found.append(lead)
    return found


def _lead(paths: TaskPaths, models: dict[str, str], rows: Any) -> AgentSource | None:
    team = paths.team_files
    run = records.read_trajectory(team.lead_trajectory).data
    if not isinstance(run, dict):
        return None
    result = records.TeamResult.read(team.result)
    lead = AgentSource("lead", Role.LEAD, models.get(Role.LEAD), rows("team", "lead"), run=run,
                       submission=result.patch if isinstance(result, records.TeamResult) else None,
                       submission_is_patch=True)
    for name, path in team.worker_trajectories():
        worker = records.read_trajectory(path).data
        if isinstance(worker, dict):
            lead.workers.append(AgentSource(name, Role.WORKER, models.get(Role.WORKER), rows("team", name), run=worker,
                                            submission=_text(worker.get("submission"))))
    delegations = records.read_json(team.delegations).data
    for delegation in _list(delegations.get("delegations") if isinstance(delegations, dict) else None):
        if isinstance(delegation, dict) and isinstance(delegation.get("worker"), str) \
                and isinstance(delegation.get("lead_step"), int):
            lead.delegated_at[delegation["worker"]] = delegation["lead_step"]
    return lead


def _principal(paths: TaskPaths, model: str | None, ledger: list[LedgerRow]) -> AgentSource | None:
    """The principal's calls: each call's new messages and its reply, as a run of the agent's shape would hold
    them, so it becomes steps the same way."""
    files = paths.principal_files
    request = records.read_json(files.request).data
    calls = request.get("calls") if isinstance(request, dict) else None
    if not isinstance(calls, list) or not calls:
        return None
    replies = records.read_json(files.replies).data
    replies = [r for r in replies if isinstance(r, dict)] if isinstance(replies, list) else []
    result = records.PrincipalResult.read(files.result)
    result = result if isinstance(result, records.PrincipalResult) else records.PrincipalResult()
    failed = [attempt for attempt in _list(result.failed_attempts) if isinstance(attempt, str)]
    messages: list[ChatMessage] = []
    steps = []
    for number, call in enumerate(calls):
        sent = recorded_messages(call.get("messages") if isinstance(call, dict) else None)
        messages.extend(m.copy() for m in sent[len(messages):])
        if number < len(replies):
            reply = replies[number]
            messages.append({"role": "assistant", "content": _text(reply.get("content")) or ""})
            error = failed[number] if number < len(failed) else None  # why the reply's edits were refused
            steps.append({"index": number, "reply": _text(reply.get("content")) or "", "format_error": error,
                          "cost": reply.get("cost"), "input_tokens": reply.get("input_tokens"),
                          "output_tokens": reply.get("output_tokens")})
    source, error = result.source, result.error
    status = (ExitReason.SUBMITTED if source == PatchSource.PRINCIPAL else
              ExitReason.MODEL_ERROR if isinstance(error, str) and error.startswith("principal call failed") else
              ExitReason.FORMAT_ERRORS if result.to_dict() else None)
    return AgentSource("principal", Role.PRINCIPAL, model, ledger, run={"messages": messages, "steps": steps},
                       exit_status=status, submission=result.patch if source == PatchSource.PRINCIPAL else None,
                       submission_is_patch=True, extra=_present(SourceExtra(source=source, error=error)))


# -- one agent as an ATIF trajectory -----------------------------------------------------------------------------


@dataclass
class _TaskContext:
    run_id: str
    instance_id: str
    prediction: Prediction
    verdict: AtifVerdict | None


def atif_trajectory(source: AgentSource, context: _TaskContext) -> dict[str, Any]:
    """``source`` as an ATIF trajectory (JSON data), validated against the atif models; secrets redacted, the
    submitted patch kept byte for byte."""
    data = _trajectory_data(source, context)
    clean: Trajectory = redact_data(data)
    _restore_submissions(clean, data)
    try:
        return atif.Trajectory.model_validate(clean).to_json_dict()
    except ValueError as error:  # pydantic's ValidationError: a defect here, not in the run
        raise SwepipeError(f"task {context.instance_id}, agent {source.name}: the ATIF trajectory made of its "
                           f"records does not validate: {error}") from None


def _restore_submissions(clean: Trajectory, data: Trajectory) -> None:
    """A patch keeps its bytes (only the environment's secret values go, as for patches everywhere)."""
    own, raw = clean["extra"]["swepipe"], data["extra"]["swepipe"]
    submission = raw.get("submission")
    if raw.get("submission_is_patch") and isinstance(submission, str):
        own["submission"] = redact_values(submission)
    for cleaned, original in zip(clean.get("subagent_trajectories") or [], data.get("subagent_trajectories") or [],
                                 strict=True):
        _restore_submissions(cleaned, original)


def _trajectory_data(source: AgentSource, context: _TaskContext, embedded: bool = False) -> Trajectory:
    run = source.run or {}
    steps = _steps(source, run)
    rows = source.ledger
    own = SwepipeExtra(run_id=context.run_id, instance_id=context.instance_id, agent=source.name,
                       role=source.role, strategy=context.prediction.strategy,
                       models={role: model for role, model in (context.prediction.models or {}).items()},
                       exit_status=source.exit_status or _text(run.get("exit_reason")) or None,
                       error=_text(run.get("error")), submission=source.submission,
                       submission_is_patch=source.submission_is_patch, verdict=context.verdict)
    own.update(source.extra)
    data: Trajectory = {
        "schema_version": ATIF_VERSION,
        "session_id": f"{context.run_id}/{context.instance_id}",
        "trajectory_id": source.name if embedded else f"{context.instance_id}/{source.name}",
        "agent": _present(AgentInfo(name=AGENT_NAME, version=_version(), model_name=source.model,
                                    extra={"role": source.role})),
        "steps": steps,
        "final_metrics": {"total_prompt_tokens": sum(row.input_tokens for row in rows),
                          "total_completion_tokens": sum(row.output_tokens for row in rows),
                          "total_cached_tokens": sum(row.cached_tokens for row in rows),
                          "total_cost_usd": sum(row.cost for row in rows),
                          "total_steps": len(steps),
                          "extra": {"model_calls": len(rows), "failed_calls": sum(row.error is not None
                                                                                   for row in rows)}},
        "extra": {"swepipe": _present(own)},
    }
    if not rows and source.extra.get("reused_from"):
        data["notes"] = ("the rollout was reused from another run: its calls are in that run's ledger, so the final "
                         "metrics of this run are 0 and each step's metrics are the rollout's own")
    if source.workers:
        data["subagent_trajectories"] = [_trajectory_data(worker, context, embedded=True)
                                         for worker in source.workers]
        _link_workers(data["steps"], source)
    return data


def _steps(source: AgentSource, run: dict[str, Any]) -> list[Step]:
    messages = recorded_messages(run.get("messages"))
    agent_steps = [s for s in _list(run.get("steps")) if isinstance(s, dict)]
    opening = _opening(messages)
    replies = _replies(messages[len(opening):])
    if len(replies) < len(agent_steps):  # a compacted conversation: the steps' own texts
        replies = [(_text(step.get("reply")) or "", None) for step in agent_steps]
    started = run.get("started") if isinstance(run.get("started"), (int, float)) else None
    successful = [row for row in source.ledger if row.error is None]
    steps: list[Step] = []
    for message in opening:
        role = "system" if message.get("role") == "system" else "user"
        steps.append(_present(Step(step_id=len(steps) + 1, source=role, message=_content(message.get("content")),
                                   timestamp=_iso(started))))
    for index, step in enumerate(agent_steps):
        reply, seen = replies[index]
        row = successful[index] if index < len(successful) else None
        steps.append(_agent_step(len(steps) + 1, step, reply, seen, row, source.model))
    return steps


def _opening(messages: list[ChatMessage]) -> list[ChatMessage]:
    opening = []
    for message in messages:
        if message.get("role") == "assistant":
            break
        opening.append(message)
    return opening


def _replies(messages: list[ChatMessage]) -> list[tuple[str, str | None]]:
    """Each reply's text and what the agent was shown after it (the messages up to the next reply, joined)."""
    found: list[tuple[str, list[str]]] = []
    for message in messages:
        if message.get("role") == "assistant":
            found.append((_content(message.get("content")), []))
        elif found:
            found[-1][1].append(_content(message.get("content")))
    return [(reply, "\n\n".join(seen) if seen else None) for reply, seen in found]


def _agent_step(step_id: int, step: dict[str, Any], reply: str, seen: str | None, row: LedgerRow | None,
                model: str | None) -> Step:
    index = step.get("index") if isinstance(step.get("index"), int) else step_id
    call_id = f"call-{index}"
    format_error = _text(step.get("format_error"))
    calls = [] if format_error else _tool_calls(step, call_id)
    observed = seen if seen is not None else _text(step.get("output"))
    result_extra = _present(ResultExtra(exit_code=step.get("exit_code"), timed_out=step.get("timed_out") or None,
                                        changed_files=step.get("changed_files") or None,
                                        edits=step.get("edits") or None))
    results: list[ObservationResult] = []
    if observed is not None or result_extra:
        result = ObservationResult(source_call_id=calls[0]["tool_call_id"]) if calls else ObservationResult()
        result.update(_present(ObservationResult(content=observed, extra=result_extra or None)))
        results.append(result)
    if row is not None:
        metrics = Metrics(prompt_tokens=row.input_tokens, completion_tokens=row.output_tokens,
                          cached_tokens=row.cached_tokens, cost_usd=row.cost,
                          extra=_present(MetricsExtra(cache_write_tokens=row.cache_write_tokens or None,
                                                      latency=row.latency, retries=row.retries or None,
                                                      call=row.call or None)))
    else:
        metrics = _present(Metrics(prompt_tokens=_int(step.get("input_tokens")),
                                   completion_tokens=_int(step.get("output_tokens")),
                                   cost_usd=_number(step.get("cost"))))
    extra = _present(StepExtra(format_error=format_error, action=_text(step.get("action")) or None,
                               model_seconds=step.get("model_seconds"), command_seconds=step.get("command_seconds"),
                               seconds=step.get("seconds")))
    return _present(Step(step_id=step_id, source="agent", message=reply,
                         timestamp=_iso(row.time) if row is not None else None, model_name=model,
                         tool_calls=calls or None, observation={"results": results} if results else None,
                         metrics=metrics or None, extra=extra or None))


def _tool_calls(step: dict[str, Any], call_id: str) -> list[ToolCall]:
    """The reply's action: its tool call as sent, or a text-format action block as a call of the action's name."""
    sent = [call for call in _list(step.get("tool_calls")) if isinstance(call, dict)]
    if sent:
        calls: list[ToolCall] = []
        for number, call in enumerate(sent):
            arguments = call.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    arguments = {"raw": arguments}
            calls.append({"tool_call_id": _text(call.get("id")) or (call_id if number == 0 else f"{call_id}-{number}"),
                          "function_name": _text(call.get("name")) or "",
                          "arguments": arguments if isinstance(arguments, dict) else {"raw": arguments}})
        return calls
    action = _text(step.get("action"))
    if not action:
        return []
    command = _text(step.get("command"))
    arguments = {} if action == "submit" or command is None else {"command": command}
    return [{"tool_call_id": call_id, "function_name": action, "arguments": arguments,
             "extra": {"format": "text"}}]


def _link_workers(steps: list[Step], lead: AgentSource) -> None:
    """Each worker's trajectory referred to from the lead's step that delegated it."""
    agent_steps = [step for step in steps if step["source"] == "agent"]
    for worker in lead.workers:
        at = lead.delegated_at.get(worker.name)
        if at is None or not 0 <= at < len(agent_steps):
            continue
        step = agent_steps[at]
        observation = step["observation"] = step.get("observation") or {"results": []}
        results = observation["results"]
        if not results:
            results.append({})
        results[0].setdefault("subagent_trajectory_ref", []).append({"trajectory_id": worker.name})


# -- small readers ----------------------------------------------------------------------------------------------


def _verdict(paths: TaskPaths, prediction: Prediction) -> AtifVerdict | None:
    result = records.read_json(paths.eval_files.result).data
    found = _present(AtifVerdict(resolved=prediction.resolved,
                             category=_text(result.get("category")) if isinstance(result, dict) else None))
    return found or None


def _well_formed(row: LedgerRow) -> bool:
    """A ledger row whose numbers are numbers (a hand-edited or foreign ledger may hold anything): the others
    cannot be summed or shown as ATIF metrics, and are left out as the ledger's other readers would fail on them."""
    counts = (row.input_tokens, row.cached_tokens, row.cache_write_tokens, row.output_tokens, row.retries)
    amounts = (row.cost, row.time, row.latency)
    return (all(_int(count) is not None and count >= 0 for count in counts)
            and all(_number(amount) is not None and math.isfinite(amount) for amount in amounts)
            and isinstance(row.stage, str) and isinstance(row.agent, str) and isinstance(row.call, str))


def _version() -> str:
    try:
        return metadata.version("swepipe")
    except metadata.PackageNotFoundError:
        return "unknown"


def _iso(seconds: Any) -> str | None:
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        return None
    try:
        return datetime.fromtimestamp(seconds, timezone.utc).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None


def _content(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n\n".join(part["text"] for part in value
                           if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


Shape = TypeVar("Shape", bound=Mapping[str, object])


def _present(values: Shape) -> Shape:
    """``values`` without its keys whose value is None (a part above whose keys may be absent)."""
    return cast(Shape, {key: value for key, value in values.items() if value is not None})
