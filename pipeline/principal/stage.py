"""Stage 3: one call to the principal model; its edits become the prediction's `git diff`."""

from __future__ import annotations

import json
import posixpath
import shlex
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from pipeline.audit import reached_line
from pipeline.edits.blocks import Edit, EditApplyError, EditFormatError, apply_edits, parse_edits
from pipeline.errors import SwepipeError
from pipeline.job import TaskJob, once
from pipeline.models.budget import Budget, CostLimitExceeded
from pipeline.models.client import ModelCallFailed, ModelClient
from pipeline.pool_rules import CandidateDraft, CandidatePool
from pipeline.records import Brief, PrincipalResult
from pipeline.records.brief import SeniorAt
from pipeline.records.chat import ChatMessage
from pipeline.records.principal import Shown
from pipeline.records.sources import PatchSource
from pipeline.rundir.layout import PrincipalFiles
from pipeline.rundir.storage import write_json_atomic
from pipeline.runtime.base import Runtime, apply_check
from pipeline.settings.config import PrincipalConfig, RunConfig
from pipeline.settings.model_spec import Role
from pipeline.tasks import Task
from pipeline.text import patchtext
from pipeline.text.prompts import render, render_task_prompt

CHECK_PATH = "/tmp/swepipe-prediction.diff"
MAX_ATTEMPTS = 2  # the call and at most one retry, for edits that cannot be used
MIN_CUT_LINES = 8  # a candidate cut to fit the budget keeps at least this many lines of its patch
MAX_LISTED_FILES = 200  # files named in the repository listing around the touched files
MAX_FILES_PER_DIRECTORY = 40
REPO_ROOTS = ("/app",)  # where SWE-Bench images keep the repository: paths under it are taken from the root


class UnusableEdits(Exception):
    """The reply's edits cannot be parsed, applied, or give no valid diff; the message says why."""


class Principal:
    """Stage 3 as a plug-in: ``write(job, pool, brief)`` returns the result record with the final ``patch``
    and its ``source``. Replace it with ``principal: {impl: "mypkg.mod:MyPrincipal"}``."""

    role: str | None = "principal"  # the model role it calls

    def __init__(self, config: RunConfig):
        self.config = config

    def write(self, job: TaskJob, pool: CandidatePool, brief: Brief) -> PrincipalResult:
        """The task's patch: the one an earlier session recorded (the resume cache), else a new one."""
        return once(job.paths.principal_files.result, lambda: self.write_in_workspace(job, pool, brief),
                    PrincipalResult)

    def write_in_workspace(self, job: TaskJob, pool: CandidatePool, brief: Brief) -> PrincipalResult:
        """A new patch, made in the principal's own workspace of the task (timed as the principal stage): the
        principal model's one call (``run_principal``), patch.diff written."""
        with job.timed("principal"), job.open_runtime("principal") as runtime:
            return run_principal(job.task, brief, pool, job.client(Role.PRINCIPAL), job.budget, runtime,
                                 self.config.principal, job.paths.principal, job.count_tokens)


class PrincipalCall(TypedDict):
    """A call of request.json's ``calls``: its attempt (from 1) and the messages sent."""

    attempt: int
    messages: list[ChatMessage]  # role and content: the principal sends text only


class PrincipalReply(TypedDict):
    """A reply of replies.json, kept as soon as it is paid for."""

    content: str
    cost: float
    input_tokens: int
    output_tokens: int


