"""The agents' file editor: ``view``, ``create``, ``str_replace``, ``insert`` and ``undo_edit`` on the task's
repository, the commands of SWE-agent's str_replace_editor, carried out through the runtime's file reads and writes
and one shell probe per call (coreutils only: no Python needed in the image).

Every edit fails loudly and changes nothing when it cannot be done as asked: ``old_str`` must occur exactly once
(none or several: the count and the nearest or matching lines, numbered); ``create`` refuses a path that exists;
``insert`` refuses a line past the end; a path out of the repository (``..``, an absolute path elsewhere, a symlink
pointing out of it), inside ``.git``, a binary file and one over ``MAX_FILE_BYTES`` are refused. What real models
write besides is tolerated the way the principal's blocks are (``pipeline.edits.blocks``: CRLF files, trailing
whitespace, a uniform indentation shift, copied line numbers), and the observation names what was tolerated.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import threading
import weakref
from dataclasses import dataclass
from typing import NotRequired, TypedDict

from pipeline.edits.blocks import File, closest, find_lines, split_lines
from pipeline.errors import ContainerDied, InfrastructureFault
from pipeline.text.linenumbers import line_number
from pipeline.text.repopath import WHOLE_REPOSITORY, from_root

COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")
MAX_FILE_BYTES = 1 << 20  # larger files are for bash (sed -n, grep -n); an edit rewrites the whole file
CONTEXT_LINES = 4  # shown around an edit's changed lines
VIEW_DEPTH = 2  # a folder is listed this many levels deep
MAX_LISTED = 400  # entries of a folder listing
PROBE_TIMEOUT = 30


class EditorError(Exception):
    """The call cannot be carried out as asked; nothing was changed. The message is the agent's observation."""


@dataclass(frozen=True)
class EditorCall:
    """One editor call, as the tool-call format's arguments or the text format's block give it."""

    command: str
    path: str
    file_text: str | None = None
    old_str: str | None = None
    new_str: str | None = None
    insert_line: int | None = None
    view_range: tuple[int, int] | None = None

    @classmethod
    def from_arguments(cls, arguments: dict) -> EditorCall:
        """From the str_replace_editor tool's arguments; EditorError names what is missing or malformed."""
        command = arguments.get("command")
        if command not in COMMANDS:
            raise EditorError(f"command must be one of {', '.join(COMMANDS)}, not {command!r}")
        path = arguments.get("path")
        if not isinstance(path, str) or not path.strip():
            raise EditorError(f"{command} needs a path")
        texts = {name: arguments.get(name) for name in ("file_text", "old_str", "new_str")}
        for name, value in texts.items():
            if value is not None and not isinstance(value, str):
                raise EditorError(f"{name} must be a string")
        return cls(command, path, insert_line=_line_number(arguments.get("insert_line")),
                   view_range=parse_view_range(arguments.get("view_range")), **texts)

    @classmethod
    def from_dict(cls, data: dict) -> EditorCall:
        """The call ``to_dict`` gave (a team's journal keeps its edits so)."""
        fields = dict(data)
        if fields.get("view_range") is not None:
            fields["view_range"] = tuple(fields["view_range"])
        return cls(**fields)

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()
                if v is not None}


def _line_number(value) -> int | None:
    if value is None:
        return None
    return _integer(value, "insert_line must be a line number")


def parse_view_range(value) -> tuple[int, int] | None:
    """``[start, end]`` as the tool's view_range gives it (a JSON list, or that list as text); EditorError names
    what is wrong with anything else."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            pass
    problem = "view_range must be two line numbers [start, end] (end -1: to the end)"
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise EditorError(f"{problem}, not {_shown(value)}")
    start, end = (_integer(part, problem) for part in value)
    return start, end


def _integer(value, problem: str) -> int:
    """``value`` as a line number (pipeline.text.linenumbers); EditorError (``problem``) for anything else."""
    number = line_number(value)
    if number is None:
        raise EditorError(f"{problem}, not {_shown(value)}")
    return number


def _shown(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


class EditRecord(TypedDict):
    """An editor call as a trajectory's step keeps it (``AgentStep.edits``)."""

    command: str
    path: str
    ok: bool
    error: NotRequired[str]  # when not ok: what the agent was told
    tolerated: NotRequired[list[str]]


