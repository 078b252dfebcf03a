"""Search/replace edit blocks: parse a reply (the principal's, an agent's ```edit block) and apply it to files.

A reply holds edits like this (any other text is ignored)::

    path/to/file.py
    ```python
    <<<<<<< SEARCH
    exact lines currently in the file
    =======
    the lines that replace them
    >>>>>>> REPLACE
    ```

Blocks are recognised by their markers, not by the fences, so a REPLACE section may itself hold ``` lines.
A line ``DELETE path/to/file`` outside the blocks deletes that file.

What real models write besides is tolerated, one way each: prose around the blocks; CRLF; trailing
whitespace, blank end lines and a uniform indentation shift in SEARCH; the ``  12 | `` line-number column
of the context the principal is shown (or the editor view's ``12<TAB>``), copied into SEARCH (only when
the plain SEARCH matches nowhere and every SEARCH line has it); the repository's absolute path
(``/app/pkg/a.py``, see ``roots``) and a diff's ``a/``/``b/`` prefix in a path.
"""

from __future__ import annotations

import difflib
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import accumulate
from pathlib import PurePosixPath
from typing import Literal, overload

from pipeline.text.repopath import WHOLE_REPOSITORY, from_root, without_diff_prefix

__all__ = ["Edit", "EditApplyError", "EditFormatError", "File", "apply_edits", "closest", "find_lines", "parse_edits",
           "split_lines", "unnumbered"]

SEARCH_MARKER = re.compile(r"<{5,9}\s*SEARCH")
DIVIDER = re.compile(r"={7}")
REPLACE_MARKER = re.compile(r">{5,9}\s*REPLACE")
FENCE = re.compile(r"(`{3,}|~{3,})\s*[\w.+#-]*")
LIST_OR_HEADING = r"^(?:#+\s*|[-*]\s+|\d+\.\s+)?"
PATH_LABEL = re.compile(LIST_OR_HEADING + r"(?:file|path|filename)\s*:\s*", re.IGNORECASE)
EXTENSIONLESS = {"Makefile", "Dockerfile", "Gemfile", "Rakefile", "Procfile", "Jenkinsfile", "LICENSE", "BUILD"}
MAX_SHOWN_LINES = 30
MAX_COMPARED_WINDOWS = 40
WORD = re.compile(r"\w+")
DELETE_LINE = re.compile(r"(?:[-*]\s+)?\**DELETE\**:?\s+(\S+)")
# The line-number column of the principal's context (senior/brief.py `_render`: "  12 | ") or of the editor's view
# ("12\t"), copied along with the code.
NUMBERED = re.compile(r"[ \t]*\d+(?: \|(?: |$)|\t)")


@dataclass(frozen=True)
class Edit:
    path: str  # as written in the reply; apply_edits normalises and checks it
    search: str  # "" creates a file; otherwise whole lines, each ending in "\n"
    replace: str  # "" deletes the searched lines
    delete: bool = False  # a ``DELETE path`` line: the file goes (search and replace are empty)


class EditFormatError(ValueError):
    """The reply cannot be parsed into edits; the message says what is wrong and where."""


class EditApplyError(ValueError):
    """Some edits cannot be applied; the message lists every failing block. `failures` has one entry per block."""

    def __init__(self, failures: list[str], total: int):
        self.failures = failures
        header = f"{len(failures)} of {total} edit blocks could not be applied (blocks are numbered in reply order):"
        super().__init__("\n\n".join([header, *failures]))


# ---------------------------------------------------------------- parsing


def _is(pattern: re.Pattern[str], line: str) -> bool:
    return pattern.fullmatch(line.strip()) is not None


def _as_path(line: str) -> str | None:
    """The path a line names (`a/b.py`, File: a/b.py, **a/b.py**, ### a/b.py, a/b.py:), or None for prose."""
    line = line.replace("**", "").strip()  # bold
    label = PATH_LABEL.match(line)
    unprefixed = (line[label.end():] if label else re.sub(LIST_OR_HEADING, "", line)).strip().rstrip(":")
    text = unprefixed.strip("*`'\"").rstrip(":").strip()
    if not text or any(ch.isspace() for ch in text) or _is(FENCE, text):
        return None
    explicit = label or "`" in line  # a bare word needs a / or . to count as a path
    return text if explicit or "/" in text or "." in text or text in EXTENSIONLESS else None


