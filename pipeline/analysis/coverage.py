"""Coverage: did the context hold what the gold patch needs, as the pool grows from 1 to K rollouts?

Three contexts, each holding the one before it:

- (a) "candidates": the candidates' own hunks (their base-commit ranges) and added lines;
- (b) "+ code expansion": plus every span the deterministic code expansion found for those candidates
  (senior/expansion_by_candidate.json: enclosing definitions, definitions they use, callers, tests);
- (c) "+ senior model": plus the spans the senior model chose, as the principal got them (a brief's
  ``context_spans``). The senior ran once in the run, at k = K (senior/brief.json); ``swepipe coverage RUN
  --senior-at 1,3,5`` runs it again on the first k rollouts of each task (pipeline.studies.senior_at, into
  tasks/<id>/analysis/senior-at-NN/), so (c) is a curve. (c) minus (b) on the same rollouts is the senior
  model's lift.

Measures:

- removed lines: (file, base-commit line number) of every line the gold patch deletes or changes; covered when
  inside the context's spans. A gold patch that only adds lines has none, and its removed coverage is None.
- added lines: the distinct whitespace-normalised (file, text) pairs the gold patch adds (blank lines left
  out). One is covered when a candidate in the context proposes it (the same squashed text among its added
  lines in the same file), or when that text already stands in the base file inside a context span *next to
  where the gold patch adds it*: at most NEAR_LINES lines from the gold's insertion point (the base lines it
  sits between, or the base lines its hunk replaces). The same text elsewhere in the file does not count.
- curves (a) and (b) over k = 1..K: the candidates the first k rollouts produced, averaged over orderings of
  the rollouts (every permutation when K <= 6, else 200 seeded random ones). (c) and its paired (b) are
  measured on rollouts 0..k-1, the pool the senior was shown.
- "sent": the final context the principal was sent (brief.json context_spans, and the candidates it was shown),
  a point at k = K.

Line text is base-commit text: senior/expansion_text.json (the expansion's lines, read from the task's
repository when the senior stage ran), the candidates' patches (their context and removed lines), and the
context.md of each brief (what a brief's spans held). Runs from before expansion_text.json have only the last
two: a line of the expansion whose text is not there matches no added line (the report says how many tasks
that is), and its token cost is estimated (see ``Point.estimated``).
"""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from pipeline.analysis.load import RunData, TaskData, config_section
from pipeline.analysis.stats import model_off
from pipeline.records import Brief, Pool, read_json
from pipeline.records.base import Part
from pipeline.records.pool import Candidate
from pipeline.rundir.layout import RunLayout, TaskPaths

MAX_EXACT_ROLLOUTS = 6
SAMPLED_ORDERINGS = 200
DEFAULT_LINE_TOKENS = 10.0  # per line of unknown text when a task has no known line to measure
NEAR_LINES = 5  # a base line "next to" a gold added line: at most this many lines from where the gold adds it
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
    # (file, text) -> the base-line intervals (first, last) where the gold patch adds it: the lines it sits
    # between, widened to the lines its hunk replaces there.
    places: dict = field(default_factory=dict, compare=False, hash=False)


def gold_edits(patch: str) -> GoldEdits:
    removed: set[tuple[str, int]] = set()
    added: set[tuple[str, str]] = set()
    files: set[str] = set()
    places: dict[tuple[str, str], set[tuple[int, int]]] = {}
    for patched_file in PatchSet(patch):
        files.add(patched_file.path)
        for hunk in patched_file:
            _read_hunk(patched_file.path, hunk, removed, added, places)
    return GoldEdits(frozenset(removed), frozenset(added), frozenset(files),
                     {pair: tuple(sorted(spots)) for pair, spots in places.items()})


def _read_hunk(path: str, hunk, removed: set, added: set, places: dict) -> None:
    """Add the hunk's removed base lines to ``removed``, its added texts to ``added``, and where each added text
    sits to ``places``."""
    before = hunk.source_start - 1
    pending: list[str] = []

    def close(after: int) -> None:
        for text in pending:
            places.setdefault((path, text), set()).add((before, after))
        pending.clear()

    for line in hunk:
        if line.is_context:
            close(line.source_line_no)
            before = line.source_line_no
        elif line.is_removed:
            removed.add((path, line.source_line_no))
        elif line.is_added and squash(line.value):
            added.add((path, squash(line.value)))
            pending.append(squash(line.value))
    close(hunk.source_start + hunk.source_length)


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


