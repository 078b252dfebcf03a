"""The senior's brief: an analysis and the code spans the fix depends on, checked and materialised."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypedDict

from pipeline.records.sources import BriefSource
from pipeline.text.linenumbers import line_number
from pipeline.text.repopath import DIFF_HEADS, WHOLE_REPOSITORY, from_root, without_diff_prefix

_JSON_BLOCK = re.compile(r"^```json[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
MIN_PARTIAL_LINES = 8

# The free-text form: section headers (ANALYSIS:, SPANS:, CANDIDATE:), as a line of their own or followed by
# text; markdown headings and bold accepted. Headers inside fenced code blocks do not count.
_HEADER = re.compile(r"^\s*(?P<hashes>#{1,6}\s*)?(?:\*\*|__)?\s*(?P<name>ANALYSIS|SPANS?|CANDIDATE)\b\s*"
                     r"(?:\([^)]*\))?\s*(?:\*\*|__)?\s*(?P<colon>:)?\s*(?:\*\*|__)?\s*(?P<rest>.*?)\s*$", re.IGNORECASE)
_FENCE = re.compile(r"^\s*(?P<marks>`{3,}|~{3,})\s*(?P<tag>[\w+.-]*)\s*$")
_PLAIN_TAGS = {"", "text", "txt", "plain", "plaintext", "markdown", "md", "brief"}
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+")
_RANGE = re.compile(r"^\s*(?:[:#,(]\s*)?(?:(?:lines?|ll?\.)\s*)?L?(?P<start>\d+)"
                    r"(?:\s*(?:-|–|—|to|\.\.)\s*L?(?P<end>\d+))?\s*\)?", re.IGNORECASE)
_MORE_RANGE = re.compile(r"^\s*(?:,|and|&)\s*(?:(?:lines?|ll?\.)\s*)?L?(?P<start>\d+)"  # a second range: 10-20, 30-40
                         r"\s*(?:-|–|—|to|\.\.)\s*L?(?P<end>\d+)\s*\)?", re.IGNORECASE)
_PATH_TOKEN = re.compile(r"^(?P<path>[^\s:#,;()]+)")
_LINE_SUFFIX = re.compile(r"(?::L?\d+(?:\s*[-–—]\s*L?\d+)?|#L\d+(?:-L?\d+)?)$", re.IGNORECASE)
_NO_CANDIDATE = re.compile(r"^\W*(none|null|nil|n/?a|neither|no(ne of them)?|-)\b", re.IGNORECASE)


class BriefFormatError(ValueError):
    """The senior's final reply holds no usable brief; the message says what to fix."""


@dataclass
class BriefSpan:
    file: str
    start: int
    end: int
    reason: str = ""


class BriefSpanData(TypedDict):
    file: str
    start: int
    end: int
    reason: str


class BriefDraftData(TypedDict):
    """A draft as the brief's record starts from it (``BriefDraft.to_dict``)."""

    analysis: str
    spans: list[BriefSpanData]
    source: str
    problems: list[str]
    candidate: int | None


@dataclass
class BriefDraft:
    analysis: str
    spans: list[BriefSpan]
    source: str = BriefSource.SENIOR  # or expansion when the senior gave nothing usable
    problems: list[str] = field(default_factory=list)  # span lines and spans dropped, and why
    candidate: int | None = None  # 1-based pool candidate the senior judges right or closest (None: none of them)

    def to_dict(self) -> BriefDraftData:
        return {"analysis": self.analysis,
                "spans": [{"file": s.file, "start": s.start, "end": s.end, "reason": s.reason} for s in self.spans],
                "source": self.source, "problems": list(self.problems), "candidate": self.candidate}

    @classmethod
    def from_dict(cls, data: BriefDraftData) -> BriefDraft:
        return cls(analysis=data.get("analysis", ""), spans=[BriefSpan(**s) for s in data.get("spans", [])],
                   source=data.get("source", BriefSource.SENIOR), problems=data.get("problems", []),
                   candidate=data.get("candidate"))


