"""Stage 2: the senior turns the candidate pool into a Brief and the context the principal will see."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from pathlib import Path

from pipeline import patchtext
from pipeline.agent.agent import Agent, prompt
from pipeline.config import RunConfig
from pipeline.errors import RuntimeUnavailable
from pipeline.job import TaskJob, once
from pipeline.juniors.pool import CandidatePool
from pipeline.models.budget import Budget
from pipeline.models.client import ModelClient
from pipeline.prompts import render_task_prompt
from pipeline.runtime.base import Runtime
from pipeline.senior.brief import Brief, BriefFormatError, BriefSpan, check_spans, materialise, parse_brief
from pipeline.storage import write_code_atomic, write_json_atomic, write_text_atomic
from pipeline.tasks import Task

CANDIDATE_PATCH_LIMIT = 8_000  # characters of each candidate patch shown to the senior
MAX_CANDIDATES_SHOWN = 6


class Senior:
    """Stage 2 as a plug-in: ``brief(job, pool)`` returns the brief record, whose ``context`` is the text
    the principal gets. Replace it with ``senior: {impl: "mypkg.mod:MySenior"}``."""

    role = "senior"  # the model role it calls

    def __init__(self, config: RunConfig):
        self.config = config

    def brief(self, job: TaskJob, pool: CandidatePool) -> dict:
        """The brief of an earlier session of this task, or a new one made in a read-only container."""
        def make() -> dict:
            client = job.client("senior") if job.config.plays("senior") and "senior" in job.config.models else None
            started = time.monotonic()
            with job.open_runtime("senior", read_only=True) as runtime:
                record = run_senior(job.task, pool, client, job.budget_for("senior"), runtime, self.config,
                                    job.paths.senior, job.count_tokens)
            job.seconds["senior"] = round(time.monotonic() - started, 2)
            return record

        record = once(job.paths.senior / "brief.json", make)
        return {**record, "context": (job.paths.senior / "context.md").read_text(encoding="utf-8")} \
            if "context" not in record else record


def run_senior(task: Task, pool: CandidatePool, client: ModelClient | None, budget: Budget, runtime: Runtime,
               config: RunConfig, directory: Path, count_tokens: Callable[[str], int]) -> dict:
    """Write senior/{expansion.json, context.md, trajectory.json}; returns the brief record (with its context).

    Without a usable reply from the senior, the deterministic expansion becomes the brief, so the
    principal still gets the code around the candidates; the record says so.
    """
    from pipeline.senior.expand import expand_pool, write_expansion_by_candidate

    settings = config.senior
    directory.mkdir(parents=True, exist_ok=True)
    files = _FileCache(runtime)
    expansion = [BriefSpan(s.file, s.start, s.end, f"{s.kind}: {s.reason}") for s in expand_pool(pool, runtime)]
    write_json_atomic(directory / "expansion.json", [span.__dict__ for span in expansion])
    write_expansion_by_candidate(pool, runtime, directory)  # each candidate's spans, and their lines' base text
    shown = materialise(expansion, files.lines, settings.expansion_tokens, count_tokens)

    brief, agent = None, None
    if client is not None:
        try:
            limits = config.senior_limits()
            messages = prompt("senior_system.md.j2", "senior_instance.md.j2", workdir=str(runtime.workdir),
                              command_timeout=int(limits.command_timeout), max_steps=limits.max_steps,
                              task_text=render_task_prompt(task), tools=limits.action_format == "tools",
                              **_pool_variables(pool, shown.text))
            agent = Agent("senior", client, runtime, budget, limits, messages=messages,
                          trajectory_path=directory / "trajectory.json", check_submission=_problem)
            agent.resume()
            run = agent.record if agent.finished else agent.run()
            if run.exit_reason == "submitted":
                brief = parse_brief(run.submission or "")
        except RuntimeUnavailable:
            raise  # Docker failed, not the senior: the task retries
        except Exception as error:  # noqa: BLE001 - a broken senior falls back, never ends the task
            write_text_atomic(directory / "error.txt", traceback.format_exc())
            agent_error = f"{type(error).__name__}: {error}"
        else:
            agent_error = None if brief else f"senior ended with {run.exit_reason}: {run.error or ''}".strip()
    else:
        agent_error = "no senior model configured"
    if brief is None:
        brief = Brief(analysis=f"(No brief from the senior: {agent_error}. The spans are the code around the "
                               "junior candidates.)", spans=expansion, source="expansion")

    spans, problems = check_spans(brief.spans, files.lines, files.is_directory, root=str(runtime.workdir))
    # The candidates' own hunks stay in as a safety net behind the senior's choice, budget permitting.
    safety = [s for s in expansion if s.reason.startswith("hunk")] if brief.source == "senior" else []
    context = materialise(spans + safety, files.lines, settings.context_tokens, count_tokens)
    brief.problems = problems + context.dropped
    record = {**brief.to_dict(), "context_spans": [s.__dict__ for s in context.spans],
              "context_tokens": context.tokens, "senior_error": agent_error,
              "senior_exit": agent.record.exit_reason if agent else None,
              "senior_cost": agent.record.cost if agent else 0.0,
              "senior_steps": len(agent.record.steps) if agent else 0}
    write_code_atomic(directory / "context.md", context.text)
    return {**record, "context": context.text}


def _problem(reply: str) -> str | None:
    try:
        parse_brief(reply)
    except BriefFormatError as error:
        return f"{error}. Put the brief in one ```json block next to the submit command"
    return None


def _pool_variables(pool: CandidatePool, expansion_text: str) -> dict:
    candidates = [{"votes": c.votes, "files": c.files,
                   "patch": patchtext.printable(c.patch if len(c.patch) <= CANDIDATE_PATCH_LIMIT
                                                else c.patch[:CANDIDATE_PATCH_LIMIT] + "\n[... patch cut ...]")}
                  for c in pool.candidates[:MAX_CANDIDATES_SHOWN]]
    return {"candidates": candidates, "rollouts": pool.rollouts, "empty": len(pool.empty),
            "expansion": expansion_text or "(nothing found)"}


class _FileCache:
    """Base-commit file contents read once through the runtime."""

    def __init__(self, runtime: Runtime):
        self._runtime, self._lines, self._directories = runtime, {}, set()

    def lines(self, path: str) -> list[str] | None:
        if path not in self._lines:
            try:
                self._lines[path] = self._runtime.read_file(path).decode("utf-8", errors="replace").splitlines()
            except IsADirectoryError:
                self._lines[path] = None
                self._directories.add(path)
            except Exception:  # noqa: BLE001 - missing, undecodable, a dead container
                self._lines[path] = None
        return self._lines[path]

    def is_directory(self, path: str) -> bool:
        """Whether ``lines(path)`` found a directory there."""
        return path in self._directories