@dataclass(frozen=True)
class EditorResult:
    call: EditorCall
    ok: bool
    observation: str
    tolerated: tuple[str, ...] = ()
    written: str | None = None  # the file written (or removed, undoing a create), from the repository root

    @property
    def changed(self) -> bool:
        return self.written is not None

    def record(self) -> EditRecord:
        """What a trajectory's step keeps of it: the command, the path, ok or the error, what was tolerated."""
        entry: EditRecord = {"command": self.call.command, "path": self.written or self.call.path, "ok": self.ok}
        if not self.ok:
            entry["error"] = self.observation
        if self.tolerated:
            entry["tolerated"] = list(self.tolerated)
        return entry


@dataclass(frozen=True)
class _Target:
    path: str  # from the repository root, symlinks resolved
    kind: str  # file, dir, none, other
    size: int


# One lock per workspace: team workers share one, and an edit is a read and a write that must not interleave.
_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def _lock_for(runtime) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(runtime, threading.Lock())


def open_editor(runtime, output_limit: int) -> Editor:
    """The editor of one agent on ``runtime``; a runtime that shares its tree between agents (a team's
    ``AgentView``) opens its own, whose writes it journals."""
    opener = getattr(runtime, "open_editor", None)
    return opener(output_limit) if opener is not None else Editor(runtime, output_limit=output_limit)