def parse_brief(reply: str) -> BriefDraft:
    """The brief in a senior's reply, in either form; malformed span lines are dropped into ``problems``.

    The free-text form (preferred: no escaping)::

        ANALYSIS:
        <free text, code with quotes and backslashes as it is>
        SPANS:
        pkg/a.py:10-42 why the principal needs these lines
        /app/pkg/b.py 5-9 - reason
        CANDIDATE: 2          (or: none)

    Headers may be markdown headings or bold; span lines may be bullets, with the path in backticks and the
    range as ``:10-42``, ``10-42``, ``L10-L42``, ``lines 10–42``, ``#L10-L42`` or one line ``:10``; an
    indented line under a span continues its reason. Without an ANALYSIS header, the text before the first
    header is the analysis. The older form, one ```json block ``{"analysis", "spans": [{file, start, end,
    reason}], "candidate"}``, stays accepted. Raises BriefFormatError when there is no analysis at all.
    """
    text = reply or ""
    try:
        brief, text_error = _brief_from_text(text), None
    except BriefFormatError as error:
        brief, text_error = None, error
    if brief is not None:
        return brief
    blocks = _JSON_BLOCK.findall(text)
    if len(blocks) == 1:
        try:
            return _brief_from_json(blocks[0])
        except BriefFormatError as error:
            raise (text_error or BriefFormatError(f"{error}; or write the brief as ANALYSIS:, SPANS: and "
                                                  "CANDIDATE: sections, which need no escaping")) from None
    if text_error is not None:
        raise text_error
    if len(blocks) > 1:
        raise BriefFormatError(f"the reply holds {len(blocks)} ```json blocks; write the brief once, as "
                               "ANALYSIS:, SPANS: and CANDIDATE: sections")
    raise BriefFormatError("the final reply holds no brief: write an ANALYSIS: section, a SPANS: section (one "
                           "span a line: path:START-END reason) and CANDIDATE: (a number or none)")


def _brief_from_json(block: str) -> BriefDraft:
    data = None
    for attempt in (block, _BAD_ESCAPE.sub(_escape_backslash, block)):  # a lone backslash (a regex) kept as one
        try:
            data = json.loads(attempt, strict=False)  # strict=False: raw newlines and tabs inside strings
            break
        except (ValueError, RecursionError) as error:  # a number past reading, nesting past the stack too
            problem = f"the ```json block is not valid JSON ({error})"
    if data is None:
        raise BriefFormatError(problem)
    if not isinstance(data, dict) or not isinstance(data.get("analysis"), str) or not data["analysis"].strip():
        raise BriefFormatError('the brief must be an object with "analysis" (text) and "spans" (a list)')
    items = given if isinstance(given := data.get("spans"), list) else []
    brief = BriefDraft(analysis=data["analysis"].strip(), spans=[])
    if not isinstance(data.get("spans"), list):
        brief.problems.append('the brief has no "spans" list')
    for number, item in enumerate(items, start=1):
        span = _span_from_item(item)
        if isinstance(span, str):
            brief.problems.append(f"span {number} dropped: {span}")
        else:
            brief.spans.append(span)
    brief.candidate, candidate_problem = _candidate_value(data.get("candidate"))
    if candidate_problem:
        brief.problems.append(candidate_problem)
    return brief


_BAD_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


def _escape_backslash(found: re.Match[str]) -> str:
    """A backslash pair as it is when JSON knows it (\\n, \\\\, \\"), else the backslash escaped (\\d -> \\\\d)."""
    return found.group(0) if found.group(1) in '\\/"bfnrtu' else "\\\\" + found.group(1)


def _span_from_item(item: object) -> BriefSpan | str:
    """A JSON span ({file, start, end, reason}, or "lines": "10-42", or a "pkg/a.py:10-42" file), or why not."""
    if isinstance(item, str):
        spans, problem = parse_span_line(item)
        if spans:
            return spans[0]
        assert problem is not None  # no span: parse_span_line says why
        return problem
    if not isinstance(item, dict):
        return f"not an object with file, start and end: {str(item)[:80]!r}"
    path = item.get("file") or item.get("path")
    if not isinstance(path, str) or not path.strip():
        return 'needs "file"'
    start, end = item.get("start"), item.get("end")
    lines = item.get("lines")
    if start is None and isinstance(lines, (list, tuple)) and lines:
        start, end = lines[0], lines[-1]
    elif start is None and lines is not None:
        start, end = _first_range(f":{lines}")
    elif start is None:
        start, end = _first_range(path)
    start = line_number(start)
    end = line_number(end) if end is not None else start
    if start is None or end is None:
        return f'{path.strip()[:120]!r} needs "start" and "end" (line numbers)'
    if end < start:
        return f"{path}:{start}-{end}: the range ends before it starts"
    return BriefSpan(file=path.strip(), start=start, end=end, reason=str(item.get("reason") or "").strip())


def _first_range(text: str) -> tuple[int | None, int | None]:
    found = re.search(r"[:#]L?(\d+)(?:\s*[-–—]\s*L?(\d+))?\s*$", text.strip(), re.IGNORECASE)
    if not found:
        return None, None
    return line_number(found.group(1)), line_number(found.group(2) or found.group(1))


