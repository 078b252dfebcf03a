"""The candidate pool: junior patches parsed, cleaned, de-duplicated and counted."""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

_TEST_PATH = re.compile(r"(^|/)(tests?|__tests__|spec|testing)/|(^|/)test_[^/]*\.py$|_test\.(py|go)$|"
                        r"\.(test|spec)\.[cm]?[jt]sx?$|(^|/)conftest\.py$")
_SCRATCH_NAME = re.compile(r"^(reproduce|repro|debug|scratch|tmp|temp|test_repro|check_|verify_)[\w.-]*$|"
                           r"\.(orig|rej|bak|swp|pyc|log)$", re.IGNORECASE)
_SCRATCH_DIR = re.compile(r"(^|/)(__pycache__|\.pytest_cache|node_modules|\.mypy_cache)/")
_DEF_LINE = re.compile(r"^\s*(?:async\s+)?(?:def|class|func|function)\s+[\w$.()* ]+|"
                       r"^\s*(?:export\s+)?(?:const|let)\s+\w+\s*=\s*(?:async\s*)?\(")


def is_test_path(path: str) -> bool:
    return bool(_TEST_PATH.search(path))


def _is_scratch(patched_file) -> bool:
    path = patched_file.path
    return _SCRATCH_DIR.search(path) is not None or (
        patched_file.is_added_file and _SCRATCH_NAME.search(path.rsplit("/", 1)[-1]) is not None)


def _squash(lines) -> tuple[str, ...]:
    return tuple(" ".join(line.value.split()) for line in lines if line.value.strip())


@dataclass
class Candidate:
    key: str
    patch: str  # source edits only, as a unified diff
    test_patch: str  # edits to test files, kept apart
    votes: int = 0
    rollouts: list[int] = field(default_factory=list)
    exit_reasons: list[str] = field(default_factory=list)  # how each of its rollouts ended, in `rollouts` order
    files: list[str] = field(default_factory=list)
    hunks: list[dict] = field(default_factory=list)  # file, old_start, old_lines, function
    functions: list[str] = field(default_factory=list)


@dataclass
class CandidatePool:
    instance_id: str
    candidates: list[Candidate]
    rollouts: int
    empty: list[int]  # rollouts that left no source edit
    unparsable: list[int]
    failed: list[int] = field(default_factory=list)  # rollouts whose diff could not be taken (patch_error)

    def to_dict(self) -> dict:
        return asdict(self)


def build_pool(instance_id: str, rollouts: list[dict]) -> CandidatePool:
    by_key: dict[str, Candidate] = {}
    empty, unparsable, failed = [], [], []
    for rollout in rollouts:
        index = rollout.get("index", 0)
        if rollout.get("patch_error"):
            failed.append(index)
            continue
        try:
            candidate = normalise(rollout.get("patch") or "")
        except UnidiffParseError:
            unparsable.append(index)
            continue
        if candidate is None:
            empty.append(index)
            continue
        kept = by_key.setdefault(candidate.key, candidate)
        kept.votes += 1
        kept.rollouts.append(index)
        kept.exit_reasons.append(rollout.get("exit_reason") or "unknown")
    ordered = sorted(by_key.values(), key=lambda c: (-c.votes, c.rollouts[0]))
    return CandidatePool(instance_id, ordered, len(rollouts), empty, unparsable, failed)


def normalise(patch: str) -> Candidate | None:
    """Parse a patch; drop scratch files and whitespace-only hunks; None when no source edit is left."""
    if not patch.strip():
        return None
    source_files, source_paths, test_files, hunks, functions, signature = [], [], [], [], [], []
    for patched_file in PatchSet(patch):
        if _is_scratch(patched_file):
            continue
        meaningful = [h for h in patched_file if _squash(h.source_lines()) != _squash(h.target_lines())
                      or patched_file.is_added_file or patched_file.is_removed_file]
        if not meaningful and not (patched_file.is_added_file or patched_file.is_removed_file):
            continue
        if is_test_path(patched_file.path):
            test_files.append(str(patched_file))
            continue
        source_files.append(str(patched_file))
        source_paths.append(patched_file.path)
        for hunk in meaningful:
            function = _enclosing_function(hunk)
            hunks.append({"file": patched_file.path, "old_start": hunk.source_start, "old_lines": hunk.source_length,
                          "function": function})
            if function and function not in functions:
                functions.append(function)
            removed = _squash(line for line in hunk if line.is_removed)
            added = _squash(line for line in hunk if line.is_added)
            signature.append((patched_file.path, removed, added))
        if patched_file.is_removed_file:
            signature.append((patched_file.path, ("<deleted>",), ()))
    if not source_files:
        return None
    key = hashlib.sha256(repr(sorted(signature)).encode()).hexdigest()[:16]
    return Candidate(key=key, patch="".join(source_files), test_patch="".join(test_files), files=sorted(source_paths),
                     hunks=hunks,
                     functions=functions)


def _enclosing_function(hunk) -> str | None:
    """The nearest definition line inside the hunk's context, else git's section header."""
    for line in hunk:
        if (line.is_context or line.is_removed) and _DEF_LINE.match(line.value):
            return line.value.strip()
    header = (hunk.section_header or "").strip()
    return header or None
