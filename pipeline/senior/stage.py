"""Stage 2: the senior turns the candidate pool into a brief and the context the principal will see."""

from __future__ import annotations

import json
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

from pipeline import records
from pipeline.agent.agent import Agent, prompt
from pipeline.agent.agent_run import AgentRun
from pipeline.agent.settings import AgentSettings
from pipeline.audit import audit_agent, reached_line, task_subject
from pipeline.errors import InfrastructureFault
from pipeline.job import TaskJob, once
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.pool_rules import CandidatePool
from pipeline.records.sources import BriefSource
from pipeline.records.trajectory import ExitReason
from pipeline.rundir.layout import SeniorFiles
from pipeline.rundir.storage import write_code_atomic, write_json_atomic, write_text_atomic
from pipeline.runtime.base import Runtime
from pipeline.senior.brief import (
    BriefDraft,
    BriefFormatError,
    BriefSpan,
    check_candidate,
    check_spans,
    materialise,
    parse_brief,
)
from pipeline.settings.config import RunConfig
from pipeline.settings.model_spec import Role
from pipeline.tasks import Task
from pipeline.text import patchtext
from pipeline.text.prompts import render, render_task_prompt

CANDIDATE_PATCH_LIMIT = 8_000  # characters of each candidate patch shown to the senior
CANDIDATES_LIMIT = 40_000  # characters of all candidate patches shown; the rest are listed by files and votes


class Senior:
    """Stage 2 as a plug-in: ``brief(job, pool)`` returns the brief record, whose ``context`` is the text
    the principal gets. Replace it with ``senior: {impl: "mypkg.mod:MySenior"}``."""

    role = Role.SENIOR  # the model role it calls

    def __init__(self, config: RunConfig):
        self.config = config

    def brief(self, job: TaskJob, pool: CandidatePool) -> records.Brief:
        """The task's brief with its context: the one an earlier session recorded (the resume cache; its context
        read from context.md), else a new one."""
        record = once(job.paths.senior_files.brief, lambda: self.brief_in_workspace(job, pool), records.Brief)
        if "context" in record.model_fields_set:
            return record
        return record.model_copy(update={"context": job.paths.senior_files.context.read_text(encoding="utf-8")})

    def brief_in_workspace(self, job: TaskJob, pool: CandidatePool) -> records.Brief:
        """A new brief, made in a read-only workspace of the task (timed as the senior stage): the senior agent
        (``run_senior``; none when the senior is switched off: the expansion alone)."""
        plays = job.config.plays(Role.SENIOR) and Role.SENIOR in job.config.models
        client = job.client(Role.SENIOR) if plays else None
        with job.timed("senior"), job.open_runtime("senior", read_only=True) as runtime:
            return run_senior(job.task, pool, client, job.budget_for("senior"), runtime, self.config,
                              job.paths.senior, job.count_tokens)