def run_principal(task: Task, brief: Brief, pool: CandidatePool, client: ModelClient, budget: Budget,
                  runtime: Runtime, settings: PrincipalConfig, directory: Path,
                  count_tokens: Callable[[str], int]) -> PrincipalResult:
    """Write principal/{request.json, replies.json, patch.diff}; returns the result record (the patch in it).

    The messages of each call are saved before it is made (request.json: what the model saw); replies are
    saved as soon as they arrive, so a resumed run reuses them instead of paying again. ``count_tokens``
    measures the candidates against ``settings.candidate_tokens``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    files = PrincipalFiles(directory)
    replies_path, request_path = files.replies, files.request
    replies: list[PrincipalReply] = json.loads(replies_path.read_text()) if replies_path.exists() else []
    calls: list[PrincipalCall] = json.loads(request_path.read_text())["calls"] if request_path.exists() else []
    shown = select_candidates(pool, settings, count_tokens)
    repo_files = _repo_files(runtime)
    touched = [span.file for span in brief.context_spans or brief.spans or [] if span.file]
    listing = nearby_files(repo_files, touched + [path for c in pool.candidates for path in c.files])
    messages: list[ChatMessage] = [{"role": "system", "content": render("principal_system.md.j2")},
                {"role": "user", "content": render("principal_task.md.j2", task_text=render_task_prompt(task),
                                                   analysis=_analysis(brief), context=brief.context,
                                                   candidates=shown.text, files=listing,
                                                   pick=_senior_pick(brief, pool, shown))}]
    patch, error, attempts = "", None, []
    for attempt in range(MAX_ATTEMPTS):
        if attempt < len(replies):
            content = replies[attempt]["content"]
        else:
            calls = calls[:attempt] + [{"attempt": attempt + 1, "messages": list(messages)}]
            write_json_atomic(request_path, {"calls": calls})  # before the call: what the model is sent
            try:
                completion = client.complete(messages, budget, journal=files.reply_journal)
            except (ModelCallFailed, CostLimitExceeded) as failure:
                error = f"principal call failed: {failure}"
                break
            content = completion.content
            replies.append({"content": content, "cost": completion.cost, "input_tokens": completion.input_tokens,
                            "output_tokens": completion.output_tokens})
            write_json_atomic(replies_path, replies)
            files.reply_journal.unlink(missing_ok=True)  # replies.json has it now
        try:
            patch = apply_to_base(content, runtime, repo_files)
            error = None
            break
        except UnusableEdits as problem:
            error = str(problem)
            attempts.append(error)
            messages += [{"role": "assistant", "content": content},
                         {"role": "user", "content": render("principal_retry.md.j2", error=error)}]
    source = PatchSource.PRINCIPAL if patch else None
    if not patch:
        patch, source = _fallback(pool, runtime, settings.fallback)
    patchtext.write(files.patch, patch)
    return PrincipalResult.of({"source": source or PatchSource.NONE, "error": error, "failed_attempts": attempts,
                               "calls": len(replies), "cost": sum(r.get("cost", 0.0) for r in replies),
                               "patch_lines": patch.count("\n"), "candidates": shown.record(), "patch": patch})


def _analysis(brief: Brief) -> str | SeniorAt:
    """The brief's analysis as the principal is shown it ("" when the brief has none)."""
    return brief.analysis if "analysis" in brief.model_fields_set else ""


def apply_to_base(reply: str, runtime: Runtime, repo_files: list[str] | None = None) -> str:
    """Apply a reply's edits to the clean base checkout in ``runtime``; the resulting, checked diff."""
    _reset(runtime)
    try:
        edits = parse_edits(reply)
        _check_writable(edits)
        changed = apply_edits(edits, lambda path: _read(runtime, path),
                              _repo_files(runtime) if repo_files is None else repo_files,
                              roots=dict.fromkeys([str(runtime.workdir), *REPO_ROOTS]))
    except (EditFormatError, EditApplyError) as error:
        raise UnusableEdits(str(error)) from None
    for path, text in changed.items():
        if text is None:
            removed = runtime.run(f"rm -f -- {shlex.quote(path)}", timeout=60)
            if not removed.ok:
                raise UnusableEdits(f"{path} could not be deleted: {removed.output.strip()[:500]}")
        else:
            runtime.write_file(path, text)
    patch = runtime.diff()
    if not patch.strip():
        raise UnusableEdits("the edits change nothing: every REPLACE equals its SEARCH")
    problem = check_applies(patch, runtime)
    if problem:
        raise UnusableEdits(f"the resulting diff does not apply to the base commit: {problem}")
    return patch


def _check_writable(edits: list[Edit]) -> None:
    """UnusableEdits for a replacement holding a lone surrogate (a provider's JSON can send ``\\ud800``): no text
    file can hold one, and writing something else instead would put text the model never wrote into the patch."""
    for edit in edits:
        for number, line in enumerate(edit.replace.splitlines(), start=1):
            bad = next((c for c in line if 0xD800 <= ord(c) <= 0xDFFF), None)
            if bad is not None:
                raise UnusableEdits(f"the edit of {edit.path[:200]} holds a lone surrogate (U+{ord(bad):04X}) on "
                                    f"line {number} of its REPLACE text, which no file can hold; write the character "
                                    "itself")


