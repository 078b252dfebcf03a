"""The principal switched off (``--principal-model none``, an ablation): no frontier call; the senior-informed top
candidate is submitted.

What the frontier call adds is measured against this: everything the pipeline pays for but that call. The
candidate the senior judged right or closest (brief.json ``candidate``, 1-based in the pool's order) is
submitted when it applies to the base commit; else the most-voted candidate that applies (the principal's
own ``junior_top`` fallback); else nothing.
"""

from __future__ import annotations

from pipeline.job import TaskJob
from pipeline.pool_rules import CandidatePool
from pipeline.principal.stage import Principal, _fallback, check_applies
from pipeline.records import Brief, PrincipalResult
from pipeline.records.sources import PatchSource
from pipeline.runtime.base import Runtime
from pipeline.text import patchtext


class SubmitSeniorCandidate(Principal):
    """A principal stage that calls no model (``role = None``): ``write(job, pool, brief)`` returns the result
    record with the candidate's ``patch`` and its ``source`` (senior_choice, junior_top or none)."""

    role: str | None = None  # no model role: nothing is called, priced or started for the principal

    def write_in_workspace(self, job: TaskJob, pool: CandidatePool, brief: Brief) -> PrincipalResult:
        """The candidate ``choose`` takes, checked in the principal's workspace; patch.diff written."""
        with job.timed("principal"), job.open_runtime("principal") as runtime:
            result = choose(pool, brief, runtime)
        job.paths.principal.mkdir(parents=True, exist_ok=True)
        patchtext.write(job.paths.principal_files.patch, result.patch)
        return result


def senior_candidate(brief: Brief, pool: CandidatePool) -> tuple[int | None, str | None]:
    """The 1-based pool candidate the brief names, or None and why not."""
    named = brief.candidate
    if isinstance(named, str) and named.strip().isdigit():  # "2" from a model is still candidate 2
        named = int(named.strip())
    if named is None:
        return None, "the brief names no candidate"
    if isinstance(named, bool) or not isinstance(named, int) or not 1 <= named <= len(pool.candidates):
        return None, f"the brief names candidate {named!r}, not one of the pool's {len(pool.candidates)}"
    return named, None


def choose(pool: CandidatePool, brief: Brief, runtime: Runtime) -> PrincipalResult:
    """The result record: the senior's candidate when it applies to the base commit in ``runtime``, else the
    most-voted candidate that applies, else no patch; ``senior_choice_problem`` says why the first was not used."""
    number, problem = senior_candidate(brief, pool)
    if number is not None:
        problem = check_applies(pool.candidates[number - 1].patch, runtime)
        if problem is None:
            return _record(pool.candidates[number - 1].patch, PatchSource.SENIOR_CHOICE, number, brief, None)
        problem = f"candidate {number} does not apply to the base commit: {problem}"
    patch, fallback = _fallback(pool, runtime, PatchSource.JUNIOR_TOP)
    if not patch:
        return _record("", "none", None, brief, problem,
                       error="no candidate applies to the base commit" if pool.candidates else "no candidate")
    used = next((n for n, c in enumerate(pool.candidates, start=1) if c.patch == patch), None)
    return _record(patch, PatchSource.JUNIOR_TOP if fallback else PatchSource.NONE, used, brief, problem)


def _as_named(candidate: object) -> int | str | None:
    """The candidate a brief named as the result records it: a number, text, or null; anything else (``true`` in a
    brief read from disk) as its text."""
    if isinstance(candidate, bool):
        return repr(candidate)
    if candidate is None or isinstance(candidate, (int, str)):
        return candidate
    return repr(candidate)


def _record(patch: str, source: str, number: int | None, brief: Brief, problem: str | None,
            error: str | None = None) -> PrincipalResult:
    return PrincipalResult.of({"source": source, "error": error, "candidate": number,
                               "senior_candidate": _as_named(brief.candidate), "senior_choice_problem": problem,
                               "calls": 0,
                               "cost": 0.0, "failed_attempts": [], "patch_lines": patch.count("\n"), "patch": patch})