METRICS = ("removed", "added", "files", "tokens")


@dataclass
class TaskCoverage:
    instance_id: str
    rollouts: int  # K
    orderings: int
    hunks: list[Point]  # (a), index k - 1
    expansion: list[Point]  # (b)
    final: Point | None  # the context sent to the principal
    gold_removed: int
    gold_added: int
    gold_files: int
    senior: dict[int, Point] = field(default_factory=dict)  # k -> (c) on rollouts 0..k-1
    paired: dict[int, Point] = field(default_factory=dict)  # k -> (b) on the same rollouts
    senior_sources: dict[int, str] = field(default_factory=dict)  # k -> the brief's source (senior, expansion)
    base_text: bool = True  # the expansion's base text was saved (expansion_text.json); False: an older run
    complete_text: bool = True  # ... and in full (not cut at its bound)


@dataclass
class RunCoverage:
    run_id: str
    tasks: list[TaskCoverage] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # instance id -> why no coverage
    senior_off: bool = False  # the run's senior model was none: its briefs are the code expansion, no senior point

    @property
    def max_k(self) -> int:
        return max((t.rollouts for t in self.tasks), default=0)

    @property
    def senior_ks(self) -> list[int]:
        return sorted({k for t in self.tasks for k in t.senior})

    def curve(self, which: str, metric: str) -> list[tuple[int, float | None, int]]:
        """(k, mean over tasks with a value at k, how many) for which in {"hunks", "expansion"}."""
        rows = []
        for k in range(1, self.max_k + 1):
            values = [getattr(getattr(t, which)[k - 1], metric) for t in self.tasks if t.rollouts >= k]
            values = [v for v in values if v is not None]
            rows.append((k, sum(values) / len(values) if values else None, len(values)))
        return rows

    def senior_curve(self, metric: str) -> list[tuple[int, float | None, float | None, int]]:
        """(k, mean of (c), mean lift over (b) on the same rollouts, how many tasks) at each k the senior ran."""
        rows = []
        for k in self.senior_ks:
            pairs = [(getattr(t.senior[k], metric), getattr(t.paired[k], metric)) for t in self.tasks
                     if k in t.senior]
            pairs = [(c, b) for c, b in pairs if c is not None and b is not None]
            if pairs:
                rows.append((k, sum(c for c, _ in pairs) / len(pairs), sum(c - b for c, b in pairs) / len(pairs),
                             len(pairs)))
            else:
                rows.append((k, None, None, 0))
        return rows

    def final(self, metric: str) -> tuple[float | None, int]:
        values = [getattr(t.final, metric) for t in self.tasks if t.final is not None]
        values = [v for v in values if v is not None]
        return (sum(values) / len(values) if values else None), len(values)


def run_coverage(run: RunData, patches: dict[str, str], seed: int = 0) -> RunCoverage:
    """Coverage of every task of ``run`` against ``patches`` (instance id -> gold patch)."""
    result = RunCoverage(run.run_id, senior_off=model_off(run.config, "senior"))
    shown = _shown_candidates(run.config)
    for task in run.tasks:
        patch = patches.get(task.instance_id)
        if patch is None:
            result.skipped[task.instance_id] = "not in the dataset"
        elif not patch.strip():
            result.skipped[task.instance_id] = "empty gold patch"
        elif not _has_pool(task):
            result.skipped[task.instance_id] = "no junior pool"
        else:
            try:
                gold = gold_edits(patch)
            except UnidiffParseError as error:
                result.skipped[task.instance_id] = f"gold patch does not parse: {error}"
                continue
            coverage = task_coverage(task, gold, shown_candidates=shown, seed=seed,
                                     task_root=RunLayout(run.root).task(task.instance_id).root,
                                     senior_off=result.senior_off)
            if coverage is None:
                result.skipped[task.instance_id] = "no rollout in the pool"
            else:
                result.tasks.append(coverage)
    return result


def _shown_candidates(config: dict) -> int | None:
    """How many candidates the principal was shown: config principal.show_candidates (None: all that fit its
    token budget, counted as all); a config from before the option existed: 0."""
    principal = config_section(config, "principal")
    if "show_candidates" not in principal:
        return 0
    value = principal["show_candidates"]
    return value if isinstance(value, int) and not isinstance(value, bool) else None  # else: all, as for None