def check_applies(patch: str, runtime: Runtime) -> str | None:
    """`git apply --check` of ``patch`` against a clean base checkout; None when it applies."""
    _reset(runtime)
    problem = apply_check(runtime, patch, CHECK_PATH)
    _reset(runtime)
    return problem


def _fallback(pool: CandidatePool, runtime: Runtime, fallback: str) -> tuple[str, PatchSource | None]:
    if fallback == PatchSource.JUNIOR_TOP:
        for candidate in pool.candidates:
            if check_applies(candidate.patch, runtime) is None:
                return candidate.patch, PatchSource.FALLBACK_JUNIOR_TOP
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
    listing = runtime.run("git -c core.quotePath=off ls-files", timeout=120, output_limit=None)
    return listing.output.splitlines() if listing.ok else []


# ---------------------------------------------------------------- the candidates the principal sees


@dataclass
class ShownCandidates:
    """The junior candidates as the principal gets them; candidates are named by their 1-based place in
    ``pool.candidates`` (most-voted first: the numbers the senior sees too)."""

    text: str = ""  # the candidates' block of the prompt; "" when none is shown
    tokens: int = 0
    shown: list[int] = field(default_factory=list)
    cut: list[int] = field(default_factory=list)  # shown, but only the start of their patch (bigger than the budget)
    over_budget: list[int] = field(default_factory=list)  # left out: they did not fit in what was left
    over_count: list[int] = field(default_factory=list)  # left out by principal.show_candidates

    def record(self) -> Shown:
        """What the principal's result keeps of them: all but the prompt's text."""
        return Shown(tokens=self.tokens, shown=self.shown, cut=self.cut, over_budget=self.over_budget,
                     over_count=self.over_count)


def select_candidates(pool: CandidatePool, settings: PrincipalConfig,
                      count_tokens: Callable[[str], int]) -> ShownCandidates:
    """The distinct candidates, most-voted first, each with its votes, files and how its rollouts ended, within
    ``settings.candidate_tokens`` (at most ``settings.show_candidates`` of them when set; 0: none).

    Each is shown whole when it fits in what is left of the budget; one bigger than the whole budget is cut
    to what is left (with a note) when at least MIN_CUT_LINES lines of it fit. The others are named as
    left out, never dropped silently."""
    numbered = list(enumerate(pool.candidates, start=1))
    limit = len(numbered) if settings.show_candidates is None else settings.show_candidates
    result = ShownCandidates(over_count=[number for number, _ in numbered[limit:]])
    if limit == 0:
        return result
    budget, blocks = settings.candidate_tokens, []
    for number, candidate in numbered[:limit]:
        lines = patchtext.printable(candidate.patch).removesuffix("\n").split("\n")
        block = _candidate_block(number, candidate, lines, len(lines))
        cost = count_tokens(block)
        if cost > budget - result.tokens and cost > budget:  # bigger than the whole budget: cut to what is left
            block, cost = _cut_to_fit(number, candidate, lines, budget - result.tokens, count_tokens)
            if block:
                result.cut.append(number)
        if not block or result.tokens + cost > budget:
            result.over_budget.append(number)
            continue
        blocks.append(block)
        result.shown.append(number)
        result.tokens += cost
    if not result.shown and not result.over_budget:
        return result
    left_out = [(n, "over the candidates' token budget") for n in result.over_budget] + \
               [(n, "over principal.show_candidates") for n in result.over_count]
    result.text = render("principal_candidates.md.j2", blocks=blocks, budget=budget,
                         left_out=[_left_out_line(n, pool.candidates[n - 1], why) for n, why in left_out]).strip()
    return result


def _senior_pick(brief: Brief, pool: CandidatePool, shown: ShownCandidates) -> str:
    """The sentence naming the candidate the senior judged right or closest (brief.json's ``candidate``), or ""."""
    pick = brief.candidate
    if not shown.text or isinstance(pick, bool) or not isinstance(pick, int) or not 1 <= pick <= len(pool.candidates):
        return ""
    where = "" if pick in shown.shown else " (not shown above)"
    return f"The senior engineer judged Candidate {pick}{where} right, or the closest to right; check it all the same."


