"""Expand a candidate pool into the code spans the real fix likely depends on.

Cheap and deterministic: tree-sitter parses and bounded ``git grep`` calls through the runtime, at the base commit.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from unidiff import Hunk, PatchSet

from pipeline.errors import InfrastructureFault
from pipeline.juniors.pool import is_test_path
from pipeline.pool_rules import CandidateDraft, CandidatePool
from pipeline.runtime.base import GIT_QUIET, Runtime
from pipeline.senior.code_index import Definition, definitions, enclosing, identifiers, language_for, references

KINDS = ("hunk", "definition", "caller", "test", "window")  # highest priority first
_PRIORITY = {kind: rank for rank, kind in enumerate(KINDS)}
_MAX_FILE_BYTES = 1 << 20
_MAX_SPAN = 300  # an enclosing definition longer than this is replaced by a window, others are cut
_GREP_CAP = 400  # grep output lines read per name; beyond that a name counts as too common
_MAX_HITS = 40
_CALL_SITE_WINDOW = 3
_FAMILIES = {"python": ("**/*.py",), "go": ("**/*.go",)}
_JS_FAMILY = tuple(f"**/*.{ext}" for ext in ("js", "mjs", "cjs", "jsx", "ts", "mts", "cts", "tsx"))
_EXCLUDED = ("**/node_modules/**", "**/vendor/**", "**/*.min.js")
_CALLABLE_KINDS = {"function", "method", "variable"}
_GREP_LINE = re.compile(r"^(.+?):(\d+):(.*)$")
_DECLARING = (r"\b(?:def|class|func|function\*?|type|interface|enum|struct|const|let|var|get|set|static|async|"
              r"readonly|public|private|protected|abstract|override)\s+{0}\b|"  # def f, const f, static f
              r"\bfunc\s*\([^)]*\)\s*{0}\b|"  # a Go method
              r"\.{0}\s*=[^=]|"  # exports.f = ..., A.prototype.f = ...
              r"^\s*{0}(?:\s*=[^=]|\s*:|\s*\(.*\{{\s*$|\s+\w.*\{{\s*$)")  # F = ..., f(a) {{, grouped Go types


@dataclass
class ExpansionSpan:
    file: str
    start: int  # 1-based, inclusive, base commit lines
    end: int
    reason: str
    kind: str  # one of KINDS


def merge_spans(spans: list[ExpansionSpan]) -> list[ExpansionSpan]:
    """Merge a file's overlapping or adjacent spans, keeping the best kind; merged spans keep the input order."""
    def rank(item: tuple[int, ExpansionSpan]) -> tuple[int, int]:
        return _PRIORITY.get(item[1].kind, len(KINDS)), item[0]

    groups: list[list[tuple[int, ExpansionSpan]]] = []
    for item in sorted(enumerate(spans), key=lambda item: (item[1].file, item[1].start, item[1].end, item[0])):
        last = groups[-1] if groups else None
        if last and last[0][1].file == item[1].file and item[1].start <= max(s.end for _, s in last) + 1:
            last.append(item)
        else:
            groups.append([item])
    merged = []
    for group in groups:
        members = sorted(group, key=rank)
        reasons = dict.fromkeys(part for _, span in members for part in span.reason.split("; "))
        best = members[0][1]
        span = ExpansionSpan(best.file, min(s.start for _, s in group), max(s.end for _, s in group),
                             "; ".join(reasons), best.kind)
        merged.append((min(index for index, _ in group), span))
    return [span for _, span in sorted(merged, key=lambda item: item[0])]


@dataclass
class _Hunk:
    file: str
    regions: list[tuple[int, int, str]]  # changed base lines first..last; an insertion: (line before, after, text)
    removed: str
    added: str


@dataclass
class _Changed:
    """A definition some candidates change, or a window around a change outside any definition."""
    span: ExpansionSpan
    definition: Definition | None
    candidates: set[str] = field(default_factory=set)
    votes: int = 0


