"""An agent's trajectory on disk, and the one way to read it back.

A finished session leaves the whole trajectory in one JSON file (``trajectory.json``, ``lead.trajectory.json``; a
junior's goes into its rollout record). While a session runs, and after a kill, what each step added is appended
to its journal beside it (``trajectory.jsonl``, ``rollout-NN.trajectory.jsonl``), one JSON object a line, so the
bytes written grow with the trajectory rather than with its square. ``read_trajectory`` reads the whole file and
folds the journal over it.

A journal line holds any of (applied in this order):

- ``"whole"``: the trajectory from here on is this object (a session that did not continue a saved one);
- ``"set"``: top-level fields and their new values (exit reason, cost, tokens, seconds, ...);
- ``"steps"``: ``[index, fields]`` pairs: step ``index`` takes these fields (one past the last: a new step);
- ``"messages"``: ``[index, message]`` pairs: message ``index`` is this one (one past the last: appended); or
  ``[index, message, [before, step, after]]``: its content is ``before``, step ``step``'s output, ``after`` (an
  observation holds the command's output, which the step holds already: the journal keeps it once);
- ``"extend"``: ``[index, offset, text]``: message ``index``'s content is its first ``offset`` characters, then
  ``text`` (a note joined to the last user message).

Every entry sets a value at a place rather than adding to one, so folding a journal over a whole file that was
written after it (a process killed between writing the file and removing the journal) changes nothing. The first
line also carries ``"journal": JOURNAL_FORMAT``. A last line cut short by a kill, and any line that is no JSON
object, are skipped: the reply journal (pipeline.rundir.layout.reply_journal) still holds a reply whose line was lost.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any

from pipeline.records.base import MISSING, Read, read_json
from pipeline.rundir.layout import trajectory_journal

JOURNAL_FORMAT = 1


class ExitReason(StrEnum):
    """How an agent's session ended: the model's own outcomes (pipeline.errors), recorded as its trajectory's
    ``exit_reason``. An endpoint that does not answer ends no agent: it raises ModelUnavailable, or stops the run,
    and the trajectory is resumed by a rerun."""

    SUBMITTED = "submitted"
    STEP_LIMIT = "step_limit"
    COST_LIMIT = "cost_limit"
    TIME_LIMIT = "time_limit"
    FORMAT_ERRORS = "format_errors"  # it kept replying in a form that cannot be used
    MODEL_ERROR = "model_error"  # the provider refused the request itself (bad request, content policy)
    CONTEXT_WINDOW = "context_window"  # a request too long for the model
    RUNTIME_ERROR = "runtime_error"  # its workspace failed under it, or swepipe's own code did
    RESOURCE_LIMIT = "resource_limit"  # a command hit a container limit (memory, processes, disk)
    STOPPED = "stopped"  # the run stopped under it
    ERROR = "error"  # a team worker whose session raised (pipeline.team.workers)


def read_trajectory(trajectory: Path, errors: str = "strict") -> Read:
    """The trajectory saved at ``trajectory``: the whole file with its journal folded over it, either of them
    alone, or why there is none (``Read.problem``). ``errors`` as for ``read_json``."""
    whole = read_json(trajectory, errors)
    journal = trajectory_journal(trajectory)
    try:
        raw = journal.read_bytes()
    except FileNotFoundError:
        return whole
    except OSError as error:
        return whole if whole.problem is None else Read(problem=f"its journal cannot be read ({error})")
    base = whole.data if whole.problem is None and isinstance(whole.data, dict) else {}
    lines = raw.decode("utf-8", errors=errors).splitlines()
    folded, problem = fold_journal(base, lines)
    if problem is not None:
        return Read(problem=problem)
    if not folded and whole.problem is not None:
        return whole if whole.problem != MISSING else Read(problem=MISSING)
    return Read(folded)


def fold_journal(base: dict[str, Any], lines: list[str]) -> tuple[dict[str, Any], str | None]:
    """``base`` with the journal ``lines`` applied in order (a copy; ``base`` is left as it was), or why the
    journal cannot be read (a newer format than this swepipe knows)."""
    state: dict[str, Any] = _with_lists(base) if base else {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # cut short by a kill
        if not isinstance(entry, dict):
            continue
        version = entry.get("journal", JOURNAL_FORMAT)
        if isinstance(version, int) and version > JOURNAL_FORMAT:
            return {}, (f"of journal format {version}, newer than this swepipe reads ({JOURNAL_FORMAT}): "
                        "upgrade swepipe to read it")
        state = apply_entry(state, entry)
    return state, None


def _with_lists(record: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``record`` whose messages and steps are lists of their own (a record someone else wrote may hold
    anything there: what is no list is none)."""
    return {**record, **{key: list(value) if isinstance(value := record.get(key), list) else []
                         for key in ("messages", "steps")}}


def apply_entry(state: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """One journal line applied to ``state`` (changed in place, or replaced by a ``whole`` line)."""
    whole = entry.get("whole")
    if isinstance(whole, dict):
        state = _with_lists(whole)
    state.setdefault("messages", [])
    state.setdefault("steps", [])
    changed = entry.get("set")
    if isinstance(changed, dict):
        state.update((key, value) for key, value in changed.items() if key not in ("messages", "steps"))
    steps = state["steps"]
    for index, fields, _ in _indexed(entry.get("steps")):
        if isinstance(fields, dict):
            old = steps[index] if index < len(steps) and isinstance(steps[index], dict) else {}
            _put(steps, index, {**old, **fields})
    for index, message, parts in _indexed(entry.get("messages"), parts=True):
        if parts is not None:
            message = _with_output(message, parts, steps)
        if message is not None:
            _put(state["messages"], index, message)
    extended = entry.get("extend")
    for item in extended if isinstance(extended, list) else []:
        if isinstance(item, list) and len(item) == 3:
            _extend(state["messages"], *item)
    return state


def _indexed(items: Any, parts: bool = False) -> list[tuple[int, Any, Any]]:
    """(index, value, parts or None) of a list of ``[index, value]`` (with ``parts``, also ``[index, value,
    parts]``) entries; others are skipped."""
    if not isinstance(items, list):
        return []
    lengths = (2, 3) if parts else (2,)
    return [(item[0], item[1], item[2] if len(item) == 3 else None) for item in items
            if isinstance(item, list) and len(item) in lengths and type(item[0]) is int and item[0] >= 0]


def _with_output(message: Any, parts: Any, steps: list[Any]) -> dict[str, Any] | None:
    """``message`` with its content made of ``[before, step index, after]`` and that step's output; None when
    the parts do not name one."""
    if not (isinstance(message, dict) and isinstance(parts, list) and len(parts) == 3):
        return None
    before, index, after = parts
    if not (isinstance(before, str) and isinstance(after, str) and type(index) is int and 0 <= index < len(steps)):
        return None
    output = steps[index].get("output") if isinstance(steps[index], dict) else None
    return {**message, "content": before + output + after} if isinstance(output, str) else None


def _put(items: list[Any], index: int, value: Any) -> None:
    """``items[index] = value``; one past the end appends. A gap (a line lost to a kill) is never filled with
    made-up entries: what follows it is dropped."""
    if index < len(items):
        items[index] = value
    elif index == len(items):
        items.append(value)


def _extend(messages: list[Any], index: Any, offset: Any, text: Any) -> None:
    if type(index) is not int or type(offset) is not int or not isinstance(text, str):
        return
    if 0 <= index < len(messages) and isinstance(messages[index], dict):
        content = messages[index].get("content")
        if isinstance(content, str) and 0 <= offset <= len(content):
            messages[index] = {**messages[index], "content": content[:offset] + text}