def _path_before(lines: list[str], index: int, floor: int) -> str | None:
    """The path on the line before the SEARCH marker at `index`, skipping blank lines and one opening fence."""
    j = index - 1
    while j > floor and not lines[j].strip():
        j -= 1
    if j > floor and _is(FENCE, lines[j]):
        j -= 1
        while j > floor and not lines[j].strip():
            j -= 1
    return _as_path(lines[j]) if j > floor else None


def _section_text(lines: list[str]) -> str:
    if not any(line.strip() for line in lines):
        return ""
    return "".join(line + "\n" for line in lines)


def _deleted_path(line: str) -> str | None:
    """The path of a ``DELETE path/to/file`` line (also bold, or as a list item), else None."""
    match = DELETE_LINE.fullmatch(line.strip())
    if match is None:
        return None
    return match.group(1).strip("*`'\"") or None


def parse_edits(reply: str) -> list[Edit]:
    """Every SEARCH/REPLACE block and DELETE line in the reply, in order. Raises EditFormatError when there is
    none or a block is broken."""
    lines = reply.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    edits: list[Edit] = []
    path: str | None = None
    previous_end = -1  # index of the last REPLACE marker; the path search never looks above it
    i = 0
    while i < len(lines):
        if _is(REPLACE_MARKER, lines[i]):
            raise EditFormatError(
                f"Line {i + 1}: '>>>>>>> REPLACE' without an open '<<<<<<< SEARCH' "
                f"(after block {len(edits)}). Each block needs SEARCH, then =======, then REPLACE."
            )
        if not _is(SEARCH_MARKER, lines[i]):
            deleted = _deleted_path(lines[i])
            if deleted:
                edits.append(Edit(deleted, "", "", delete=True))
            i += 1
            continue
        block, start = len(edits) + 1, i + 1
        where = f"Block {block} (SEARCH marker on line {start})"
        path = _path_before(lines, i, previous_end) or path
        if path is None:
            raise EditFormatError(
                f"{where} has no file path. Put the path, relative to the repository root, "
                "alone on the line just before the opening ``` fence."
            )
        sections: list[list[str]] = [[], []]
        for part, (end_marker, end_name) in enumerate(
            [(DIVIDER, "======="), (REPLACE_MARKER, ">>>>>>> REPLACE")]
        ):
            i += 1
            while i < len(lines) and not _is(end_marker, lines[i]):
                stray = [name for pattern, name in [(SEARCH_MARKER, "<<<<<<< SEARCH"), (DIVIDER, "======="),
                                                     (REPLACE_MARKER, ">>>>>>> REPLACE")] if _is(pattern, lines[i])]
                if stray:
                    raise EditFormatError(
                        f"{where} for {path}: found '{stray[0]}' on line {i + 1} before the "
                        f"'{end_name}' marker this block still needs."
                    )
                sections[part].append(lines[i])
                i += 1
            if i == len(lines):
                raise EditFormatError(f"{where} for {path}: the reply ends without the '{end_name}' marker.")
        edits.append(Edit(path, _section_text(sections[0]), _section_text(sections[1])))
        previous_end = i
        i += 1
    if not edits:
        hint = ""
        if re.search(r"^(?:---|\+\+\+) \S|^@@ ", reply, re.MULTILINE):
            hint = " The reply looks like a unified diff; write SEARCH/REPLACE blocks instead."
        raise EditFormatError(
            "The reply contains no edit block: expected a file path line, then a fenced block with "
            f"'<<<<<<< SEARCH', '=======' and '>>>>>>> REPLACE' lines (or a 'DELETE path' line).{hint}"
        )
    return edits


# ---------------------------------------------------------------- applying


class _Failure(Exception):
    """One edit that cannot be applied; collected, then reported together."""