class _Repo:
    """Cached, failure-proof reads of the base repository through the runtime."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._sources: dict[str, str | None] = {}
        self._defs: dict[str, list[Definition]] = {}
        self._greps: dict[tuple[str, tuple[str, ...]], list[tuple[str, int, str]] | None] = {}
        self._files: list[str] | None = None

    def is_test(self, path: str) -> bool:
        """``is_test_path`` knowing the repository's files: a spec/ or testing/ folder holds tests only when
        files named like tests are in it."""
        maybe = "spec/" in path or "testing/" in path
        return is_test_path(path, self.files() if maybe else None)

    def files(self) -> list[str]:
        if self._files is None:
            try:
                listing = self.runtime.run(f"{GIT_QUIET} -c core.quotePath=false ls-files", timeout=60,
                                           output_limit=None)
                self._files = listing.output.splitlines() if listing.ok else []
            except InfrastructureFault:
                raise
            except Exception:  # noqa: BLE001 - a listing that fails only makes spec/ folders count as source
                self._files = []
        return self._files

    def source(self, path: str) -> str | None:
        if path not in self._sources:
            self._sources[path] = self._read(path)
        return self._sources[path]

    def _read(self, path: str) -> str | None:
        try:
            data = self.runtime.read_file(path)
        except InfrastructureFault:
            raise
        except Exception:
            return None
        if not isinstance(data, bytes) or len(data) > _MAX_FILE_BYTES or b"\0" in data[:8192]:
            return None
        return data.decode("utf-8", "replace")

    def definitions(self, path: str) -> list[Definition]:
        if path not in self._defs:
            source = self.source(path)
            self._defs[path] = definitions(path, source) if source is not None else []
        return self._defs[path]

    def lines(self, path: str) -> list[str]:
        source = self.source(path)
        return source.removesuffix("\n").split("\n") if source else []

    def grep(self, name: str, globs: tuple[str, ...]) -> list[tuple[str, int, str]] | None:
        """Whole-word hits of ``name`` as (path, line, text); None when the command fails or hits are too many."""
        key = (name, globs)
        if key not in self._greps:
            self._greps[key] = self._grep(name, globs)
        return self._greps[key]

    def _grep(self, name: str, globs: tuple[str, ...]) -> list[tuple[str, int, str]] | None:
        pathspecs = [f":(glob){g}" for g in globs] + [f":(exclude,glob){g}" for g in _EXCLUDED]
        command = (f"{GIT_QUIET} -c core.quotePath=false grep -n -w -I -F -e {shlex.quote(name)} -- "
                   f"{' '.join(shlex.quote(p) for p in pathspecs)} | cut -c1-400 | head -n {_GREP_CAP + 1}")
        try:
            result = self.runtime.run(command, timeout=30, output_limit=256_000)
        except InfrastructureFault:
            raise
        except Exception:
            return None
        if result.timed_out or result.cut_bytes:
            return None
        hits = []
        for line in result.output.splitlines():
            match = _GREP_LINE.match(line)
            if match:
                hits.append((match.group(1), int(match.group(2)), match.group(3)))
        return hits if len(hits) <= _GREP_CAP else None


def _globs(path: str) -> tuple[str, ...]:
    language = language_for(path)
    return _FAMILIES.get(language, _JS_FAMILY) if language else ()


def _hunks(candidate: CandidateDraft) -> list[_Hunk]:
    """The candidate's meaningful hunks on files it does not create."""
    wanted = {(h["file"], h["old_start"], h["old_lines"]) for h in candidate.hunks}
    try:
        patch = PatchSet(candidate.patch)
    except InfrastructureFault:
        raise
    except Exception:
        return [_Hunk(h["file"], [(h["old_start"], h["old_start"] + max(h["old_lines"], 1) - 1, "")], "", "")
                for h in candidate.hunks]
    return [_Hunk(patched_file.path, _regions(hunk), "".join(line.value for line in hunk if line.is_removed),
                  "".join(line.value for line in hunk if line.is_added))
            for patched_file in patch if not patched_file.is_added_file
            for hunk in patched_file if (patched_file.path, hunk.source_start, hunk.source_length) in wanted]