def _brief_from_text(text: str) -> BriefDraft | None:
    """The free-text form, or None when the reply has none of its headers."""
    sections: dict[str, list[str]] = {"preamble": [], "analysis": [], "spans": [], "trailer": []}
    answers: list[str] = []  # each CANDIDATE answer, the last one counts
    current, seen = "preamble", set()
    for line, fenced in _lines_outside_actions(text):
        header = None if fenced else _header(line)
        if header and header[0] == "candidate" and header[1] and _candidate_value(header[1])[1]:
            header = None  # "Candidate: 1 and 2 both ..." inside the analysis, not the answer
        if header:
            name, rest = header
            seen.add(name)
            if name == "candidate":
                answers.append(rest)
                current = "trailer" if rest else "candidate"  # what follows the answer is not read
            else:
                current = name
                if rest:
                    sections[name].append(rest)
        elif current == "candidate":
            if line.strip():
                answers[-1], current = line.strip(), "trailer"
        else:
            sections[current].append(line)
    if not seen & {"analysis", "spans"}:
        return None
    analysis = "\n".join(sections["analysis" if "analysis" in seen else "preamble"]).strip()
    if not analysis:
        raise BriefFormatError("the brief's ANALYSIS section is empty: say what the fix depends on")
    brief = BriefDraft(analysis=analysis, spans=[])
    for line in sections["spans"]:
        if not line.strip() or _FENCE.match(line):
            continue
        spans, problem = parse_span_line(line)
        if spans:
            brief.spans.extend(spans)
        elif line[:1].isspace() and brief.spans and not _BULLET.match(line):  # a reason wrapped onto a new line
            brief.spans[-1].reason = f"{brief.spans[-1].reason} {line.strip()}".strip()
        else:
            assert problem is not None  # no span: parse_span_line says why
            brief.problems.append(problem)
    if "spans" not in seen:
        brief.problems.append("the brief has no SPANS section")
    if answers:
        brief.candidate, problem = _candidate_value(answers[-1])
        if problem:
            brief.problems.append(problem)
    return brief