def run_senior(task: Task, pool: CandidatePool, client: ModelClient | None, budget: Budget, runtime: Runtime,
               config: RunConfig, directory: Path, count_tokens: Callable[[str], int]) -> records.Brief:
    """Write senior/{expansion.json, context.md, trajectory.json}; returns the brief record (with its context).

    The senior hands in its brief with submit; at its step limit its last turn asks for the brief, and a
    senior that still ends without submitting has its last reply read for one. Without a usable brief, the
    deterministic expansion becomes the brief, so the principal still gets the code around the candidates;
    the record says so. Span paths are made repository-relative (``check_spans``); brief.json's ``spans`` are
    the checked ones, ``problems`` what was dropped and why, ``candidate`` the pool candidate (1-based) the
    senior judged right or closest.
    """
    from pipeline.senior.expand import expand_pool, write_expansion_by_candidate

    settings = config.senior
    directory.mkdir(parents=True, exist_ok=True)
    written = SeniorFiles(directory)
    files = _FileCache(runtime)
    expansion = [BriefSpan(s.file, s.start, s.end, f"{s.kind}: {s.reason}") for s in expand_pool(pool, runtime)]
    write_json_atomic(written.expansion, [span.__dict__ for span in expansion])
    write_expansion_by_candidate(pool, runtime, directory)  # each candidate's spans, and their lines' base text
    shown = materialise(expansion, files.lines, settings.expansion_tokens, count_tokens)

    brief, agent = None, None
    root = str(runtime.workdir)
    if client is not None:
        try:
            limits = config.senior_limits()
            tools = limits.action_format == "tools"
            messages = prompt("senior_system.md.j2", "senior_instance.md.j2", workdir=root,
                              command_timeout=int(limits.command_timeout), max_steps=limits.max_steps,
                              task_text=render_task_prompt(task), tools=tools, editor=limits.editor,
                              context_tokens=settings.context_tokens,
                              principal_sees_candidates=config.principal.show_candidates != 0,
                              principal_writes=config.plays(Role.PRINCIPAL),
                              **_pool_variables(pool, shown.text))
            agent = Agent(AgentSettings(
                "senior", client, runtime, budget, limits, messages=messages, trajectory_path=written.trajectory,
                check_submission=lambda reply: _problem(reply, files, root),
                last_step_note=render("senior_last_step.md.j2", tools=tools).strip(),
                editor=("view",)))  # read-only: the brief is its work, not a change
            agent.resume()
            # A session the budget stopped goes on from where it was (with a budget that allows it now).
            run = agent.record if agent.finished and agent.record.exit_reason != ExitReason.COST_LIMIT else agent.run()
            if run.exit_reason == ExitReason.SUBMITTED:
                brief = parse_brief(run.submission or "")
            else:
                brief = _brief_in_last_reply(run)
        except InfrastructureFault:  # the task reruns the senior
            raise
        except Exception as error:  # noqa: BLE001 - a broken senior falls back, never ends the task
            write_text_atomic(written.error, traceback.format_exc())
            agent_error: str | None = f"{type(error).__name__}: {error}"
        else:
            agent_error = None if brief else f"senior ended with {run.exit_reason}: {run.error or ''}".strip()
    else:
        agent_error = "no senior model configured"
    if brief is None:
        brief = BriefDraft(analysis=f"(No brief from the senior: {agent_error}. The spans are the code around the "
                                    "junior candidates.)", spans=expansion, source=BriefSource.EXPANSION)

    check_candidate(brief, len(pool.candidates))
    spans, problems = check_spans(brief.spans, files.lines, files.is_directory, root=root)
    # The candidates' own hunks stay in as a safety net behind the senior's choice, budget permitting.
    safety = [s for s in expansion if s.reason.startswith("hunk")] if brief.source == BriefSource.SENIOR else []
    context = materialise(spans + safety, files.lines, settings.context_tokens, count_tokens)
    brief.spans = spans  # as checked: paths from the repository root, ranges within the files
    brief.problems = brief.problems + problems + context.dropped
    record = {**brief.to_dict(), "context_spans": [s.__dict__ for s in context.spans],
              "context_tokens": context.tokens, "senior_error": agent_error,
              "senior_exit": agent.record.exit_reason if agent else None,
              "senior_cost": agent.record.cost if agent else 0.0,
              "senior_steps": len(agent.record.steps) if agent else 0}
    if agent is not None:
        record["senior_retrieval"] = audit_agent(agent.record.to_dict(), task_subject(task, root))
    write_code_atomic(written.context, context.text)
    return records.Brief.of({**record, "context": context.text})