def _regions(hunk: Hunk) -> list[tuple[int, int, str]]:
    regions: list[tuple[int, int, str]] = []
    removed: list[int] = []  # the lines a run of removals takes, in the old file
    added: list[str] = []  # the text a run of additions inserts
    before = hunk.source_start - 1

    def close(after: int) -> None:
        if removed:
            regions.append((removed[0], removed[-1], ""))
        elif added:
            regions.append((before, after, "".join(added)))
        removed.clear()
        added.clear()

    for line in hunk:
        number = line.source_line_no  # a context or removed line's, in the old file; None for an added line
        if line.is_context and number is not None:
            close(number)
            before = number
        elif line.is_removed and number is not None:
            removed.append(number)
        elif line.is_added:
            added.append(line.value)
    close(hunk.source_start + hunk.source_length)
    return regions


def _owner(defs: list[Definition], lines: list[str], first: int, last: int, inserted: str) -> Definition | None:
    """The innermost definition holding a changed region.

    Lines inserted after a definition's last line still belong to it when indented deeper than its header:
    Python bodies have no closing brace.
    """
    def holds(d: Definition) -> bool:
        if not d.start_line <= first <= d.end_line:
            return False
        return last <= d.end_line or bool(inserted) and _indent(inserted) > _indent(lines[d.start_line - 1])

    return min(filter(holds, defs), key=lambda d: (d.end_line - d.start_line, -d.start_line), default=None)


def _indent(text: str) -> int:
    line = next((line for line in text.split("\n") if line.strip()), "")
    return len(line.expandtabs()) - len(line.expandtabs().lstrip())


def _changed_spans(repo: _Repo, hunk: _Hunk, window: int) -> list[tuple[ExpansionSpan, Definition | None]]:
    """The definitions a hunk changes (kind hunk) and windows around changes outside any (kind window)."""
    lines = repo.lines(hunk.file)
    defs = repo.definitions(hunk.file)
    spans: list[tuple[ExpansionSpan, Definition | None]] = []
    for first, last, inserted in hunk.regions:
        owner = _owner(defs, lines, first, last, inserted)
        if owner is not None and owner.end_line - owner.start_line < _MAX_SPAN:
            spans.append((ExpansionSpan(hunk.file, owner.start_line, owner.end_line, "", "hunk"), owner))
        else:  # a window, still naming an over-long owner so that its callers are searched
            start, end = max(min(first, last) - window, 1), min(max(first, last) + window, len(lines))
            spans.append((ExpansionSpan(hunk.file, start, end, "", "window"), owner))
    return spans


def _qualified(definition: Definition) -> str:
    return f"{definition.parent}.{definition.name}" if definition.parent else definition.name


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def expand_pool(pool: CandidatePool, runtime: Runtime, *, max_definitions_per_symbol: int = 3, max_callers: int = 6,
                max_tests: int = 4, max_symbols: int = 25, window: int = 12,
                repo: _Repo | None = None) -> list[ExpansionSpan]:
    """Spans of base-commit code a fix for the pool's candidates depends on, merged, in this order:
    changed code (by votes), definitions of the symbols the patches use, callers, then tests.

    ``repo``: reads of the base repository to share with other expansions of the same runtime (cached)."""
    repo = repo or _Repo(runtime)
    changed: dict[tuple[str, int, int, str], _Changed] = {}  # (file, start, end, kind) -> its span
    symbols: dict[str, tuple[int, int, str]] = {}  # name -> (votes, first seen, a file using it)
    for candidate in pool.candidates:
        for hunk in _hunks(candidate):
            if not repo.lines(hunk.file):
                continue
            for span, definition in _changed_spans(repo, hunk, window):
                entry = changed.setdefault((span.file, span.start, span.end, span.kind), _Changed(span, definition))
                if candidate.key not in entry.candidates:
                    entry.candidates.add(candidate.key)
                    entry.votes += candidate.votes
            if language_for(hunk.file) is None:
                continue
            used = _names_in(hunk.file, hunk.removed) | _names_in(hunk.file, hunk.added)
            for name in sorted(used):
                votes, first, path = symbols.get(name, (0, len(symbols), hunk.file))
                symbols[name] = (votes + candidate.votes, first, path)

    ordered = sorted(changed.values(), key=lambda c: (-c.votes, -len(c.candidates), c.span.file, c.span.start))
    spans = []
    for entry in ordered:
        d = entry.definition
        what = "lines around" if d is None else f"`{_qualified(d)}` encloses" if entry.span.kind == "hunk" \
            else f"lines of `{_qualified(d)}` around"
        reason = f"{what} hunk of {_plural(len(entry.candidates), 'candidate')} (votes {entry.votes})"
        spans.append(ExpansionSpan(entry.span.file, entry.span.start, entry.span.end, reason, entry.span.kind))
    changed_defs = [(e.span.file, e.definition) for e in ordered
                    if e.definition is not None and e.definition.kind in _CALLABLE_KINDS]
    changed_names = list(dict.fromkeys(d.name for _, d in changed_defs))
    hunk_files = sorted({e.span.file for e in ordered})

    ranked = sorted((name for name in symbols if name not in changed_names),
                    key=lambda name: (-symbols[name][0], symbols[name][1]))[:max_symbols]
    for name in ranked:
        spans += _definition_spans(repo, name, _globs(symbols[name][2]), hunk_files, max_definitions_per_symbol)
    callers, tests = _call_sites(repo, changed_defs, changed_names, max_callers, max_tests)
    return merge_spans(spans + callers + tests)


