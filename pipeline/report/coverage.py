"""Coverage: did the context hold what the gold patch needs, as the pool grows, with and without
the senior's extraction?

- removed lines: (file, base-commit line number) of every line the gold patch deletes or changes; covered when
  inside the context's spans. A gold patch that only adds lines has none, and its removed coverage is None.
- added lines: the distinct whitespace-normalised (file, text) pairs the gold patch adds (blank lines left out);
  covered when the same file's context text holds that text, or a candidate in the context adds it there.
- "without" the senior: the context is the candidates' own hunks (their base-commit ranges) and added lines;
  "with": those plus every span the senior's expansion found for those candidates (expansion_by_candidate.json).
- curves over k = 1..K: the candidates the first k rollouts produced, averaged over orderings of the rollouts
  (every permutation when K <= 6, else 200 seeded random ones).
- the final context the principal was sent (brief.json context_spans, context.md) is a point at k = K.

Line text comes from the run directory only: senior/context.md and the candidates' patches (their context and
removed lines are base-commit text). Lines of a span whose text is not there count as not matching any added
line, and their token cost is estimated (see ``context_tokens``).
"""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter
from dataclasses import dataclass, field

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from pipeline.report.load import RunData, TaskRecord

MAX_EXACT_ROLLOUTS = 6
SAMPLED_ORDERINGS = 200
DEFAULT_LINE_TOKENS = 10.0  # per line of unknown text when a task has no known line to measure
_HEADER = re.compile(r"^### (.+):(\d+)-(\d+)$")
_NUMBERED = re.compile(r"^\s*(\d+) \|(?: (.*))?$")


def squash(text: str) -> str:
    return " ".join(text.split())


def _tokens_of(text: str) -> float:
    return (len(text) + 1) / 4  # characters (and the newline) / 4


@dataclass(frozen=True)
class GoldEdits:
    removed: frozenset[tuple[str, int]]
    added: frozenset[tuple[str, str]]
    files: frozenset[str]


def gold_edits(patch: str) -> GoldEdits:
    removed, added, files = set(), set(), set()
    for patched_file in PatchSet(patch):
        files.add(patched_file.path)
        for hunk in patched_file:
            for line in hunk:
                if line.is_removed:
                    removed.add((patched_file.path, line.source_line_no))
                elif line.is_added and squash(line.value):
                    added.add((patched_file.path, squash(line.value)))
    return GoldEdits(frozenset(removed), frozenset(added), frozenset(files))


@dataclass
class _Candidate:
    key: str
    files: set[str]
    ranges: list[tuple[str, int, int]]  # base-commit lines of its hunks
    added: set[tuple[str, str]]
    added_tokens: float


@dataclass
class Point:
    removed: float | None  # fraction of gold removed lines inside the context
    added: float | None  # fraction of gold added lines found
    files: float | None  # 1.0 when every gold file is in the context (a fraction once averaged)
    tokens: float  # approximate size of the context
    estimated: float = 0.0  # share of `tokens` from lines of unknown text (DEFAULT_LINE_TOKENS or the task's mean)


@dataclass
class TaskCoverage:
    instance_id: str
    rollouts: int  # K
    orderings: int
    without: list[Point]  # index k - 1
    with_senior: list[Point]
    final: Point | None
    gold_removed: int
    gold_added: int
    gold_files: int


@dataclass
class RunCoverage:
    run_id: str
    tasks: list[TaskCoverage] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # instance id -> why no coverage

    @property
    def max_k(self) -> int:
        return max((t.rollouts for t in self.tasks), default=0)

    def curve(self, which: str, metric: str) -> list[tuple[int, float | None, int]]:
        """(k, mean over tasks with a value at k, how many) for which in {"without", "with_senior"}."""
        rows = []
        for k in range(1, self.max_k + 1):
            values = [getattr(getattr(t, which)[k - 1], metric) for t in self.tasks if t.rollouts >= k]
            values = [v for v in values if v is not None]
            rows.append((k, sum(values) / len(values) if values else None, len(values)))
        return rows

    def final(self, metric: str) -> tuple[float | None, int]:
        values = [getattr(t.final, metric) for t in self.tasks if t.final is not None]
        values = [v for v in values if v is not None]
        return (sum(values) / len(values) if values else None), len(values)