@dataclass
class File:
    lines: list[str]  # content without line terminators
    ends: list[str]  # each line's terminator: "\n", "\r\n", or "" for a last line without newline
    newline: str  # the file's usual terminator, given to new lines

    @classmethod
    def load(cls, text: str) -> File:
        parts = text.split("\n")
        lines, ends = [], []
        for part in parts[:-1]:
            crlf = part.endswith("\r")
            lines.append(part[:-1] if crlf else part)
            ends.append("\r\n" if crlf else "\n")
        if parts[-1]:
            lines.append(parts[-1])
            ends.append("")
        crlf_count = ends.count("\r\n")
        return cls(lines, ends, "\r\n" if crlf_count > ends.count("\n") else "\n")

    def text(self) -> str:
        return "".join(line + end for line, end in zip(self.lines, self.ends, strict=True))

    def splice(self, start: int, length: int, new: list[str]) -> None:
        ends = [self.newline] * len(new)
        stop = start + length
        if length and stop == len(self.lines) and self.ends[-1] == "":  # keep "no newline at end of file"
            if new:
                ends[-1] = ""
            elif start > 0:
                self.ends[start - 1] = ""
        self.lines[start:stop] = new
        self.ends[start:stop] = ends


def split_lines(text: str) -> list[str]:
    """``text``'s lines without their terminators (CRLF or LF)."""
    lines = text.replace("\r\n", "\n").split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def _repo_path(raw: str, roots: Iterable[str] = ()) -> str:
    path, problem = from_root(raw, roots)
    if problem == WHOLE_REPOSITORY:
        raise _Failure("the path is empty or names the repository itself; name a file.")
    if problem:
        raise _Failure(f"path escapes the repository: it {problem}. Use a path relative to the repository "
                       "root, without '..' out of it and without a leading '/' (e.g. src/pkg/module.py).")
    if ".git" in path.split("/"):
        raise _Failure("edits inside .git are not allowed.")
    return path


def _resolve(path: str, load: Callable[[str], File | None], repo_files: list[str] | None) -> str:
    """``path`` without a diff's ``a/``/``b/`` prefix where that is what the model meant (see
    ``without_diff_prefix``). ``load(path)``: the file as the edits so far left it."""
    folders = None if repo_files is None else {name.split("/", 1)[0] for name in repo_files if "/" in name}
    return without_diff_prefix(path, lambda name: load(name) is not None, folders=folders)


@overload
def unnumbered(lines: list[str], every: Literal[False]) -> list[str]: ...
@overload
def unnumbered(lines: list[str], every: bool = True) -> list[str] | None: ...
def unnumbered(lines: list[str], every: bool = True) -> list[str] | None:
    """``lines`` without the context's ``  12 | `` column; None when ``every`` and some non-empty line (or
    every line) lacks it."""
    numbered = [NUMBERED.match(line) for line in lines]
    pairs = list(zip(numbered, lines, strict=True))
    if every and (not any(numbered) or any(m is None and line.strip() for m, line in pairs)):
        return None
    return [line[m.end():] if m else line for m, line in pairs]


def _blank_ends(lines: list[str]) -> tuple[int, int]:
    lead = next((n for n, line in enumerate(lines) if line.strip()), len(lines))
    trail = next((n for n, line in enumerate(reversed(lines)) if line.strip()), len(lines))
    return lead, min(trail, len(lines) - lead)


def _indent(lines: list[str]) -> str:
    """The leading whitespace shared by every non-blank line."""
    leads = [line[: len(line) - len(line.lstrip())] for line in lines if line.strip()]
    return os.path.commonprefix(leads) if leads else ""


def _dedented(lines: list[str], indent: str) -> list[str]:
    return [line[len(indent):].rstrip() if line.strip() else "" for line in lines]


def _reindent(lines: list[str], old: str, new: str) -> list[str] | None:
    """Shift non-blank lines from indentation `old` to `new`, keeping their relative indentation; None when that
    cannot be known: the two differ in kind (tabs and spaces), and a line does not start with `old`."""
    out = []
    for line in lines:
        lead = line[: len(line) - len(line.lstrip())]
        if not line.strip():
            out.append(line)
        elif new.startswith(old):
            out.append(new[len(old):] + line)
        elif old.startswith(new):
            out.append(line[min(len(old) - len(new), len(lead)):])
        elif line.startswith(old):
            out.append(new + line[len(old):])
        else:
            return None
    return out


Hit = tuple[int, int, list[str]]  # (start, length, replacement lines)
EXACT, LOOSE, SHIFTED, NUMBERS = "exact", "trailing whitespace", "a uniform indentation shift", "copied line numbers"


