"""The senior's Brief: an analysis and the code spans the fix depends on, checked and materialised."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Callable

_JSON_BLOCK = re.compile(r"^```json[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
MIN_PARTIAL_LINES = 8


class BriefFormatError(ValueError):
    """The senior's final reply holds no usable brief; the message says what to fix."""


@dataclass
class BriefSpan:
    file: str
    start: int
    end: int
    reason: str = ""


@dataclass
class Brief:
    analysis: str
    spans: list[BriefSpan]
    source: str = "senior"  # or "expansion" when the senior gave nothing usable
    problems: list[str] = field(default_factory=list)  # spans dropped while checking, and why

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Brief:
        return cls(analysis=data.get("analysis", ""), spans=[BriefSpan(**s) for s in data.get("spans", [])],
                   source=data.get("source", "senior"), problems=data.get("problems", []))


def parse_brief(reply: str) -> Brief:
    """The brief in a reply's ```json block: {"analysis": str, "spans": [{file, start, end, reason}]}."""
    blocks = _JSON_BLOCK.findall(reply or "")
    if len(blocks) != 1:
        raise BriefFormatError("the final reply must hold exactly one ```json block with the brief; "
                               f"it had {len(blocks)}")
    try:
        data = json.loads(blocks[0])
    except json.JSONDecodeError as error:
        raise BriefFormatError(f"the ```json block is not valid JSON ({error})") from None
    if (not isinstance(data, dict) or not isinstance(data.get("analysis"), str)
            or not isinstance(data.get("spans"), list)):
        raise BriefFormatError('the brief must be an object with "analysis" (text) and "spans" (a list)')
    spans = []
    for number, item in enumerate(data["spans"], start=1):
        try:
            spans.append(BriefSpan(file=str(item["file"]).removeprefix("./"), start=int(item["start"]),
                                   end=int(item["end"]), reason=str(item.get("reason", ""))))
        except (KeyError, TypeError, ValueError):
            raise BriefFormatError(f'span {number} needs "file", "start" and "end" (line numbers)') from None
    if not spans:
        raise BriefFormatError("the brief lists no spans; name the code the fix depends on")
    return Brief(analysis=data["analysis"].strip(), spans=spans)


def span_path_problem(path: str) -> str | None:
    """Why ``path`` cannot be a span's file (the whole repository, a directory, outside the repository), or None."""
    stripped = path.strip()
    parts = [part for part in stripped.split("/") if part not in ("", ".")]
    if not parts:
        return "names the whole repository, not a file; a span is one file and a range of its lines"
    if stripped.startswith("/"):
        return "is an absolute path; name the file from the repository root"
    if ".." in parts:
        return "reaches outside the repository"
    if stripped.endswith("/"):
        return "names a directory, not a file; a span is one file and a range of its lines"
    return None


def check_spans(spans: list[BriefSpan], read_lines: Callable[[str], list[str] | None],
                is_directory: Callable[[str], bool] | None = None,
                root: str | None = None) -> tuple[list[BriefSpan], list[str]]:
    """Spans whose file exists, clamped to its lines; and why the others were dropped.

    A span of the whole repository (``.``, ``/``), a directory or a path outside the repository is refused
    before anything is read. ``is_directory`` (asked after ``read_lines`` found no file) names directories.
    An absolute path inside ``root`` (the repository's folder) is taken as the path from the root.
    """
    kept, problems = [], []
    prefix = root.rstrip("/") + "/" if root else None
    for span in spans:
        if prefix and span.file.startswith(prefix):
            span = BriefSpan(span.file[len(prefix):], span.start, span.end, span.reason)
        problem = span_path_problem(span.file)
        if problem:
            problems.append(f"{span.file!r}: {problem}")
            continue
        lines = read_lines(span.file)
        if lines is None and is_directory is not None and is_directory(span.file):
            problems.append(f"{span.file}: a directory, not a file; a span is one file and a range of its lines")
        elif lines is None:
            problems.append(f"{span.file}: no such file in the repository")
        elif span.start < 1 or span.start > len(lines) or span.end < span.start:
            problems.append(f"{span.file}:{span.start}-{span.end}: outside the file's {len(lines)} lines")
        else:
            kept.append(BriefSpan(span.file, span.start, min(span.end, len(lines)), span.reason))
    return kept, problems


def merge_in_order(spans: list[BriefSpan]) -> list[BriefSpan]:
    """Overlapping or touching spans of one file become one, at the place of the first."""
    merged: list[BriefSpan] = []
    for span in spans:
        for other in merged:
            if other.file == span.file and span.start <= other.end + 1 and other.start <= span.end + 1:
                other.start, other.end = min(other.start, span.start), max(other.end, span.end)
                if span.reason and span.reason not in other.reason:
                    other.reason = f"{other.reason}; {span.reason}" if other.reason else span.reason
                break
        else:
            merged.append(BriefSpan(span.file, span.start, span.end, span.reason))
    return merged


@dataclass
class Context:
    text: str
    spans: list[BriefSpan]  # as materialised (possibly cut short)
    tokens: int
    dropped: list[str]


def materialise(spans: list[BriefSpan], read_lines: Callable[[str], list[str] | None], token_budget: int,
                count_tokens: Callable[[str], int]) -> Context:
    """Render spans with line numbers, in priority order, until the token budget is spent."""
    parts, kept, dropped, used = [], [], [], 0
    for span in merge_in_order(spans):
        lines = read_lines(span.file) or []
        end = span.end
        while end >= span.start:
            block = _render(span, lines, end)
            cost = count_tokens(block)
            if used + cost <= token_budget:
                break
            # Too big: keep the start of the span if a useful part of it fits.
            end = span.start + max((end - span.start) * (token_budget - used) // max(cost, 1), 0) - 1
            if end - span.start + 1 < MIN_PARTIAL_LINES:
                end = span.start - 1
        if end < span.start:
            dropped.append(f"{span.file}:{span.start}-{span.end} (over the {token_budget}-token budget)")
            continue
        parts.append(block)
        used += cost
        kept.append(BriefSpan(span.file, span.start, end, span.reason))
        if end < span.end:
            dropped.append(f"{span.file}:{end + 1}-{span.end} (cut to fit the budget)")
    return Context(text="\n".join(parts), spans=kept, tokens=used, dropped=dropped)


def _render(span: BriefSpan, lines: list[str], end: int) -> str:
    width = len(str(end))
    body = "\n".join(f"{number:>{width}} | {lines[number - 1]}" for number in range(span.start, end + 1))
    why = f"\n{span.reason}" if span.reason else ""
    return f"### {span.file}:{span.start}-{end}{why}\n```\n{body}\n```\n"