class Editor:
    """The editor of one agent on ``runtime``: its undo history is the agent's own."""

    def __init__(self, runtime, *, output_limit: int = 10_000, max_file_bytes: int = MAX_FILE_BYTES):
        self.runtime, self.output_limit, self.max_file_bytes = runtime, output_limit, max_file_bytes
        self._undo: dict[str, list[bytes | None]] = {}
        self._lock = _lock_for(runtime)

    def __call__(self, call: EditorCall) -> EditorResult:
        try:
            with self._lock:
                observation, tolerated, written = getattr(self, f"_{call.command}")(call)
        except EditorError as error:
            return EditorResult(call, False, self._bounded(f"error: {error}"))
        except (ContainerDied, OSError):
            raise  # the workspace under the editor failed: the agent's outcome, not this call's
        except InfrastructureFault:
            raise
        except Exception as error:  # noqa: BLE001 - whatever a call holds, it fails alone and the agent is told
            return EditorResult(call, False, self._bounded(
                f"error: the {call.command} call failed ({type(error).__name__}: {_shown(str(error), 300)}); view "
                "the file before trying again"))
        return EditorResult(call, True, self._bounded(observation), tuple(tolerated), written)

    # -- commands ----------------------------------------------------------------------------------

    def _view(self, call: EditorCall):
        target = self._target(call.path)
        if target.kind == "dir":
            if call.view_range is not None:
                raise EditorError(f"{target.path} is a folder; view_range is for files")
            return self._listing(target), (), None
        if call.view_range is not None and target.size > self.max_file_bytes:
            return self._view_part(target, *call.view_range), (), None
        text, _ = self._read(target)
        lines = split_lines(text)
        start, end = 1, len(lines)
        if call.view_range is not None:
            start, end = call.view_range
            end = len(lines) if end == -1 else end
            if not 1 <= start <= max(1, len(lines)) or end < start:
                raise EditorError(f"view_range {list(call.view_range)} is not within {target.path}'s "
                                  f"{len(lines)} lines (start 1 to {len(lines)}, end at least start, or -1)")
            end = min(end, len(lines))
        if not lines:
            return f"{target.path} is empty.", (), None
        return f"{target.path}, lines {start}-{end} of {len(lines)}:\n{_numbered(lines, start, end)}", (), None

    def _view_part(self, target: _Target, start: int, end: int) -> str:
        """Lines ``start``-``end`` of a file too big to read whole: the workspace counts its lines and cuts them
        out, and only the part shown (at most ``output_limit`` bytes) leaves it."""
        where = shlex.quote(target.path)
        count = self.runtime.run(_LARGE_FILE_PROBE.replace("@PATH@", where), timeout=PROBE_TIMEOUT, output_limit=200)
        fields = count.output.split()
        if not count.ok or len(fields) != 2 or not all(field.isdigit() for field in fields):
            raise EditorError(f"cannot read {target.path} in the workspace: {count.output.strip()[-300:]}")
        nuls, total = (int(field) for field in fields)
        if nuls:
            raise EditorError(f"{target.path} is a binary file; the editor is for text")
        end = total if end == -1 else end
        if not 1 <= start <= max(1, total) or end < start:
            raise EditorError(f"view_range {[start, end]} is not within {target.path}'s {total} lines (start 1 to "
                              f"{total}, end at least start, or -1)")
        end = min(end, total)
        part = self.runtime.run(f"sed -n '{start},{end}p;{end}q' -- {where} | head -c {self.output_limit + 1}",
                                timeout=PROBE_TIMEOUT, output_limit=self.output_limit + 1000)
        if not part.ok:
            raise EditorError(f"cannot read {target.path} in the workspace: {part.output.strip()[-300:]}")
        lines = split_lines(part.output)[:end - start + 1]
        last = start + len(lines) - 1
        width = len(str(last))
        shown = "\n".join(f"{n:>{width}}\t{line}" for n, line in enumerate(lines, start))
        return f"{target.path}, lines {start}-{last} of {total} (a {target.size:,}-byte file, read in part):\n{shown}"

    def _create(self, call: EditorCall):
        target = self._target(call.path)
        if target.kind != "none":
            raise EditorError(f"{target.path} already exists; view it, then change it with str_replace or insert")
        if call.file_text is None:
            raise EditorError("create needs file_text, the whole new file")
        self._write(target.path, _encoded(call.file_text, "utf-8", "file_text"), before=None)
        lines = split_lines(call.file_text)
        shown = _numbered(lines, 1, min(len(lines), 2 * CONTEXT_LINES + 1)) if lines else "(empty)"
        more = f"\n... ({len(lines) - 2 * CONTEXT_LINES - 1} more lines)" if len(lines) > 2 * CONTEXT_LINES + 1 else ""
        return f"Created {target.path} ({len(lines)} lines):\n{shown}{more}", (), target.path

    def _str_replace(self, call: EditorCall):
        if not call.old_str:
            raise EditorError("str_replace needs old_str, the exact text to replace (to add lines, use insert; "
                              "for a new file, create)")
        target = self._target(call.path)
        text, encoding = self._read(target)
        new = call.new_str or ""
        count = text.count(call.old_str)
        if count > 1:
            starts = _occurrence_lines(text, call.old_str)
            raise EditorError(f"old_str occurs {count} times in {target.path} (starting at lines "
                              f"{', '.join(map(str, starts[:10]))}); nothing was changed. Include more of the "
                              "surrounding lines so that it occurs exactly once.")
        if count == 1:
            at = text.index(call.old_str)
            first = text.count("\n", 0, at) + 1
            edited, tolerated = text[:at] + new + text[at + len(call.old_str):], ()
            region = (first, first + new.count("\n"))
        else:
            edited, region, tolerated = self._tolerant_replace(target.path, text, call.old_str, new)
        return self._save(target, text, edited, encoding, region, "Edited", tolerated)

    def _tolerant_replace(self, path: str, text: str, old: str, new: str):
        """``old`` read as whole lines the way the principal's blocks are; EditorError when it still does not match
        exactly one place."""
        file = File.load(text)
        hits, tolerated, search = find_lines(file.lines, split_lines(old), split_lines(new))
        crlf = ["CRLF line endings"] if "\r\n" in text and "\r\n" not in old else []
        if len(hits) > 1:
            where = ", ".join(str(start + 1) for start, _, _ in hits[:10])
            raise EditorError(f"old_str matches {len(hits)} places in {path} once {', '.join(tolerated)} is "
                              f"allowed for (starting at lines {where}); nothing was changed. Include more of the "
                              "surrounding lines so that it matches exactly one place.")
        if not hits:
            tabs = any(line.startswith("\t") for line in file.lines) and \
                not any(line.startswith("\t") for line in search)
            hint = " This file indents with tabs; so must old_str." if tabs else ""
            raise EditorError(f"old_str does not occur in {path}; nothing was changed. {closest(file.lines, search)}"
                              f"\nCopy old_str exactly from the file (view it first), indentation included.{hint}")
        start, length, replacement = hits[0]
        file.splice(start, length, replacement)
        return file.text(), (start + 1, start + max(1, len(replacement))), tuple(crlf + tolerated)

    def _insert(self, call: EditorCall):
        if call.insert_line is None or call.new_str is None:
            raise EditorError("insert needs insert_line (the new text goes after that line; 0: at the top) and "
                              "new_str")
        target = self._target(call.path)
        text, encoding = self._read(target)
        file = File.load(text)
        if not 0 <= call.insert_line <= len(file.lines):
            raise EditorError(f"insert_line {call.insert_line} is past the end of {target.path}, which has "
                              f"{len(file.lines)} lines (0 inserts at the top, {len(file.lines)} at the end)")
        lines = split_lines(call.new_str)
        at = call.insert_line
        unterminated = at == len(file.lines) and bool(file.ends) and file.ends[-1] == ""
        if unterminated:  # the old last line gets a newline, the new last line none, as the file had
            file.ends[-1] = file.newline
        file.splice(at, 0, lines)
        if unterminated and lines:
            file.ends[-1] = ""
        return self._save(target, text, file.text(), encoding, (at + 1, at + max(1, len(lines))), "Inserted in", ())

    def _undo_edit(self, call: EditorCall):
        target = self._target(call.path)
        history = self._undo.get(target.path)
        if not history:
            raise EditorError(f"there is no edit of {target.path} by you to undo")
        before = history.pop()
        if before is None:
            done = self.runtime.run(f"rm -f -- {shlex.quote(target.path)}", timeout=PROBE_TIMEOUT, output_limit=2000)
            if not done.ok:
                history.append(before)
                raise EditorError(f"cannot remove {target.path}: {done.output.strip()}")
            return f"Undid the creation of {target.path}: it is gone.", (), target.path
        self.runtime.write_file(target.path, before)
        return f"Undid your last edit of {target.path}; it is as it was before it.", (), target.path

    # -- the repository's files ----------------------------------------------------------------------

    def _target(self, raw: str) -> _Target:
        """``raw`` as a path in the repository, its symlinks resolved in the workspace; EditorError when it is out
        of the repository or inside .git."""
        if "\0" in raw:
            raise EditorError("a path cannot hold a NUL character")
        if any(0xD800 <= ord(c) <= 0xDFFF for c in raw):
            raise EditorError(f"{raw!r} holds a lone surrogate, "
                              "which names no file: send the path as plain text")
        workdir = str(self.runtime.workdir)
        path, problem = from_root(raw, roots=(workdir,))
        if problem == WHOLE_REPOSITORY:
            path = "."
        elif problem:
            raise EditorError(f"{raw!r} {problem}")
        if ".git" in path.split("/"):
            raise EditorError("files inside .git are not edited")
        probe = self.runtime.run(_PROBE.replace("@PATH@", shlex.quote(path)), timeout=PROBE_TIMEOUT, output_limit=4000)
        fields = probe.output.strip().splitlines()
        if not probe.ok or len(fields) != 4:
            raise EditorError(f"cannot look at {path} in the workspace: {probe.output.strip()[-500:]}")
        root, real, kind, size = fields
        if real != root and not real.startswith(root.rstrip("/") + "/"):
            raise EditorError(f"{path} leads out of the repository (to {real}); only the repository's files are "
                              "edited")
        relative = "." if real == root else real[len(root.rstrip("/")) + 1:]
        if ".git" in relative.split("/"):
            raise EditorError(f"{path} leads into .git; files inside .git are not edited")
        return _Target(relative, kind, int(size) if size.isdigit() else 0)

    def _read(self, target: _Target) -> tuple[str, str]:
        """The file's text and its encoding (UTF-8, else Latin-1, which keeps every byte)."""
        if target.kind == "none":
            raise EditorError(f"{target.path} does not exist (create makes a new file)")
        if target.kind != "file":
            raise EditorError(f"{target.path} is not a regular file")
        if target.size > self.max_file_bytes:
            raise EditorError(f"{target.path} is {target.size:,} bytes, over the editor's {self.max_file_bytes:,}; "
                              "view a part of it with view_range, or use bash (grep -n, sed -n)")
        data = self.runtime.read_file(target.path)
        if b"\0" in data[:8192]:
            raise EditorError(f"{target.path} is a binary file; the editor is for text")
        try:
            return data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            return data.decode("latin-1"), "latin-1"

    def _save(self, target: _Target, before: str, after: str, encoding: str, region: tuple[int, int], verb: str,
              tolerated: tuple[str, ...]):
        if after == before:
            raise EditorError("the edit changes nothing (new_str gives the same text); nothing was written")
        self._write(target.path, _encoded(after, encoding, "the edited file"), before=before.encode(encoding))
        lines = split_lines(after)
        first, last = max(1, region[0] - CONTEXT_LINES), min(len(lines), region[1] + CONTEXT_LINES)
        note = f" (allowing for {', '.join(tolerated)})" if tolerated else ""
        latin = " It is not UTF-8: it was read and written as Latin-1." if encoding == "latin-1" else ""
        shown = _numbered(lines, first, last) if lines else "(the file is empty now)"
        said = (f"{verb} {target.path}{note}.{latin} Lines {first}-{last} now read:\n{shown}\n"
                "Check that this is what you meant; undo_edit restores the file as before this edit.")
        return said, tolerated, target.path

    def _write(self, path: str, data: bytes, before: bytes | None) -> None:
        self.runtime.write_file(path, data)
        self._undo.setdefault(path, []).append(before)

    def _listing(self, target: _Target) -> str:
        where = shlex.quote(target.path)
        listed = self.runtime.run(
            f"find {where} -mindepth 1 -maxdepth {VIEW_DEPTH} -not -name '.*' -not -path '*/.*' "
            f"| LC_ALL=C sort | head -n {MAX_LISTED + 1}", timeout=PROBE_TIMEOUT, output_limit=self.output_limit)
        entries = [line.removeprefix("./") for line in listed.output.splitlines() if line.strip()]
        more = f"\n... (more than {MAX_LISTED} entries; list deeper folders one by one)" \
            if len(entries) > MAX_LISTED else ""
        shown = "\n".join(entries[:MAX_LISTED]) or "(no files, hidden ones aside)"
        return f"{target.path}, {VIEW_DEPTH} levels deep, hidden files left out:\n{shown}{more}"

    def _bounded(self, text: str) -> str:
        data = text.encode("utf-8", "surrogatepass")  # a count of bytes: a lone surrogate counts, never raises
        if len(data) <= self.output_limit:
            return text
        kept = data[:self.output_limit].decode("utf-8", "ignore")
        return (f"{kept}\n... (cut: {len(data) - self.output_limit:,} more bytes; view a smaller view_range, or use "
                "grep -n)")