def _problem(reply: str, files: _FileCache, root: str) -> str | None:
    """Why a submitted brief cannot be used as it is (the senior is asked again), or None.

    A brief needs an analysis and at least one span that names lines of a file in the repository; malformed
    span lines beside good ones are dropped later, not refused. A senior that cannot give one (at its step
    limit, or after max_format_errors tries) still has its analysis taken: see ``_brief_in_last_reply``.
    """
    try:
        brief = parse_brief(reply)
    except BriefFormatError as error:
        return f"{error}. Write the brief as your instructions show, next to the submit command"
    kept, problems = check_spans(brief.spans, files.lines, files.is_directory, root=root)
    if not kept:
        why = "; ".join((brief.problems + problems)[:6]) or "it lists none"
        return (f"your brief has no usable span ({why}). Under SPANS:, list one span a line as "
                "path/from/repo/root.py:START-END and why, with line numbers of the files as they are now")
    return None


def _brief_in_last_reply(run: AgentRun) -> BriefDraft | None:
    """The brief in the senior's last reply (its text and any tool call's arguments), if it wrote one without
    submitting it (it ran out of steps, or its submission was refused at the end); the problems say so."""
    if not run.steps:
        return None
    step = run.steps[-1]
    parts = [step.reply or ""]
    for call in step.tool_calls or []:
        try:
            arguments = json.loads(call.get("arguments") or "{}")
        except (TypeError, ValueError):
            continue
        if isinstance(arguments, dict):
            parts.extend(value for value in arguments.values() if isinstance(value, str))
    try:
        brief = parse_brief("\n\n".join(parts))
    except BriefFormatError:
        return None
    brief.problems.insert(0, f"the senior ended with {run.exit_reason} without submitting; the brief is its "
                             "last reply")
    return brief


class CandidateVariables(TypedDict):
    """A candidate as senior_instance.md.j2 shows it."""

    votes: int
    files: list[str]
    exits: str
    patch: str | None  # None: past CANDIDATES_LIMIT, only its files are shown
    reached: str


class PoolVariables(TypedDict):
    """The pool's variables of senior_instance.md.j2."""

    candidates: list[CandidateVariables]
    rollouts: int
    empty: int
    alone: bool
    expansion: str


def _pool_variables(pool: CandidatePool, expansion_text: str) -> PoolVariables:
    """The candidates as the senior sees them, numbered in pool order (the numbers CANDIDATE answers with):
    whole patches (each cut at CANDIDATE_PATCH_LIMIT) while CANDIDATES_LIMIT lasts, then only their files."""
    candidates: list[CandidateVariables] = []
    used = 0
    for candidate in pool.candidates:
        patch = candidate.patch if len(candidate.patch) <= CANDIDATE_PATCH_LIMIT \
            else candidate.patch[:CANDIDATE_PATCH_LIMIT] + "\n[... patch cut ...]"
        shown = used + len(patch) <= CANDIDATES_LIMIT
        used += len(patch) if shown else 0
        reasons = Counter(candidate.exit_reasons)
        candidates.append({"votes": candidate.votes, "files": candidate.files,
                           "exits": ", ".join(f"{reason} x{count}" if count > 1 else reason
                                              for reason, count in reasons.most_common()),
                           "patch": patchtext.printable(patch) if shown else None,
                           "reached": reached_line(candidate.reached)})
    return {"candidates": candidates, "rollouts": pool.rollouts, "empty": len(pool.empty),
            "alone": not pool.candidates, "expansion": expansion_text or "(nothing found)"}


class _FileCache:
    """Base-commit file contents read once through the runtime."""

    def __init__(self, runtime: Runtime):
        self._runtime = runtime
        self._lines: dict[str, list[str] | None] = {}
        self._directories: set[str] = set()

    def lines(self, path: str) -> list[str] | None:
        if path not in self._lines:
            try:
                self._lines[path] = self._runtime.read_file(path).decode("utf-8", errors="replace").splitlines()
            except IsADirectoryError:
                self._lines[path] = None
                self._directories.add(path)
            except InfrastructureFault:
                raise
            except Exception:  # noqa: BLE001 - missing, undecodable, a dead container
                self._lines[path] = None
        return self._lines[path]

    def is_directory(self, path: str) -> bool:
        """Whether ``lines(path)`` found a directory there."""
        return path in self._directories