def find_lines(lines: list[str], search: list[str], replace: list[str]) -> tuple[list[Hit], list[str], list[str]]:
    """Where ``search`` (whole lines) matches ``lines``, how it was read (nothing for an exact match) and the search
    as read: the strictest rule of ``_matches`` that matches at all; only when none does, the same without the
    line-number column of the context copied along (when every search line has it), which is then named and
    given back even with no hit."""
    rule, hits = _matches(lines, search, replace)
    if hits:
        return hits, [] if rule == EXACT else [rule], search
    bare = unnumbered(search)
    if bare is None:
        return [], [], search
    rule, hits = _matches(lines, bare, unnumbered(replace, every=False))
    return hits, [NUMBERS] + ([] if rule == EXACT or not hits else [rule]), bare


def _matches(lines: list[str], search: list[str], replace: list[str]) -> tuple[str, list[Hit]]:
    """The rule and (start, length, replacement) for each place the search matches, from the strictest rule that
    matches at all: exact; then ignoring trailing whitespace and blank lines at the ends of the search; then also
    a uniform indentation difference, re-indenting the replacement to match."""
    k = len(search)
    exact = [i for i in range(len(lines) - k + 1) if lines[i:i + k] == search]
    if exact:
        return EXACT, [(i, k, replace) for i in exact]

    lead, trail = _blank_ends(search)
    search = search[lead:len(search) - trail]
    r_lead, r_trail = _blank_ends(replace)
    r_lead = min(lead, r_lead)
    replace = replace[r_lead:len(replace) - min(trail, r_trail, len(replace) - r_lead)]
    k = len(search)
    key = [line.rstrip() for line in search]
    stripped = [line.rstrip() for line in lines]
    loose = [i for i in range(len(lines) - k + 1) if stripped[i:i + k] == key]
    if loose:
        return LOOSE, [(i, k, replace) for i in loose]

    indent = _indent(search)
    body = _dedented(search, indent)
    bare, bare_key = [line.strip() for line in lines], [line.strip() for line in search]
    found = []
    for i in range(len(lines) - k + 1):
        if bare[i] != bare_key[0] or bare[i:i + k] != bare_key:
            continue
        window = lines[i:i + k]
        window_indent = _indent(window)
        if window_indent != indent and _dedented(window, window_indent) == body:
            shifted = _reindent(replace, indent, window_indent)
            if shifted is not None:  # else no shift is known for the replacement: no match, said as such
                found.append((i, k, shifted))
    return SHIFTED, found


def _window_candidates(lines: list[str], search: list[str], k: int) -> list[int]:
    """Window starts worth a character-level comparison (which is slow): those sharing the most rare words
    with the search, best first."""
    wanted = set(WORD.findall("\n".join(search)))
    line_words = [[w for w in WORD.findall(line) if w in wanted] for line in lines]
    frequency = Counter(w for words in line_words for w in words)
    totals = [0.0, *accumulate(sum(1 / frequency[w] for w in words) for words in line_words)]
    starts = range(max(1, len(lines) - k + 1))
    return sorted(starts, key=lambda i: totals[i] - totals[min(i + k, len(lines))])[:MAX_COMPARED_WINDOWS]


def closest(lines: list[str], search: list[str]) -> str:
    """The lines of the file that look most like the search, numbered, for the retry prompt."""
    if not lines:
        return "The file is empty."
    k = max(1, len(search))
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2("\n".join(line.strip() for line in search))
    best_ratio, best = 0.0, 0
    for i in _window_candidates(lines, search, k):
        matcher.set_seq1("\n".join(line.strip() for line in lines[i:i + k]))
        if matcher.real_quick_ratio() > best_ratio and matcher.quick_ratio() > best_ratio:
            ratio = matcher.ratio()
            if ratio > best_ratio:
                best_ratio, best = ratio, i
    if best_ratio < 0.3:
        return "No lines of the file resemble the SEARCH text."
    shown = lines[best:best + min(k, MAX_SHOWN_LINES)]
    width = len(str(best + len(shown)))
    numbered = "\n".join(f"  {best + n + 1:>{width}} | {line}" for n, line in enumerate(shown))
    more = f"\n  ... ({k - len(shown)} more lines)" if k > len(shown) else ""
    if [line.strip() for line in lines[best:best + k]] == [line.strip() for line in search]:
        more += "\nThese lines differ from the SEARCH text only in indentation, and not by one uniform shift."
    return f"The most similar lines ({best_ratio:.0%} alike), with their line numbers:\n{numbered}{more}"