def _names_in(path: str, text: str) -> set[str]:
    if not text.strip():
        return set()
    snippet = textwrap.dedent(text)
    return identifiers(path, snippet, 1, snippet.count("\n") + 1)


def _definition_spans(repo: _Repo, name: str, globs: tuple[str, ...], hunk_files: list[str],
                      limit: int) -> list[ExpansionSpan]:
    hits = repo.grep(name, globs) if globs else None
    if hits is None:
        return []
    # Only lines that could declare the name are worth parsing; a name declared that often is too common.
    declaring_line = re.compile(_DECLARING.format(re.escape(name)))
    declaring = [(path, line) for path, line, text in hits if declaring_line.search(text)]
    if len(declaring) > _MAX_HITS:
        return []
    files = sorted({path for path, _ in declaring}, key=lambda p: (p not in hunk_files, p))
    found: list[ExpansionSpan] = []
    for path in files:
        for definition in repo.definitions(path):
            if definition.name == name and len(found) < limit:
                end = min(definition.end_line, definition.start_line + _MAX_SPAN - 1)
                found.append(ExpansionSpan(path, definition.start_line, end, f"defines `{name}` used by the patch",
                                           "definition"))
    return found


def _call_sites(repo: _Repo, changed_defs: list[tuple[str, Definition]], names: list[str],
                max_callers: int, max_tests: int) -> tuple[list[ExpansionSpan], list[ExpansionSpan]]:
    """Callers and tests of the changed names, taken in turn from each name so that none crowds out the others."""
    changed = {(path, d.start_line, d.end_line) for path, d in changed_defs}
    globs_of: dict[str, tuple[str, ...]] = {}
    for path, definition in changed_defs:
        globs_of.setdefault(definition.name, _globs(path))
    per_name = [_sites_of(repo, name, globs_of[name], changed, max_callers, max_tests) for name in names]
    return (_round_robin([callers for callers, _ in per_name], max_callers),
            _round_robin([tests for _, tests in per_name], max_tests))


def _sites_of(repo: _Repo, name: str, globs: tuple[str, ...], changed: set[tuple[str, int, int]],
              max_callers: int, max_tests: int) -> tuple[list[ExpansionSpan], list[ExpansionSpan]]:
    hits = repo.grep(name, globs)
    if hits is None or len(hits) > _MAX_HITS:
        return [], []
    callers: list[ExpansionSpan] = []
    tests: list[ExpansionSpan] = []
    for path in dict.fromkeys(path for path, _, _ in hits):
        test = repo.is_test(path)
        bucket, limit = (tests, max_tests) if test else (callers, max_callers)
        source = repo.source(path)
        if source is None or len(bucket) >= limit:
            continue
        seen = set()
        for line in references(path, source, name):
            site = enclosing(repo.definitions(path), line)
            if site is not None and (path, site.start_line, site.end_line) in changed:
                continue  # the changed code itself, e.g. a recursive call
            if site is not None:
                start, end = site.start_line, min(site.end_line, site.start_line + _MAX_SPAN - 1)
            else:
                start, end = max(line - _CALL_SITE_WINDOW, 1), min(line + _CALL_SITE_WINDOW, len(repo.lines(path)))
            if (start, end) in seen or len(bucket) >= limit:
                continue
            seen.add((start, end))
            reason = f"test referencing `{name}`" if test else f"calls `{name}`, changed by the patch"
            bucket.append(ExpansionSpan(path, start, end, reason, "test" if test else "caller"))
    return callers, tests