# The workspace's view of a path: the repository's real root, the path's real location (its deepest existing
# ancestor resolved, then the rest), its kind and size. readlink -f is in coreutils and busybox alike.
_PROBE = r"""p=@PATH@
root="$(readlink -f -- .)" || exit 1
q="$p"; rest=""
while [ ! -e "$q" ] && [ ! -L "$q" ]; do
  case "$q" in */*) rest="/${q##*/}$rest"; q="${q%/*}" ;; *) rest="/$q$rest"; q=. ;; esac
done
real="$(readlink -f -- "$q")" || exit 1
printf '%s\n%s\n' "$root" "${real%/}$rest"
if [ -L "$p" ] && [ ! -e "$p" ]; then echo other; elif [ -d "$p" ]; then echo dir; elif [ -f "$p" ]; then echo file
elif [ -e "$p" ]; then echo other; else echo none; fi
if [ -f "$p" ]; then wc -c < "$p" | tr -d ' '; else echo 0; fi"""


# A big file's NUL bytes in its first 8 KB and its number of lines (a last line without a newline counted too).
_LARGE_FILE_PROBE = r"""f=@PATH@
nuls=$(head -c 8192 -- "$f" | tr -d -c '\000' | wc -c) || exit 1
lines=$(wc -l < "$f") || exit 1
[ -s "$f" ] && [ "$(tail -c 1 -- "$f" | wc -l)" -eq 0 ] && lines=$((lines + 1))
echo $nuls $lines"""


def _encoded(text: str, encoding: str, what: str) -> bytes:
    """``text`` in the file's ``encoding``; EditorError, naming the first character that cannot be written, for a
    character the encoding lacks (a ’ in a Latin-1 file) or a lone surrogate."""
    try:
        return text.encode(encoding)
    except UnicodeEncodeError as error:
        bad = error.object[error.start:error.end]
        line = error.object.count("\n", 0, error.start) + 1
        kind = "a lone surrogate" if any(0xD800 <= ord(c) <= 0xDFFF for c in bad) else \
            f"not in the file's encoding ({encoding})"
        raise EditorError(f"{what} holds {bad!r} (U+{ord(bad[0]):04X}) on its line {line}, {kind}, which cannot "
                          "be written; nothing was changed. Use characters the file can hold (or an ASCII escape "
                          "the language allows).") from None


def _numbered(lines: list[str], first: int, last: int) -> str:
    width = len(str(last))
    return "\n".join(f"{n:>{width}}\t{lines[n - 1]}" for n in range(first, last + 1))


def _occurrence_lines(text: str, needle: str) -> list[int]:
    found, at = [], text.find(needle)
    while at != -1:
        found.append(text.count("\n", 0, at) + 1)
        at = text.find(needle, at + 1)
    return found