@dataclass
class _Brief:
    spans: list[tuple[str, int, int]]
    source: str
    context_tokens: float | None


def task_coverage(task: TaskData, gold: GoldEdits, shown_candidates: int | None = 0, seed: int = 0,
                  task_root: Path | None = None, senior_off: bool = False) -> TaskCoverage | None:
    """The curves and points of one task; None when its pool names no rollout.

    ``shown_candidates``: how many top candidates the principal saw (None: all); only their added lines count
    for the final context. ``task_root``: the task's directory, for the expansion's base text and the senior's
    briefs on fewer rollouts (tasks/<id>/analysis); without it only ``task``'s records are used. ``senior_off``:
    the run had no senior model, so its own brief (the code expansion) is no '+senior' point.
    """
    pool = task.pool or Pool()
    raw_candidates = pool.candidates or []
    candidates = [_candidate(c) for c in raw_candidates]
    by_rollout = {index: c for c, raw in zip(candidates, raw_candidates, strict=True) for index in raw.rollouts or []}
    indices = sorted(set(by_rollout) | set(pool.empty or []) | set(pool.unparsable or []) | set(pool.failed or []))
    if not indices:
        return None
    big_k = len(indices)
    briefs, measure, base = _task_measure(task, gold, task_root, big_k)
    if senior_off:
        briefs.pop(big_k, None)
    expansion = task.expansion_by_candidate or {}
    cache: dict[frozenset, tuple[Point, Point]] = {}

    def context(keys) -> tuple[list[_Candidate], list[tuple[str, int, int]], list[tuple[str, int, int]]]:
        chosen = [c for c in candidates if c.key in keys]
        return (chosen, [r for c in chosen for r in c.ranges],
                [span for c in chosen for span in _spans(expansion.get(c.key))])

    def points(keys: frozenset) -> tuple[Point, Point]:
        if keys not in cache:
            chosen, own, extra = context(keys)
            cache[keys] = (measure(own, chosen), measure(own + extra, chosen))
        return cache[keys]

    orderings = _orderings(indices, seed)
    # k - 1 -> how often each set of candidates is the first k's
    tallies: list[Counter[frozenset[str]]] = [Counter() for _ in indices]
    for ordering in orderings:
        keys: set[str] = set()
        for k, index in enumerate(ordering, start=1):
            if index in by_rollout:
                keys.add(by_rollout[index].key)
            tallies[k - 1][frozenset(keys)] += 1
    weighted = [[(points(keys), n) for keys, n in tally.items()] for tally in tallies]
    hunks = [_mean([(pair[0], n) for pair, n in at_k]) for at_k in weighted]
    with_expansion = [_mean([(pair[1], n) for pair, n in at_k]) for at_k in weighted]

    senior, paired, sources = {}, {}, {}
    for k, brief in sorted(briefs.items()):
        first_k = frozenset(by_rollout[i].key for i in indices[:k] if i in by_rollout)
        chosen, own, extra = context(first_k)
        paired[k] = points(first_k)[1]
        senior[k] = measure(own + extra + brief.spans, chosen)
        sources[k] = brief.source

    final = None
    if task.brief is not None and task.brief.context_spans is not None:
        shown = candidates if shown_candidates is None else candidates[:shown_candidates]
        final = measure(_spans(task.brief.context_spans), shown)
        if task.brief.context_tokens is not None:  # the run's own count of what was sent
            final.tokens = float(task.brief.context_tokens) + sum(c.added_tokens for c in shown)
            final.estimated = 0.0
    return TaskCoverage(task.instance_id, big_k, len(orderings), hunks, with_expansion, final,
                        len(gold.removed), len(gold.added), len(gold.files), senior=senior, paired=paired,
                        senior_sources=sources, base_text=isinstance(base, dict),
                        complete_text=not isinstance(base, dict) or base.get("complete", True) is not False)


