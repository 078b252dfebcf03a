"""The candidate pool: junior patches parsed, cleaned, de-duplicated and counted.

Cleaning drops what a rollout leaves behind that is not part of a fix, and records each drop with its reason
(``CandidatePool.dropped``):

- build and editor artefacts (``.orig``, ``.rej``, ``.bak``, ``.swp``, ``.pyc``, ``.log``) and cache folders;
- a new file that no other edit of the rollout imports or references, when it lies outside the project's
  source tree (see ``_SourceTree``) or is named like a reproduction script (``reproduce*``, ``repro_*``,
  ``scratch*``). A new module the fix imports is kept whatever its name (``templates.py``, ``debugger.py``);
- changes that are whitespace only. Leading whitespace counts in indentation-sensitive languages (Python,
  YAML, Makefiles, ...): there a re-indented block is a change, and two candidates that differ only in
  indentation are two candidates.

What the base commit holds comes from the rollouts' records (``base_entries``, listed in the rollout's
workspace by ``source_tree_probe``), from ``build_pool(base_files=...)`` when a caller has the whole file list,
and otherwise from the files the patches modify (which the base commit has).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from posixpath import basename, dirname, splitext
from typing import Any

from unidiff import Hunk, PatchSet
from unidiff.errors import UnidiffParseError
from unidiff.patch import Line

from pipeline.pool_rules import CandidateDraft, CandidatePool, DroppedFile, HunkData
from pipeline.records import Rollout

# Files that are tests by their name, in any folder.
_TEST_NAME = re.compile(r"(^|/)test_[^/]*\.(py|rb)$|_test\.(py|go|rb)$|_spec\.(rb|[cm]?[jt]sx?)$|"
                        r"\.(test|spec)\.[cm]?[jt]sx?$|(^|/)conftest\.py$")
# Folders that hold tests by their name; spec/ and testing/ do only when tests are found in them.
_TEST_DIR = re.compile(r"(^|/)(tests?|__tests__)/")
_MAYBE_TEST_DIR = re.compile(r"(^|/)(spec|testing)/")
_ARTEFACT_NAME = re.compile(r"\.(orig|rej|bak|swp|swo|pyc|pyo|log)$|~$", re.IGNORECASE)
_ARTEFACT_DIR = re.compile(r"(^|/)(__pycache__|\.pytest_cache|node_modules|\.mypy_cache|\.ruff_cache)/")
_SCRATCH_NAME = re.compile(r"^(reproduc|scratch|test_reproduc)|^(test_)?repro([_.\-\d]|$)", re.IGNORECASE)
# Build and config scripts at the root do not make the root a source folder.
_ROOT_SCRIPT = re.compile(r"^(setup|conftest|noxfile|fabfile|tasks|manage|versioneer|dodo)\.py$|"
                          r"\.config\.[cm]?[jt]s$|^\..*\.[cm]?[jt]s$|^(gruntfile|gulpfile)\.[cm]?js$",
                          re.IGNORECASE)
# Languages whose meaning depends on indentation: leading whitespace counts in their de-duplication key.
_INDENTED_EXT = {".py", ".pyi", ".pyw", ".pyx", ".pxd", ".yaml", ".yml", ".mk", ".mak", ".coffee", ".litcoffee",
                 ".hs", ".lhs", ".fs", ".fsi", ".fsx", ".nim", ".nims", ".pug", ".jade", ".sass", ".styl", ".haml",
                 ".slim", ".elm", ".purs", ".cabal", ".gd", ".gdscript"}
_INDENTED_NAME = re.compile(r"^(GNUmakefile|makefile|Makefile)(\..*)?$|^Snakefile$|^BUILD(\.bazel)?$")
_KINDS = {".pyi": ".py", ".pyw": ".py", ".pyx": ".py", ".pxd": ".py", ".jsx": ".js", ".mjs": ".js", ".cjs": ".js",
          ".ts": ".js", ".tsx": ".js", ".mts": ".js", ".cts": ".js", ".vue": ".js", ".svelte": ".js", ".h": ".c",
          ".cc": ".c", ".cpp": ".c", ".cxx": ".c", ".hpp": ".c", ".hh": ".c", ".yml": ".yaml", ".kts": ".kt"}
_DEF_LINE = re.compile(r"^\s*(?:async\s+)?(?:def|class|func|function)\s+[\w$.()* ]+|"
                       r"^\s*(?:export\s+)?(?:const|let)\s+\w+\s*=\s*(?:async\s*)?\(")
# Names a new file defines at its top level (what another file would use).
_TOP_DEFINITION = re.compile(r"^(?:export\s+(?:default\s+)?)?(?:async\s+)?(?:def|class|function\*?|func|type|"
                             r"interface|struct|enum|module|const|let|var|trait|fn|pub\s+fn)\s+"
                             r"(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)")
_COMMON_NAMES = {"main", "test", "tests", "run", "init", "setup", "index", "self", "this", "mod", "util", "utils",
                 "helper", "helpers", "__init__", "__main__", "func", "function", "module", "default"}
_MAX_PROBED = 40


def is_test_path(path: str, files: Iterable[str] | None = None) -> bool:
    """Whether ``path`` is a test file: named like one (test_*.py, *_test.go, *_spec.rb, *.test.js, conftest.py, ...)
    or inside a tests/, test/ or __tests__/ folder. A spec/ or testing/ folder is source unless it holds tests:
    a file named like a test among ``files`` (paths in the repository, e.g. ``git ls-files``), under that folder."""
    if _TEST_NAME.search(path) or _TEST_DIR.search(path):
        return True
    if files is None or not _MAYBE_TEST_DIR.search(path):
        return False
    return any(_holds_tests(folder, files) for folder in _test_like_folders(path))


def _test_like_folders(path: str) -> list[str]:
    """The spec/ and testing/ folders on ``path``, as prefixes ending in a slash."""
    return [path[:match.end()] for match in _MAYBE_TEST_DIR.finditer(path)]


def _holds_tests(folder: str, files: Iterable[str]) -> bool:
    return any(f.startswith(folder) and _TEST_NAME.search(f) for f in files)


def _indentation_counts(path: str) -> bool:
    name = basename(path)
    return splitext(name)[1].lower() in _INDENTED_EXT or _INDENTED_NAME.match(name) is not None


def _squash(lines: Iterable[Line], keep_indent: bool = False) -> tuple[str, ...]:
    """Lines with runs of whitespace made one space and blank lines gone; with ``keep_indent`` the leading
    whitespace stays as it is (tabs and spaces apart)."""
    squashed = []
    for line in lines:
        text = line.value
        if not text.strip():
            continue
        indent = text[:len(text) - len(text.lstrip())] if keep_indent else ""
        squashed.append(indent.replace("\n", "").replace("\r", "") + " ".join(text.split()))
    return tuple(squashed)


def _kind(path: str) -> str:
    extension = splitext(basename(path))[1].lower()
    return _KINDS.get(extension, extension) if extension else basename(path)


class _SourceTree:
    """What the base commit is known to hold: files, and the folders they are in.

    A new file lies inside the project's source tree when the nearest folder on its path that the base
    commit has (its own folder, or the closest existing parent of a new folder) already holds files of its kind
    (``.py``, the JavaScript/TypeScript family, ``.go``, ... or the same extension), not counting build and
    config scripts at the root (setup.py, jest.config.js, ...). So a new ``pkg/templates.py`` is inside,
    and a ``reproduce.py`` at the root of a project whose code lives in ``pkg/``, or a file in a new top-level
    ``debug/`` folder, is outside. ``listed`` says whether the base commit was listed around the new files;
    without a listing (only the patches' modified files are known), only a new file at the root is judged, and
    only when the known root holds nothing of its kind while the patches edit code in folders.
    """

    def __init__(self, entries: Iterable[str], listed: bool):
        self.listed = listed
        self.files: set[str] = set()
        self.folders: set[str] = {""}
        self.kinds: dict[str, set[str]] = {}
        for entry in entries:
            entry = entry.strip().removeprefix("./")
            if not entry:
                continue
            if entry.endswith("/"):
                self._add_folder(entry.rstrip("/"))
                continue
            self.files.add(entry)
            folder = dirname(entry)
            self._add_folder(folder)
            if folder or not _ROOT_SCRIPT.search(basename(entry)):
                self.kinds.setdefault(folder, set()).add(_kind(entry))

    def _add_folder(self, folder: str) -> None:
        while folder and folder not in self.folders:
            self.folders.add(folder)
            folder = dirname(folder)

    def outside(self, path: str) -> str | None:
        """Why the new file ``path`` lies outside the project's source tree, or None."""
        kind = _kind(path)
        if not self.listed:
            code_in_folders = any(dirname(f) for f in self.files)
            if dirname(path) or kind in self.kinds.get("", set()) or not code_in_folders:
                return None
            return f"at the repository root, where no {kind} source is known while the fix is in folders"
        folder = dirname(path)
        while folder not in self.folders:
            folder = dirname(folder)
        if kind in self.kinds.get(folder, set()):
            return None
        where = "the repository root" if not folder else f"{folder}/"
        if folder != dirname(path):
            return f"in a folder the base commit does not have, under {where}, which holds no {kind} file"
        return f"at {where}, which holds no {kind} source in the base commit"


def source_tree_probe(patch: str) -> tuple[list[str], list[str]]:
    """What a rollout's workspace is asked about its base commit, for ``patch``: the folders on the paths of
    the new files (to list, each with its entries) and the spec/ and testing/ folders the patch touches (to
    search for tests). At most a few dozen of each."""
    folders, test_folders = [], []
    try:
        files = PatchSet(patch) if patch.strip() else []
    except UnidiffParseError:
        return [], []
    for patched_file in files:
        path = patched_file.path
        for folder in _test_like_folders(path):
            if folder not in test_folders:
                test_folders.append(folder)
        if patched_file.is_added_file:
            folder = dirname(path)
            while folder:
                if folder + "/" not in folders:
                    folders.append(folder + "/")
                folder = dirname(folder)
    return folders[:_MAX_PROBED], test_folders[:_MAX_PROBED]


def probe_entries(listing: str, test_listing: str) -> list[str]:
    """The base entries a rollout records from ``git ls-tree <base> -- . <folders>`` (``mode type sha<TAB>path``
    lines; folders get a trailing slash) and ``git ls-tree -r --name-only <base> -- <spec folders>`` (only the
    files named like tests are kept, a few per folder)."""
    entries = []
    for line in listing.splitlines():
        meta, _, path = line.partition("\t")
        if path and len(meta.split()) == 3:
            entries.append(path + "/" if meta.split()[1] == "tree" else path)
    tests_per_folder: dict[str, int] = {}
    for path in test_listing.splitlines():
        if not _TEST_NAME.search(path):
            continue
        folder = _test_like_folders(path)[0] if _test_like_folders(path) else ""
        if tests_per_folder.get(folder, 0) < 3:
            tests_per_folder[folder] = tests_per_folder.get(folder, 0) + 1
            entries.append(path)
    return sorted(set(entries))


def build_pool(instance_id: str, rollouts: Sequence[Rollout],
               base_files: Iterable[str] | None = None) -> CandidatePool:
    """The pool of ``rollouts`` (their records). ``base_files``: the base commit's files, when the caller has them
    (else what the records' ``base_entries`` and the patches show)."""
    by_key: dict[str, CandidateDraft] = {}
    empty: list[int] = []
    unparsable: list[int] = []
    failed: list[int] = []
    dropped: list[DroppedFile] = []
    parsed = []
    known = set(base_files or ())
    for rollout in rollouts:
        index = rollout.index or 0
        if rollout.patch_error:
            failed.append(index)
            continue
        try:
            files = list(PatchSet(rollout.patch or ""))
        except UnidiffParseError:
            unparsable.append(index)
            continue
        known.update(rollout.base_entries or ())
        known.update(f.path for f in files if not f.is_added_file)  # the base commit has what a patch modifies
        parsed.append((index, rollout, files))
    for index, rollout, files in parsed:
        tree = _SourceTree(known, listed=base_files is not None or bool(rollout.base_entries))
        candidate, why = _normalise(files, tree)
        dropped += [{"rollout": index, "file": file, "reason": reason} for file, reason in why]
        if candidate is None:
            empty.append(index)
            continue
        kept = by_key.setdefault(candidate.key, candidate)
        kept.votes += 1
        kept.rollouts.append(index)
        kept.exit_reasons.append(rollout.exit_reason or "unknown")
        if rollout.retrieval:
            kept.reached.append({"rollout": index, "findings": [f.to_dict() for f in rollout.retrieval]})
    ordered = sorted(by_key.values(), key=lambda c: (-c.votes, c.rollouts[0]))
    return CandidatePool(instance_id, ordered, len(rollouts), sorted(empty), unparsable, failed, dropped)


def without_scratch(patch: str, base_entries: Iterable[str] | None = None) -> tuple[str, dict[str, str]]:
    """``patch`` without its scratch files, by the pool's rule (a new file that no other edit imports or
    references, outside the source tree or named like a reproduction script; build and editor artefacts), each
    left-out file with the reason; the patch as it is when it cannot be parsed. The rest keeps its bytes."""
    from pipeline.text import patchtext

    try:
        files = list(PatchSet(patch))
    except UnidiffParseError:
        return patch, {}
    known = set(base_entries or ()) | {f.path for f in files if not f.is_added_file}
    scratch = _scratch_files(files, _SourceTree(known, listed=base_entries is not None))
    if not scratch:
        return patch, {}
    kept = [section for section in patchtext.sections(patch)
            if not any(section.startswith(f"diff --git a/{path} b/{path}\n") for path in scratch)]
    return "".join(kept), scratch


def normalise(patch: str, base_files: Iterable[str] | None = None) -> CandidateDraft | None:
    """Parse a patch; drop scratch files and whitespace-only hunks; None when no source edit is left."""
    if not patch.strip():
        return None
    files = list(PatchSet(patch))
    known = set(base_files or ()) | {f.path for f in files if not f.is_added_file}
    return _normalise(files, _SourceTree(known, listed=base_files is not None))[0]


def _normalise(files: list[Any], tree: _SourceTree) -> tuple[CandidateDraft | None, list[tuple[str, str]]]:
    """The candidate of a rollout's patched files, and the files left out of it: (path, why)."""
    dropped: list[tuple[str, str]] = []
    hunks: list[HunkData] = []
    scratch = _scratch_files(files, tree)
    source_files, source_paths, test_files, functions, signature = [], [], [], [], []
    for patched_file in files:
        path = patched_file.path
        if path in scratch:
            dropped.append((path, scratch[path]))
            continue
        keep_indent = _indentation_counts(path)
        meaningful = [h for h in patched_file
                      if _squash(h.source_lines(), keep_indent) != _squash(h.target_lines(), keep_indent)]
        if not meaningful and not (patched_file.is_added_file or patched_file.is_removed_file):
            if len(patched_file):
                dropped.append((path, "whitespace-only change"
                                + ("" if keep_indent else " (indentation does not count in this language)")))
            continue
        if patched_file.is_added_file or patched_file.is_removed_file:
            meaningful = list(patched_file)
        if is_test_path(path, tree.files):
            test_files.append(str(patched_file))
            continue
        source_files.append(str(patched_file))
        source_paths.append(path)
        for hunk in meaningful:
            function = _enclosing_function(hunk)
            hunks.append({"file": path, "old_start": hunk.source_start, "old_lines": hunk.source_length,
                          "function": function})
            if function and function not in functions:
                functions.append(function)
            removed = _squash((line for line in hunk if line.is_removed), keep_indent)
            added = _squash((line for line in hunk if line.is_added), keep_indent)
            signature.append((path, removed, added))
        if patched_file.is_removed_file:
            signature.append((path, ("<deleted>",), ()))
    if not source_files:
        return None, dropped
    key = hashlib.sha256(repr(sorted(signature)).encode()).hexdigest()[:16]
    return CandidateDraft(key=key, patch="".join(source_files), test_patch="".join(test_files),
                          files=sorted(source_paths), hunks=hunks, functions=functions), dropped


def _scratch_files(files: list[Any], tree: _SourceTree) -> dict[str, str]:
    """The files of one rollout's patch that are not part of its fix, each with the reason."""
    scratch = {}
    suspects = {}
    for patched_file in files:
        path = patched_file.path
        if _ARTEFACT_DIR.search(path):
            scratch[path] = "in a cache folder"
        elif patched_file.is_added_file and _ARTEFACT_NAME.search(path):
            scratch[path] = "a build or editor artefact"
        elif patched_file.is_added_file:
            outside = tree.outside(path)
            if outside:
                suspects[path] = f"new file {outside}, and no other edit imports or references it"
            elif _SCRATCH_NAME.search(basename(path)):
                suspects[path] = "new file named like a reproduction script, and no other edit imports or " \
                                 "references it"
    added_text = {f.path: "\n".join(line.value for hunk in f for line in hunk if line.is_added) for f in files}
    # A suspect that a kept edit uses is kept, and may in turn vouch for another suspect.
    kept_text = [text for path, text in added_text.items() if path not in scratch and path not in suspects]
    changed = True
    while changed and suspects:
        changed = False
        for path in list(suspects):
            if _referenced(path, added_text[path], kept_text):
                del suspects[path]
                kept_text.append(added_text[path])
                changed = True
    scratch.update(suspects)
    return scratch


def _referenced(path: str, text: str, others: list[str]) -> bool:
    """Whether some text in ``others`` imports or names the new file ``path`` (its module name, or a name it
    defines at its top level)."""
    stem = splitext(basename(path))[0]
    names = set()
    if stem in ("__init__", "index", "mod", "main") and dirname(path):
        names.add(basename(dirname(path)))
    else:
        names.add(stem)
    names.update(match.group(1) for match in map(_TOP_DEFINITION.match, text.splitlines()) if match)
    names = {n for n in names if len(n) >= 3 and n.lower() not in _COMMON_NAMES}
    if not names:
        return False
    pattern = re.compile(r"(?<![\w$])(" + "|".join(sorted(map(re.escape, names))) + r")(?![\w$])")
    return any(pattern.search(other) for other in others)


def _enclosing_function(hunk: Hunk) -> str | None:
    """The nearest definition line inside the hunk's context, else git's section header."""
    for line in hunk:
        if (line.is_context or line.is_removed) and _DEF_LINE.match(line.value):
            return line.value.strip()
    header = (hunk.section_header or "").strip()
    return header or None