def run_coverage(run: RunData, patches: dict[str, str], seed: int = 0) -> RunCoverage:
    """Coverage of every task of ``run`` against ``patches`` (instance id -> gold patch)."""
    result = RunCoverage(run.run_id)
    shown = int(((run.config.get("principal") or {}).get("show_candidates")) or 0)
    for task in run.tasks:
        patch = patches.get(task.instance_id)
        if patch is None:
            result.skipped[task.instance_id] = "not in the dataset"
        elif not patch.strip():
            result.skipped[task.instance_id] = "empty gold patch"
        elif not task.pool:
            result.skipped[task.instance_id] = "no junior pool"
        else:
            try:
                coverage = task_coverage(task, gold_edits(patch), shown_candidates=shown, seed=seed)
            except UnidiffParseError as error:
                result.skipped[task.instance_id] = f"gold patch does not parse: {error}"
                continue
            if coverage is None:
                result.skipped[task.instance_id] = "no rollout in the pool"
            else:
                result.tasks.append(coverage)
    return result


def task_coverage(task: TaskRecord, gold: GoldEdits, shown_candidates: int = 0, seed: int = 0) -> TaskCoverage | None:
    """The curves and the final point of one task; None when its pool names no rollout.

    ``shown_candidates``: how many top candidates the principal saw (config principal.show_candidates);
    only their added lines count for the final context.
    """
    pool = task.pool or {}
    raw_candidates = pool.get("candidates") or []
    candidates = [_candidate(c) for c in raw_candidates]
    by_rollout = {index: c for c, raw in zip(candidates, raw_candidates) for index in raw.get("rollouts") or []}
    indices = sorted(set(by_rollout) | set(pool.get("empty") or []) | set(pool.get("unparsable") or [])
                     | set(pool.get("failed") or []))
    if not indices:
        return None
    texts = _line_texts(task.context_text or "", raw_candidates)
    known = [t for lines in texts.values() for t in lines.values()]
    line_tokens = sum(map(_tokens_of, known)) / len(known) if known else DEFAULT_LINE_TOKENS
    expansion = task.expansion_by_candidate or {}
    measure = _Measure(gold, texts, line_tokens)
    cache: dict[frozenset, tuple[Point, Point]] = {}

    def points(keys: frozenset) -> tuple[Point, Point]:
        if keys not in cache:
            chosen = [c for c in candidates if c.key in keys]
            own = [r for c in chosen for r in c.ranges]
            extra = [span for c in chosen for span in _spans(expansion.get(c.key))]
            cache[keys] = (measure(own, chosen), measure(own + extra, chosen))
        return cache[keys]

    orderings = _orderings(indices, seed)
    tallies = [Counter() for _ in indices]  # k - 1 -> how often each set of candidates is the first k's
    for ordering in orderings:
        keys: set[str] = set()
        for k, index in enumerate(ordering, start=1):
            if index in by_rollout:
                keys.add(by_rollout[index].key)
            tallies[k - 1][frozenset(keys)] += 1
    weighted = [[(points(keys), n) for keys, n in tally.items()] for tally in tallies]
    final = None
    if task.brief is not None and task.brief.get("context_spans") is not None:
        spans = _spans(task.brief["context_spans"])
        shown = candidates[:shown_candidates]
        final = measure(spans, shown)
        if task.brief.get("context_tokens") is not None:  # the run's own count of what was sent
            final.tokens = float(task.brief["context_tokens"]) + sum(c.added_tokens for c in shown)
            final.estimated = 0.0
    without = [_mean([(pair[0], n) for pair, n in at_k]) for at_k in weighted]
    with_senior = [_mean([(pair[1], n) for pair, n in at_k]) for at_k in weighted]
    return TaskCoverage(task.instance_id, len(indices), len(orderings), without, with_senior, final,
                        len(gold.removed), len(gold.added), len(gold.files))