def _lines_outside_actions(text: str) -> Iterator[tuple[str, bool]]:
    """(line, inside a code block) for each line; ```bash blocks (the commands, submit) are left out, and a
    plain code block that wraps the brief's headers is unwrapped."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if not fence:
            yield lines[index], False
            index += 1
            continue
        closing = next((j for j in range(index + 1, len(lines))
                        if lines[j].strip().startswith(fence.group("marks")) and not lines[j].strip().strip("`~")),
                       len(lines))
        body = lines[index + 1:closing]
        tag = fence.group("tag").lower()
        if tag == "bash":
            pass
        elif tag in _PLAIN_TAGS and any(_header(line) for line in body):
            yield from _lines_outside_actions("\n".join(body))
        else:
            for line in lines[index:closing + 1]:
                yield line, True
        index = closing + 1


def _header(line: str) -> tuple[str, str] | None:
    found = _HEADER.match(line)
    if not found:
        return None
    rest = found.group("rest").strip().strip("*_").strip()
    if rest and not found.group("colon"):
        return None  # "Analysis of the parser shows ...": prose
    name = found.group("name").lower()
    return ("spans" if name.startswith("span") else name), rest


def parse_span_line(line: str) -> tuple[list[BriefSpan], str | None]:
    """The span(s) of one line of a SPANS list, or none and why (the line quoted)."""
    text = _BULLET.sub("", line.strip(), count=1).replace("**", "").strip()
    quoted = f"{line.strip()[:120]!r}"
    if not text:
        return [], f"{quoted}: empty span line"
    if text[0] in "`'\"":
        closing = text.find(text[0], 1)
        if closing < 0:
            return [], f"{quoted}: the path's quote is not closed"
        token, rest = text[1:closing].strip(), text[closing + 1:]
        suffix = _LINE_SUFFIX.search(token)
        if suffix:
            token, rest = token[:suffix.start()], token[suffix.start():] + rest
    else:
        found = _PATH_TOKEN.match(text)
        if not found:
            return [], f"{quoted}: does not start with a file path"
        token, rest = found.group("path"), text[found.end():]
    if not token:
        return [], f"{quoted}: does not start with a file path"
    found = _RANGE.match(rest)
    if not found:
        return [], f"{quoted}: no line range (write path:START-END and a reason)"
    numbers = [(line_number(found.group("start")), line_number(found.group("end") or found.group("start")))]
    rest = rest[found.end():]
    while more := _MORE_RANGE.match(rest):
        numbers.append((line_number(more.group("start")), line_number(more.group("end"))))
        rest = rest[more.end():]
    ranges = [(start, end) for start, end in numbers if start is not None and end is not None]
    if len(ranges) < len(numbers):
        return [], f"{quoted}: a line number that is no line number"
    if any(end < start for start, end in ranges):
        return [], f"{quoted}: a range ends before it starts"
    reason = rest.strip().lstrip(":-–—,;)|").strip()
    return [BriefSpan(token, start, end, reason) for start, end in ranges], None


def _candidate_value(value: object) -> tuple[int | None, str | None]:
    """The CANDIDATE answer as a 1-based number or None (none of them); and a problem if it was unreadable."""
    if value is None or isinstance(value, bool):
        return None, None
    if isinstance(value, (int, float)) and line_number(value) is not None:
        return line_number(value), None
    text = str(value).strip()
    if not text or _NO_CANDIDATE.match(text):
        return None, None
    found = re.match(r"^\W*(?:candidate\s*)?#?\s*(\d+)\b(?!\s*(?:and|or|&|/|,\s*\d|-\s*\d))", text, re.IGNORECASE)
    if found and line_number(found.group(1)) is not None:
        return line_number(found.group(1)), None
    return None, f"CANDIDATE {text[:60]!r}: not a candidate number or none"


def check_candidate(brief: BriefDraft, count: int) -> None:
    """A candidate number outside 1..count (the pool's candidates) becomes None, with the reason."""
    if brief.candidate is not None and not 1 <= brief.candidate <= count:
        brief.problems.append(f"CANDIDATE {brief.candidate}: there is no such candidate "
                              f"({'none were shown' if not count else f'they are numbered 1 to {count}'})")
        brief.candidate = None


def normalise_span_path(path: str, root: str | None = None,
                        exists: Callable[[str], bool] | None = None) -> tuple[str, str | None]:
    """A span's file as a path from the repository root, and why it cannot be one (else None).

    Beyond what ``pipeline.text.repopath.from_root`` reads (``/app/pkg/a.py``, ``./pkg/a.py``, ``pkg//a.py``): quotes
    and backticks, a ``:10-20`` or ``#L10-L20`` suffix, a diff's ``a/pkg/a.py`` or the root's name without its
    slash (``app/pkg/a.py``), stripped only when that file is missing and the rest ``exists``. Refused besides:
    a directory (a trailing ``/``).
    """
    text = _LINE_SUFFIX.sub("", path.strip().strip("`'\"").strip()).strip()
    normal, problem = from_root(text, [root] if root else [])
    if problem == WHOLE_REPOSITORY:
        return normal, f"{WHOLE_REPOSITORY}; a span is one file and a range of its lines"
    if problem:
        return normal, problem
    if text.endswith("/"):
        return normal, "names a directory, not a file; a span is one file and a range of its lines"
    if exists is not None:
        heads = (*DIFF_HEADS, root.rstrip("/").rsplit("/", 1)[-1]) if root else DIFF_HEADS
        normal = without_diff_prefix(normal, exists, heads=heads)
    return normal, None


def check_spans(spans: list[BriefSpan], read_lines: Callable[[str], list[str] | None],
                is_directory: Callable[[str], bool] | None = None,
                root: str | None = None) -> tuple[list[BriefSpan], list[str]]:
    """Spans whose file exists, with repository-relative paths, clamped to its lines; and why the others were
    dropped.

    Paths are normalised by ``normalise_span_path`` (``root`` is the repository's folder, e.g. /app). A span of
    the whole repository, a directory or a path outside the repository is refused before anything is read.
    ``is_directory`` (asked after ``read_lines`` found no file) names directories.
    """
    kept, problems = [], []
    for span in spans:
        path, problem = normalise_span_path(span.file, root, lambda name: read_lines(name) is not None)
        if problem:
            problems.append(f"{span.file!r}: {problem}")
            continue
        lines = read_lines(path)
        if lines is None and is_directory is not None and is_directory(path):
            problems.append(f"{path}: a directory, not a file; a span is one file and a range of its lines")
        elif lines is None:
            problems.append(f"{path}: no such file in the repository")
        elif span.start < 1 or span.start > len(lines) or span.end < span.start:
            problems.append(f"{path}:{span.start}-{span.end}: outside the file's {len(lines)} lines")
        else:
            kept.append(BriefSpan(path, span.start, min(span.end, len(lines)), span.reason))
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
