"""Stage 3: one call to the principal model; its edits become the prediction's `git diff`."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

from pipeline import patchtext
from pipeline.config import PrincipalConfig, RunConfig
from pipeline.errors import SwepipeError
from pipeline.job import TaskJob, once
from pipeline.juniors.pool import CandidatePool
from pipeline.models.budget import Budget, CostLimitExceeded
from pipeline.models.client import ModelCallFailed, ModelClient
from pipeline.principal.edits import EditApplyError, EditFormatError, apply_edits, parse_edits
from pipeline.prompts import render, render_task_prompt
from pipeline.runtime.base import Runtime
from pipeline.storage import write_json_atomic
from pipeline.tasks import Task

CHECK_PATH = "/tmp/swepipe-prediction.diff"
MAX_ATTEMPTS = 2  # the call and at most one retry, for edits that cannot be used


class UnusableEdits(Exception):
    """The reply's edits cannot be parsed, applied, or give no valid diff; the message says why."""


class Principal:
    """Stage 3 as a plug-in: ``write(job, pool, brief)`` returns the result record with the final ``patch``
    and its ``source``. Replace it with ``principal: {impl: "mypkg.mod:MyPrincipal"}``."""

    role = "principal"  # the model role it calls

    def __init__(self, config: RunConfig):
        self.config = config

    def write(self, job: TaskJob, pool: CandidatePool, brief: dict) -> dict:
        """The patch of an earlier session of this task, or one from the principal model now."""
        def make() -> dict:
            started = time.monotonic()
            with job.open_runtime("principal") as runtime:
                result = run_principal(job.task, brief, pool, job.client("principal"), job.budget, runtime,
                                       self.config.principal, job.paths.principal)
            job.seconds["principal"] = round(time.monotonic() - started, 2)
            return result

        result = once(job.paths.principal / "result.json", make)
        if "patch" not in result:  # written before results held their patch
            result["patch"] = patchtext.read(job.paths.principal / "patch.diff")
        return result


def run_principal(task: Task, brief: dict, pool: CandidatePool, client: ModelClient, budget: Budget,
                  runtime: Runtime, settings: PrincipalConfig, directory: Path) -> dict:
    """Write principal/{replies.json, patch.diff}; returns the result record (the patch in it).

    Replies are saved as soon as they arrive, so a resumed run reuses them instead of paying again.
    """
    directory.mkdir(parents=True, exist_ok=True)
    replies_path = directory / "replies.json"
    replies: list[dict] = json.loads(replies_path.read_text()) if replies_path.exists() else []
    messages = [{"role": "system", "content": render("principal_system.md.j2")},
                {"role": "user", "content": render("principal_task.md.j2", task_text=render_task_prompt(task),
                                                   analysis=brief.get("analysis", ""), context=brief["context"],
                                                   candidates=_candidates(pool, settings.show_candidates))}]
    patch, error, attempts = "", None, []
    for attempt in range(MAX_ATTEMPTS):
        if attempt < len(replies):
            content = replies[attempt]["content"]
        else:
            try:
                completion = client.complete(messages, budget)
            except (ModelCallFailed, CostLimitExceeded) as failure:
                error = f"principal call failed: {failure}"
                break
            content = completion.content
            replies.append({"content": content, "cost": completion.cost, "input_tokens": completion.input_tokens,
                            "output_tokens": completion.output_tokens})
            write_json_atomic(replies_path, replies)
        try:
            patch = apply_to_base(content, runtime)
            error = None
            break
        except UnusableEdits as problem:
            error = str(problem)
            attempts.append(error)
            messages += [{"role": "assistant", "content": content},
                         {"role": "user", "content": render("principal_retry.md.j2", error=error)}]
    source = "principal" if patch else None
    if not patch:
        patch, source = _fallback(pool, runtime, settings.fallback)
    patchtext.write(directory / "patch.diff", patch)
    return {"source": source or "none", "error": error, "failed_attempts": attempts, "calls": len(replies),
            "cost": sum(r.get("cost", 0.0) for r in replies), "patch_lines": patch.count("\n"), "patch": patch}


def apply_to_base(reply: str, runtime: Runtime) -> str:
    """Apply a reply's edits to the clean base checkout in ``runtime``; the resulting, checked diff."""
    _reset(runtime)
    try:
        edits = parse_edits(reply)
        changed = apply_edits(edits, lambda path: _read(runtime, path), _repo_files(runtime))
    except (EditFormatError, EditApplyError) as error:
        raise UnusableEdits(str(error)) from None
    for path, text in changed.items():
        runtime.write_file(path, text)
    patch = runtime.diff()
    if not patch.strip():
        raise UnusableEdits("the edits change nothing: every REPLACE equals its SEARCH")
    problem = check_applies(patch, runtime)
    if problem:
        raise UnusableEdits(f"the resulting diff does not apply to the base commit: {problem}")
    return patch


def check_applies(patch: str, runtime: Runtime) -> str | None:
    """`git apply --check` of ``patch`` against a clean base checkout; None when it applies."""
    _reset(runtime)
    runtime.write_file(CHECK_PATH, patch)
    result = runtime.run(f"git apply --check {shlex.quote(CHECK_PATH)}", timeout=120)
    _reset(runtime)
    return None if result.ok else result.output.strip()[:2000] or f"exit code {result.exit_code}"


def _fallback(pool: CandidatePool, runtime: Runtime, fallback: str) -> tuple[str, str | None]:
    if fallback == "junior_top":
        for candidate in pool.candidates:
            if check_applies(candidate.patch, runtime) is None:
                return candidate.patch, "fallback:junior_top"
    return "", None


def _reset(runtime: Runtime) -> None:
    result = runtime.run("git reset -q --hard && git clean -fdq", timeout=300)
    if not result.ok:
        raise SwepipeError(f"cannot reset the principal's checkout: {result.output.strip()[:500]}")


def _read(runtime: Runtime, path: str) -> str | None:
    try:
        data = runtime.read_file(path)
    except (FileNotFoundError, IsADirectoryError):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UnusableEdits(f"{path} is not a UTF-8 text file; edits to binary files cannot be applied") from None


def _repo_files(runtime: Runtime) -> list[str]:
    listing = runtime.run("git ls-files", timeout=120, output_limit=None)
    return listing.output.splitlines() if listing.ok else []


def _candidates(pool: CandidatePool, count: int) -> list[dict]:
    return [{"votes": c.votes, "patch": patchtext.printable(c.patch)} for c in pool.candidates[:count]]