def _close_paths(path: str, repo_files: Iterable[str] | None) -> str:
    if repo_files is None:
        return ""
    files = sorted(set(repo_files))
    name = PurePosixPath(path).name
    same_name = [f for f in files if PurePosixPath(f).name == name]
    candidates = list(dict.fromkeys(same_name + difflib.get_close_matches(path, files, n=5, cutoff=0.6)))[:5]
    return f" Did you mean: {', '.join(candidates)}?" if candidates else " No file with a similar path exists."


def _apply_one(edit: Edit, files: dict[str, File | None], originals: dict[str, str | None], read, repo_files,
               roots: Iterable[str]):
    def load(path: str) -> File | None:
        if path not in files:
            original = originals[path] = read(path)
            files[path] = None if original is None else File.load(original)
        return files[path]

    path = _resolve(_repo_path(edit.path, roots), load, repo_files)
    current = load(path)
    if edit.delete:
        if current is None:
            raise _Failure("file to delete not found." + _close_paths(path, repo_files))
        files[path] = None
        return
    search, replace = split_lines(edit.search), split_lines(edit.replace)
    if not any(line.strip() for line in search):  # empty SEARCH: create the file
        if current is not None and current.lines:
            raise _Failure(
                "SEARCH is empty but the file already exists. An empty SEARCH only creates a new file; "
                "to change this file, quote the lines to replace in SEARCH."
            )
        newline = current.newline if current else "\n"
        files[path] = File(replace, [newline] * len(replace), newline)
        return
    if current is None:
        raise _Failure(
            "file not found (to create a new file, leave SEARCH empty)." + _close_paths(path, repo_files)
        )
    hits, _, search = find_lines(current.lines, search, replace)  # the search without copied line numbers
    if not hits:
        already = any(line.strip() for line in replace) and _matches(current.lines, replace, replace)[1]
        note = "\nNote: the REPLACE text is already in the file; drop this block if it repeats an earlier one." \
            if already else ""
        raise _Failure(
            "SEARCH text not found. " + closest(current.lines, search)
            + "\nCopy the SEARCH lines exactly from the file, including indentation." + note
        )
    if len(hits) > 1:
        where = ", ".join(str(start + 1) for start, _, _ in hits[:10])
        raise _Failure(
            f"SEARCH text matches {len(hits)} places (starting at lines {where}). "
            "Add unchanged lines before or after it so it matches exactly one place."
        )
    start, length, new = hits[0]
    current.splice(start, length, new)


def apply_edits(
    edits: Iterable[Edit],
    read: Callable[[str], str | None],
    repo_files: Iterable[str] | None = None,
    roots: Iterable[str] = (),
) -> dict[str, str | None]:
    """Apply edits in order (later ones see earlier results) and return {repo-relative path: new full text,
    or None for a deleted file} for every changed file. `read(path)` gives a file's current text, or None when
    it does not exist; `repo_files` (all paths in the repository), when given, lets "file not found" suggest
    close paths and a new file's ``b/`` prefix be recognised; `roots` are the repository's absolute paths
    (``/app``), taken off paths that start with one. Nothing is written. If any edit fails, raises one
    EditApplyError that lists every failing block."""
    edits = list(edits)
    repo_files = None if repo_files is None else list(repo_files)
    roots = list(roots)
    files: dict[str, File | None] = {}
    failures = []
    originals: dict[str, str | None] = {}
    for number, edit in enumerate(edits, 1):
        try:
            _apply_one(edit, files, originals, read, repo_files, roots)
        except _Failure as failure:
            failures.append(f"Block {number} ({edit.path}): {failure}")
    if failures:
        raise EditApplyError(failures, len(edits))
    texts = {path: None if file is None else file.text() for path, file in files.items()}
    return {path: text for path, text in texts.items() if text != originals[path]}