def _task_measure(task: TaskData, gold: GoldEdits, task_root: Path | None, big_k: int):
    """(the senior's briefs by k, the task's coverage measure, its expansion_text.json record)."""
    briefs, contexts, base_texts = _senior_briefs(task, task_root, big_k)
    base = read_json(TaskPaths(task_root).senior_files.expansion_text).data if task_root else None
    texts = _line_texts([task.context_text or "", *contexts], (task.pool.candidates or []) if task.pool else [],
                        [base, *base_texts])
    known = [t for lines in texts.values() for t in lines.values()]
    line_tokens = sum(map(_tokens_of, known)) / len(known) if known else DEFAULT_LINE_TOKENS
    return briefs, _Measure(gold, texts, line_tokens), base


@dataclass
class GoldLineCoverage:
    """Which gold lines each context of one task covers, by the same rules as the curves (``_Measure``):
    context name ("cand.", "+exp.", "sent") -> (removed (file, base line number), added (file, squashed text))."""

    gold: GoldEdits
    contexts: dict[str, tuple[set, set]]


def gold_line_coverage(task: TaskData, patch: str, shown_candidates: int | None = 0,
                       task_root: Path | None = None) -> GoldLineCoverage | None:
    """Per gold line, whether the task's contexts at k = K held it: 'cand.' (every candidate's hunks and added
    lines), '+exp.' (plus their code expansion) and 'sent' (what the principal got: the brief's context_spans
    and the candidates it was shown). None when the gold patch does not parse or is empty; contexts the run
    does not have (no pool, no brief) are left out."""
    try:
        gold = gold_edits(patch) if patch and patch.strip() else None
    except UnidiffParseError:
        gold = None
    if gold is None:
        return None
    pool = task.pool or Pool()
    candidates = [_candidate(c) for c in pool.candidates or []]
    big_k = len({i for c in pool.candidates or [] for i in c.rollouts or []}
                | set(pool.empty or []) | set(pool.unparsable or []) | set(pool.failed or []))
    _, measure, _ = _task_measure(task, gold, task_root, big_k)
    contexts: dict[str, tuple[set, set]] = {}
    if _has_pool(task):
        own = [r for c in candidates for r in c.ranges]
        expansion = task.expansion_by_candidate or {}
        extra = [span for c in candidates for span in _spans(expansion.get(c.key))]
        contexts["cand."] = measure.covered(own, candidates)
        contexts["+exp."] = measure.covered(own + extra, candidates)
    if task.brief is not None and task.brief.context_spans is not None:
        shown = candidates if shown_candidates is None else candidates[:shown_candidates]
        contexts["sent"] = measure.covered(_spans(task.brief.context_spans), shown)
    return GoldLineCoverage(gold, contexts)


def shown_candidates(config: dict) -> int | None:
    return _shown_candidates(config)


def _senior_briefs(task: TaskData, task_root: Path | None,
                   big_k: int) -> tuple[dict[int, _Brief], list[str], list]:
    """k -> the senior's brief on the first k rollouts (the run's own at k = K, else tasks/<id>/analysis); and
    the analysis briefs' context.md texts and expansion_text.json records (base-commit text, all of it)."""
    briefs, contexts, base_texts = {}, [], []
    runs = TaskPaths(task_root).senior_at_runs() if task_root is not None else {}
    for k, files in runs.items():
        record = Brief.read(files.brief)
        if isinstance(record, Brief) and record.context_spans is not None and 1 <= k <= big_k:
            briefs[k] = _brief(record)
            if files.context.is_file():
                contexts.append(files.context.read_text(encoding="utf-8", errors="replace"))
            base_texts.append(read_json(files.expansion_text).data)
    if task.brief is not None and task.brief.context_spans is not None:
        briefs[big_k] = _brief(task.brief)  # the run's own, at k = K
    return briefs, contexts, base_texts


def _brief(record: Brief) -> _Brief:
    tokens = record.context_tokens
    return _Brief(_spans(record.context_spans), str(record.source or "senior"),
                  float(tokens) if isinstance(tokens, (int, float)) else None)


