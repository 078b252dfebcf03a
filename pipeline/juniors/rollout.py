"""One junior rollout: a sanitised container, the agent, and the candidate `git diff`."""

from __future__ import annotations

import shlex
import traceback
from typing import Any

from pipeline.agent.agent import Agent, prompt
from pipeline.agent.settings import AgentSettings
from pipeline.audit import audit_agent, task_subject
from pipeline.errors import InfrastructureFault, RuntimeUnavailable, SwepipeError
from pipeline.job import TaskJob
from pipeline.juniors.pool import probe_entries, source_tree_probe, without_scratch
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.records import Rollout
from pipeline.records.retrieval import RetrievalFinding
from pipeline.records.trajectory import ExitReason
from pipeline.runtime.base import GIT_QUIET, DiffFailed, PatchTooLarge, Runtime, changed_submodules
from pipeline.runtime.limits import ResourceLimitHit
from pipeline.text.prompts import render_task_prompt


def spread_temperature(index: int) -> float:
    """The default temperature of rollout ``index``: 0, 1, then the midpoints in bit-reversed order (0.5, 0.25,
    0.75, 0.125, 0.625, 0.375, 0.875, 0.0625, ...), so the first rollouts already spread over [0, 1] and no two
    rollouts of a task share a value (for K up to 64, the most juniors.k allows)."""
    if index <= 1:
        return float(index)
    n, value, step = index - 1, 0.0, 0.5
    while n:
        value, n, step = value + step * (n & 1), n >> 1, step / 2
    return value


def rollout_temperature(temperatures: list[float] | None, model_temperature: float | None, index: int) -> float:
    """Rollout ``index``'s temperature: an explicit juniors.temperatures list wins (rollout i uses
    temperatures[i mod n]); else the junior model's own temperature (models.junior.temperature), for every
    rollout; else the default spread (``spread_temperature``)."""
    if temperatures:
        return temperatures[index % len(temperatures)]
    if model_temperature is not None:
        return model_temperature
    return spread_temperature(index)


def task_agent(job: TaskJob, name: str, client: ModelClient, runtime: Runtime, budget: Budget,
               system_prompt: str = "minimal", **options: Any) -> Agent:
    """The agent that works on the task's issue end to end in ``runtime`` (a junior, the solo baseline);
    ``system_prompt`` piv: the plan-implement-verify prompt (``solo.prompt``) instead of the minimal one."""
    limits = job.config.limits
    tools = limits.action_format == "tools"
    system = "agent_system_tools.md.j2" if tools else "agent_system.md.j2"
    if system_prompt == "piv":
        system = "agent_system_piv.md.j2"
    messages = prompt(system, "agent_instance.md.j2", workdir=str(runtime.workdir),
                      command_timeout=int(limits.command_timeout), max_steps=limits.max_steps,
                      task_text=render_task_prompt(job.task), tools=tools, editor=limits.editor)
    return Agent(AgentSettings(name, client, runtime, budget, limits, messages=messages, **options))


def run_rollout(job: TaskJob, index: int, client: ModelClient) -> Rollout:
    """Run rollout ``index`` and write ``junior/rollout-NN.json``; failures are recorded, never raised."""
    juniors, task, files = job.config.juniors, job.task, job.paths.junior_files
    name = f"rollout-{index:02d}"
    budget = job.budget_for("junior").child(f"{name} of {task.instance_id}", job.config.budgets.per_rollout)
    temperature = rollout_temperature(juniors.temperatures, client.spec.temperature, index)
    record = Rollout(instance_id=task.instance_id, index=index, model=client.spec.model, temperature=temperature,
                     seed=juniors.seed + index, patch="", patch_source=None)
    trajectory = files.live_trajectory(index)
    runtime = agent = None
    try:
        runtime = job.open_runtime(name, background=True)
        agent = task_agent(job, name, client, runtime, budget, agent_index=index, temperature=temperature,
                           seed=juniors.seed + index, trajectory_path=trajectory, whole_trajectory=False)
        if agent.resume():
            # Its own limit counts what it spent before, as the task's does: from the ledger, which also has a
            # reply paid for just before a crash that only the reply journal kept.
            budget.seed(client.spent_by(name))
        run = agent.record if agent.finished else agent.run()
        record.exit_reason, record.error, record.trajectory = run.exit_reason, run.error, run.to_dict()
        _take_patch(runtime, record, juniors.max_patch_bytes)
        if job.config.limits.leave_out_scratch and record.patch:
            record.patch, left_out = without_scratch(record.patch, record.base_entries)
            if left_out:
                record.scratch_left_out = left_out
    except SwepipeError as error:
        _failed(record, agent, runtime, juniors.max_patch_bytes, str(error))
    except InfrastructureFault:  # the trajectory stays, the task reruns
        raise
    except Exception as error:  # noqa: BLE001 - one broken rollout must not end the task
        _failed(record, agent, runtime, juniors.max_patch_bytes, f"{type(error).__name__}: {error}",
                traceback=traceback.format_exc(limit=8))
    finally:
        if runtime is not None:
            runtime.stop()
    steps = record.trajectory or {}
    record.cost, record.input_tokens = steps.get("cost", 0.0), steps.get("input_tokens", 0)
    record.output_tokens, record.seconds = steps.get("output_tokens", 0), steps.get("seconds", 0.0)
    record.steps = len(steps.get("steps", []))
    if record.trajectory:
        subject = task_subject(task, str(runtime.workdir) if runtime is not None else None)
        record.retrieval = [RetrievalFinding.model_validate(finding)
                            for finding in audit_agent(record.trajectory, subject)]
    record = Rollout.of(record.to_dict())  # checked as its file is, before it is written
    record.write(files.rollout(index))
    if record.trajectory and agent is not None:
        agent.journal.discard()  # now inside the rollout record
    return record