def _endings(reasons: list[str]) -> str:
    """How a candidate's rollouts ended: "3 rollouts: submitted x2, step_limit"."""
    counts = Counter(reasons)
    parts = [f"{reason} x{count}" if count > 1 else reason for reason, count in counts.items()]
    return f"{len(reasons)} rollout{'s' if len(reasons) != 1 else ''}: {', '.join(parts)}" if reasons else ""


def _candidate_block(number: int, candidate: CandidateDraft, lines: list[str], keep: int) -> str:
    shown = lines[:keep]
    ticks = max((len(line[1:]) - len(line[1:].lstrip("`")) for line in shown), default=0)  # ``` in the code
    return render("principal_candidate.md.j2", number=number, votes=candidate.votes, files=candidate.files,
                  endings=_endings(candidate.exit_reasons), fence="`" * max(3, ticks + 1), patch="\n".join(shown),
                  cut=len(lines) - keep, total=len(lines), reached=reached_line(candidate.reached)).strip() + "\n"


def _cut_to_fit(number: int, candidate: CandidateDraft, lines: list[str], room: int,
                count_tokens: Callable[[str], int]) -> tuple[str, int]:
    """The candidate's block with the most patch lines that fit in ``room`` tokens; ("", 0) below MIN_CUT_LINES."""
    low, high, best = MIN_CUT_LINES, len(lines) - 1, ("", 0)
    while low <= high:
        middle = (low + high) // 2
        block = _candidate_block(number, candidate, lines, middle)
        cost = count_tokens(block)
        if cost <= room:
            best, low = (block, cost), middle + 1
        else:
            high = middle - 1
    return best


def _left_out_line(number: int, candidate: CandidateDraft, why: str) -> str:
    files = ", ".join(candidate.files[:5]) + (f" and {len(candidate.files) - 5} more" if len(candidate.files) > 5
                                              else "")
    votes = f"{candidate.votes} vote{'s' if candidate.votes != 1 else ''}"
    return f"Candidate {number} ({votes}; {files}): {why}"


# ---------------------------------------------------------------- the files around the touched ones


def nearby_files(repo_files: Iterable[str], touched: Iterable[str], max_files: int = MAX_LISTED_FILES,
                 per_directory: int = MAX_FILES_PER_DIRECTORY) -> str:
    """The repository's files around ``touched`` (paths of the context and the candidates): each one's folder
    (its siblings) and that folder's subfolders one level down, so a new file lands in the right place.

    At most ``per_directory`` names a folder and ``max_files`` in all; what is cut is named. "" when no
    touched folder is in the repository."""
    files_in: dict[str, list[str]] = defaultdict(list)
    subfolders: dict[str, set[str]] = defaultdict(set)
    below: Counter[str] = Counter()
    for path in repo_files:
        parts = path.split("/")
        files_in["/".join(parts[:-1])].append(parts[-1])
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth])
            subfolders["/".join(parts[:depth - 1])].add(folder)
            below[folder] += 1
    if not files_in:
        return ""
    own: list[str] = []  # the touched files' folders first, then the folders one level below them
    for path in touched:
        folder = posixpath.dirname(path.strip().strip("/"))
        while folder and folder not in below:  # a new file's folder may not exist yet: its nearest ancestor
            folder = posixpath.dirname(folder)
        own.append(folder)
    folders = list(dict.fromkeys(own + [sub for folder in dict.fromkeys(own) for sub in sorted(subfolders[folder])]))
    lines, listed, unlisted = [], 0, []
    for folder in folders:
        names = sorted(files_in.get(folder, []))
        room = min(per_directory, max_files - listed)
        if room <= 0:
            unlisted.append(folder)
            continue
        lines.append(f"{folder}/" if folder else "(repository root)/")
        lines += [f"  {name}" for name in names[:room]]
        if len(names) > room:
            lines.append(f"  ... and {len(names) - room} more files in this folder, not listed")
        lines += [f"  {sub.rsplit('/', 1)[-1]}/ ({below[sub]} file{'s' if below[sub] != 1 else ''})"
                  for sub in sorted(subfolders.get(folder, ())) if sub not in folders]
        listed += min(room, len(names))
    if unlisted:
        shown = ", ".join(f"{f}/" if f else "(root)" for f in unlisted[:10])
        more = f" and {len(unlisted) - 10} more" if len(unlisted) > 10 else ""
        lines.append(f"(The listing stops at {max_files} files; folders not listed: {shown}{more}.)")
    return "\n".join(lines)