class _Measure:
    """Coverage of one context (spans plus chosen candidates) against the gold edits."""

    def __init__(self, gold: GoldEdits, texts: dict[str, dict[int, str]], line_tokens: float):
        self.gold, self.line_tokens = gold, line_tokens
        # Where each gold added text already stands in the base commit next to where the gold adds it.
        self.near: dict[tuple[str, str], set[int]] = {pair: set() for pair in gold.added}
        for file, lines in texts.items():
            for number, text in lines.items():
                pair = (file, squash(text))
                if pair in self.near and _next_to(number, gold.places.get(pair, ())):
                    self.near[pair].add(number)
        self.cost = {file: {n: _tokens_of(text) for n, text in lines.items()} for file, lines in texts.items()}

    def covered(self, spans: list[tuple[str, int, int]], chosen: list[_Candidate]) -> tuple[set, set]:
        """The gold removed lines (file, number) and added lines (file, squashed text) this context covers."""
        lines = _lines(spans)
        proposed = set().union(*(c.added for c in chosen)) if chosen else set()
        return ({(f, n) for f, n in self.gold.removed if n in lines.get(f, ())},
                {pair for pair in self.gold.added
                 if pair in proposed or not self.near[pair].isdisjoint(lines.get(pair[0], ()))})

    def __call__(self, spans: list[tuple[str, int, int]], chosen: list[_Candidate]) -> Point:
        lines = _lines(spans)
        gold = self.gold
        removed_in, added_in = self.covered(spans, chosen)
        removed = len(removed_in) / len(gold.removed) if gold.removed else None
        added = len(added_in) / len(gold.added) if gold.added else None
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


def _lines(spans: list[tuple[str, int, int]]) -> dict[str, set[int]]:
    lines: dict[str, set[int]] = {}
    for file, start, end in spans:
        lines.setdefault(file, set()).update(range(start, end + 1))
    return lines


def _next_to(number: int, places) -> bool:
    """Whether base line ``number`` is at most NEAR_LINES lines from one of the (first, last) intervals."""
    return any(first - NEAR_LINES <= number <= last + NEAR_LINES for first, last in places)


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
    """(file, start, end) of span records (a brief's, or expansion_by_candidate.json's dicts); malformed ones are
    left out."""
    spans = []
    for span in raw or []:
        span = span.to_dict() if isinstance(span, Part) else span
        try:
            spans.append((str(span["file"]), int(span["start"]), int(span["end"])))
        except (KeyError, TypeError, ValueError):
            continue
    return spans


def _candidate(raw: Candidate) -> _Candidate:
    ranges = [(h.file, int(h.old_start), int(h.old_start) + int(h.old_lines) - 1)
              for h in raw.hunks or [] if int(h.old_lines or 0) > 0]
    added, added_tokens = set(), 0.0
    for patched_file in _parse(raw.patch or ""):
        for hunk in patched_file:
            for line in hunk:
                if line.is_added and squash(line.value):
                    added.add((patched_file.path, squash(line.value)))
                    added_tokens += _tokens_of(line.value.rstrip("\n"))
    return _Candidate(raw.key if raw.key is not None else "", set(raw.files or []), ranges, added, added_tokens)


def _has_pool(task: TaskData) -> bool:
    """Whether the task has a pool with anything in it (an empty pool.json is none)."""
    return task.pool is not None and bool(task.pool.to_dict())


def _line_texts(contexts: list[str], candidates: list[Candidate], base_texts: list) -> dict[str, dict[int, str]]:
    """Base-commit text by file and line number: from the saved base text of the expansions
    (expansion_text.json), the candidates' context/removed lines, and the context.md files."""
    texts: dict[str, dict[int, str]] = {}
    for base in base_texts:
        files = base.get("files") if isinstance(base, dict) else None
        for file, lines in files.items() if isinstance(files, dict) else ():
            for number, text in lines.items() if isinstance(lines, dict) else ():
                if isinstance(text, str) and str(number).isdigit():
                    texts.setdefault(str(file), {})[int(number)] = text
    for raw in candidates:
        for patched_file in _parse(raw.patch or ""):
            for hunk in patched_file:
                for line in hunk:
                    if line.source_line_no is not None:
                        texts.setdefault(patched_file.path, {})[line.source_line_no] = line.value.rstrip("\n")
    for context_md in contexts:
        file, inside = None, False
        for row in context_md.splitlines():
            header = _HEADER.match(row)
            if header and not inside:
                file = header.group(1)
            elif row.startswith("```"):
                inside = not inside and row == "```" and file is not None
            elif inside and file is not None and (numbered := _NUMBERED.match(row)):  # inside: file is known
                texts.setdefault(file, {}).setdefault(int(numbered.group(1)), numbered.group(2) or "")
    return texts



def _parse(patch: str):
    try:
        return PatchSet(patch) if patch.strip() else []
    except UnidiffParseError:
        return []