def _failed(record: Rollout, agent: Agent | None, runtime: Runtime | None, max_patch_bytes: int, error: str,
            traceback: str | None = None) -> None:
    """A rollout that failed outside its agent's loop still keeps what was paid for: the agent's steps (and so
    their cost) and, while the workspace answers, its diff."""
    record.exit_reason, record.error = ExitReason.RUNTIME_ERROR, error
    if traceback is not None:
        record.traceback = traceback
    if agent is None:
        return
    record.trajectory = agent.record.to_dict()
    if runtime is not None and not record.patch_source:
        try:
            _take_patch(runtime, record, max_patch_bytes)
        except InfrastructureFault:
            raise
        except Exception as problem:  # noqa: BLE001 - no diff to be had: the failure is already on record
            record.patch_error = f"{type(problem).__name__}: {problem}"


_WORKSPACE_FAILED = (ExitReason.RUNTIME_ERROR, ExitReason.RESOURCE_LIMIT)


def _take_patch(runtime: Runtime, record: Rollout, max_bytes: int) -> None:
    """The candidate is the working tree's diff, whatever ended the rollout.

    A diff that cannot be taken is the rollout's outcome (``patch_error``, the agent's own exit kept in
    ``agent_exit_reason``), never an empty patch that looks like "no edit". Edits inside submodules cannot be
    part of a patch to the parent repository; the record names those submodules. A diff over ``max_bytes``
    (juniors.max_patch_bytes) is dropped: the rollout ends ``patch_too_large``.
    """
    try:
        record.patch = runtime.diff(max_bytes=max_bytes)
        record.patch_source = "git diff"
        submodules = changed_submodules(runtime)
    except PatchTooLarge as error:
        record.patch, record.patch_error = "", f"{error} (juniors.max_patch_bytes)"
        record.patch_dropped = "too_large"
        _patch_ended(record, "patch_too_large")
        return
    except DiffFailed as error:
        record.patch, record.patch_error = "", str(error)
        if record.exit_reason not in _WORKSPACE_FAILED:  # else the aftermath of what already ended the rollout
            _patch_ended(record, "patch_error")
        return
    except ResourceLimitHit as hit:  # what the agent left running (a fork bomb in the background) hit a limit
        record.patch, record.patch_error, record.error = "", str(hit), record.error or str(hit)
        _patch_ended(record, ExitReason.RESOURCE_LIMIT)
        return
    except (SwepipeError, RuntimeUnavailable) as error:
        if record.exit_reason not in _WORKSPACE_FAILED:
            raise  # Docker failed under a working rollout: not its result
        record.patch, record.patch_error = "", str(error)  # its workspace had already died under the agent
        return
    _probe_source_tree(runtime, record)
    if submodules:
        record.submodule_changes = submodules
        record.patch_note = (f"edits inside submodule(s) {', '.join(submodules)} are not in the patch: a patch "
                             "to the parent repository cannot carry them")


def _patch_ended(record: Rollout, reason: str) -> None:
    """The diff, not the agent, ended the rollout: ``reason``, the agent's own exit kept in agent_exit_reason."""
    record.agent_exit_reason, record.exit_reason = record.exit_reason, reason


def _probe_source_tree(runtime: Runtime, record: Rollout) -> None:
    """Record what the base commit holds around the patch's new files and in the spec/ and testing/ folders it
    touches (``base_entries``), so the pool can tell a new source file from a scratch file and a test folder
    from a source folder. Best effort: without it the pool judges from the patches alone."""
    entries = base_entries(runtime, record.patch or "")
    if entries is not None:
        record.base_entries = entries


def base_entries(runtime: Runtime, patch: str) -> list[str] | None:
    """What the base commit holds around ``patch``'s new files and in the test-like folders it touches; None when
    it cannot be listed (an optional look, never an agent's outcome)."""
    folders, test_folders = source_tree_probe(patch)
    base = shlex.quote(runtime.base_commit)
    git = f"{GIT_QUIET} -c core.quotePath=false"
    try:
        listing = runtime.run(f"{git} ls-tree {base} -- . {' '.join(map(shlex.quote, folders))}", timeout=60,
                              output_limit=None)
        tests = (runtime.run(f"{git} ls-tree -r --name-only {base} -- {' '.join(map(shlex.quote, test_folders))}",
                             timeout=60, output_limit=None) if test_folders else None)
    except InfrastructureFault:
        raise
    except Exception:  # noqa: BLE001 - an optional look at the base commit
        return None
    if listing.ok and (tests is None or tests.ok):
        return probe_entries(listing.output, tests.output if tests else "")
    return None


def leave_out_scratch(runtime: Runtime, patch: str) -> tuple[str, dict[str, str]]:
    """limits.leave_out_scratch: ``patch`` without its scratch files (pipeline.juniors.pool.without_scratch), judged
    with what the base commit holds around them."""
    return without_scratch(patch, base_entries(runtime, patch)) if patch else (patch, {})