class _Measure:
    """Coverage of one context (spans plus chosen candidates) against the gold edits."""

    def __init__(self, gold: GoldEdits, texts: dict[str, dict[int, str]], line_tokens: float):
        self.gold, self.line_tokens = gold, line_tokens
        # Where each gold added text already stands in the base commit (as far as the run shows it).
        self.where: dict[tuple[str, str], set[int]] = {pair: set() for pair in gold.added}
        for file, lines in texts.items():
            for number, text in lines.items():
                if (file, squash(text)) in self.where:
                    self.where[(file, squash(text))].add(number)
        self.cost = {file: {n: _tokens_of(text) for n, text in lines.items()} for file, lines in texts.items()}

    def __call__(self, spans: list[tuple[str, int, int]], chosen: list[_Candidate]) -> Point:
        lines: dict[str, set[int]] = {}
        for file, start, end in spans:
            lines.setdefault(file, set()).update(range(start, end + 1))
        gold = self.gold
        removed = (sum(n in lines.get(f, ()) for f, n in gold.removed) / len(gold.removed)) if gold.removed else None
        proposed = set().union(*(c.added for c in chosen)) if chosen else set()
        added = (sum(pair in proposed or not self.where[pair].isdisjoint(lines.get(pair[0], ())) for pair in gold.added)
                 / len(gold.added)) if gold.added else None
        files_seen = set(lines) | {f for c in chosen for f in c.files}
        files = float(gold.files <= files_seen) if gold.files else None
        exact, unknown = 0.0, 0
        for file, numbers in lines.items():
            known = self.cost.get(file, {})
            inside = numbers & known.keys()
            exact += sum(known[n] for n in inside)
            unknown += len(numbers) - len(inside)
        guessed = unknown * self.line_tokens
        tokens = exact + guessed + sum(c.added_tokens for c in chosen)
        return Point(removed, added, files, tokens, guessed / tokens if tokens else 0.0)


def _mean(weighted: list[tuple[Point, int]]) -> Point:
    """The mean of points, each counted ``n`` times; a metric no point has stays None."""
    total = sum(n for _, n in weighted)

    def mean(name: str) -> float | None:
        values = [(getattr(point, name), n) for point, n in weighted if getattr(point, name) is not None]
        return sum(v * n for v, n in values) / total if values else None

    return Point(mean("removed"), mean("added"), mean("files"), mean("tokens") or 0.0, mean("estimated") or 0.0)


def _orderings(indices: list[int], seed: int) -> list[tuple[int, ...]]:
    if len(indices) <= MAX_EXACT_ROLLOUTS:
        return list(itertools.permutations(indices))
    rng = random.Random(seed)
    orderings = []
    for _ in range(SAMPLED_ORDERINGS):
        shuffled = list(indices)
        rng.shuffle(shuffled)
        orderings.append(tuple(shuffled))
    return orderings


def _spans(raw) -> list[tuple[str, int, int]]:
    """(file, start, end) of span records; malformed ones are left out."""
    spans = []
    for span in raw or []:
        try:
            spans.append((str(span["file"]), int(span["start"]), int(span["end"])))
        except (KeyError, TypeError, ValueError):
            continue
    return spans


def _candidate(raw: dict) -> _Candidate:
    ranges = [(h["file"], int(h["old_start"]), int(h["old_start"]) + int(h["old_lines"]) - 1)
              for h in raw.get("hunks") or [] if int(h.get("old_lines") or 0) > 0]
    added, added_tokens = set(), 0.0
    for patched_file in _parse(raw.get("patch") or ""):
        for hunk in patched_file:
            for line in hunk:
                if line.is_added and squash(line.value):
                    added.add((patched_file.path, squash(line.value)))
                    added_tokens += _tokens_of(line.value.rstrip("\n"))
    return _Candidate(raw.get("key", ""), set(raw.get("files") or []), ranges, added, added_tokens)


def _line_texts(context_md: str, candidates: list[dict]) -> dict[str, dict[int, str]]:
    """Base-commit text by file and line number: from context.md and the candidates' context/removed lines."""
    texts: dict[str, dict[int, str]] = {}
    for raw in candidates:
        for patched_file in _parse(raw.get("patch") or ""):
            for hunk in patched_file:
                for line in hunk:
                    if line.source_line_no is not None:
                        texts.setdefault(patched_file.path, {})[line.source_line_no] = line.value.rstrip("\n")
    file, inside = None, False
    for row in context_md.splitlines():
        header = _HEADER.match(row)
        if header and not inside:
            file = header.group(1)
        elif row.startswith("```"):
            inside = not inside and row == "```" and file is not None
        elif inside and (numbered := _NUMBERED.match(row)):
            texts.setdefault(file, {})[int(numbered.group(1))] = numbered.group(2) or ""
    return texts


def _parse(patch: str):
    try:
        return PatchSet(patch) if patch.strip() else []
    except UnidiffParseError:
        return []