def _round_robin(lists: list[list[ExpansionSpan]], limit: int) -> list[ExpansionSpan]:
    taken = []
    for rank in range(max(map(len, lists), default=0)):
        taken += [spans[rank] for spans in lists if rank < len(spans)]
    return taken[:limit]


# -- each candidate's own expansion, and the base text of its lines (for coverage reports) ---------------------

MAX_BASE_TEXT_CHARS = 2_000_000  # base text saved with the expansions of one pool; past it, lines are left out
MAX_BASE_LINE_CHARS = 2_000  # a longer line (minified code, data) is left out: its text is not worth keeping


class ExpansionSpanData(TypedDict):
    """A span of a candidate's own expansion, as senior/expansion_by_candidate.json holds it."""

    file: str
    start: int
    end: int
    kind: str


class BaseText(TypedDict):
    """senior/expansion_text.json: path -> line number (as text) -> the line at the base commit; whether whole."""

    files: dict[str, dict[str, str]]
    complete: bool


def expansion_by_candidate(pool: CandidatePool,
                           runtime: Runtime) -> tuple[dict[str, list[ExpansionSpanData]], BaseText]:
    """Each candidate's own expansion, so reports can rebuild the context any subset of rollouts gives, and the
    base-commit text of every line of those spans: ``{"files": {path: {line number: text}}, "complete": bool}``.

    The text is read here, from the task's repository at the base commit, so coverage does not depend on what
    was later sent to the principal. It is bounded: lines longer than MAX_BASE_LINE_CHARS are left out, and
    lines past MAX_BASE_TEXT_CHARS in all (``complete`` is then false); a report counts a missing line's text
    as unknown."""
    repo = _Repo(runtime)
    by_key: dict[str, list[ExpansionSpanData]] = {}
    for candidate in pool.candidates:
        alone = CandidatePool(pool.instance_id, [candidate], candidate.votes, [], [])
        by_key[candidate.key] = [{"file": s.file, "start": s.start, "end": s.end, "kind": s.kind}
                                 for s in expand_pool(alone, runtime, repo=repo)]
    files: dict[str, dict[str, str]] = {}
    used, complete = 0, True
    wanted = sorted({(s["file"], n) for spans in by_key.values() for s in spans
                     for n in range(s["start"], s["end"] + 1)})
    for path, number in wanted:
        lines = repo.lines(path)
        if not 1 <= number <= len(lines):
            continue
        text = lines[number - 1].rstrip("\r")
        if len(text) > MAX_BASE_LINE_CHARS:
            continue
        if used + len(text) + 1 > MAX_BASE_TEXT_CHARS:
            complete = False
            break
        files.setdefault(path, {})[str(number)] = text
        used += len(text) + 1
    return by_key, {"files": files, "complete": complete}


def write_expansion_by_candidate(pool: CandidatePool, runtime: Runtime, directory: Path) -> None:
    """senior/expansion_by_candidate.json (candidate key -> its spans) and senior/expansion_text.json (the
    base-commit text of their lines); see ``expansion_by_candidate``."""
    import json

    from pipeline.rundir.layout import SeniorFiles
    from pipeline.rundir.storage import write_code_atomic, write_json_atomic

    by_key, text = expansion_by_candidate(pool, runtime)
    files = SeniorFiles(directory)
    write_json_atomic(files.expansion_by_candidate, by_key)
    # Repository code: key-shaped text in it is a fixture, kept (only the environment's secret values go).
    write_code_atomic(files.expansion_text, json.dumps(text) + "\n")
