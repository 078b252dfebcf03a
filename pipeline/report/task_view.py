"""The view model of one task page: plain records of everything the page shows, each text already cleaned and
cut, each number, sum of money and time already formatted. No HTML: templates/task_page.html lays a TaskPage out
and escapes every value; task_build.py makes one from what the loader read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# -- pieces ---------------------------------------------------------------------------------------------------

@dataclass
class Fact:
    """``name value`` in a line of facts (the value in bold)."""

    name: str
    value: str


@dataclass
class Block:
    """A text under a title, in a <pre>; folded (<details>, its size on the fold) when long or asked to be."""

    title: str
    text: str = ""  # cleaned and cut
    size: str = ""  # of the whole text: "N lines, M characters"
    folded: bool = False
    css: str = ""
    empty: bool = False  # no text (shown as "(empty)")


@dataclass
class Mark:
    """One context's mark on a gold line: its name when it held the line, else as many dots."""

    name: str
    held: bool

    @property
    def blank(self) -> str:
        return "·" * len(self.name)


@dataclass
class DiffLine:
    kind: str  # file, hunk, add, del, or "" (context)
    text: str
    marks: list[Mark] | None = None  # in a covered diff, an added or removed line's marks (None: no mark)
    held_by: str = ""  # the marks in words


@dataclass
class Diff:
    """A unified diff, line by line; no lines: the patch was empty."""

    lines: list[DiffLine]
    covered: bool = False  # the gold patch with its coverage marks


@dataclass
class Tab:
    label: str
    panel: Any  # RolloutPanel or AgentPanel


@dataclass
class Tabs:
    group: str  # the radio buttons' name, unique on the page
    tabs: list[Tab]


@dataclass
class StepView:
    css: str  # step, step fmt (a format error), step fail (a command that failed)
    head: str
    reply: Block
    tool_calls: Block | None = None
    format_error: str | None = None
    action: str | None = None
    command: str | None = None
    output: Block | None = None
    changed: str | None = None
    # An editor step's calls: (what, ok, the edit as a diff of what it asked to replace; None for a view or an undo)
    edits: list[tuple[str, bool, Diff | None]] = field(default_factory=list)


@dataclass
class TrajectoryView:
    """An agent's conversation: its facts, the opening messages, then each step; ``recorded`` False: none."""

    recorded: bool = True
    facts: list[Fact] = field(default_factory=list)
    error: str | None = None
    opening: list[Block] = field(default_factory=list)
    messages: list[Block] = field(default_factory=list)  # the rest of the conversation, when it has no steps
    steps: list[StepView] = field(default_factory=list)
    left_out: str | None = None  # the note where steps were left out to keep the page small
    last_steps: list[StepView] = field(default_factory=list)  # the steps after that note
    submission: Block | None = None


# -- sections -------------------------------------------------------------------------------------------------

@dataclass
class ProblemSection:
    note: str | None
    text: Block | None


@dataclass
class ResultSection:
    source: str
    prediction: Diff
    gold: Diff | None  # None: the dataset was not read
    gold_note: str | None = None  # the coverage marks' legend, or why there are none


@dataclass
class Outcome:
    """FAIL_TO_PASS or PASS_TO_PASS: passed of total, the names that failed or went missing."""

    kind: str
    recorded: bool
    passed: int = 0
    total: int = 0
    groups: list[tuple[str, list[str], int]] = field(default_factory=list)  # (failed/missing, names, more)

    @property
    def good(self) -> bool:
        return self.passed == self.total


@dataclass
class TestRow:
    name: str
    status: str
    css: str
    required: str


@dataclass
class EvalSection:
    recorded: bool
    facts: list[Fact] = field(default_factory=list)
    error: Block | None = None
    outcomes: list[Outcome] = field(default_factory=list)
    near_misses: Block | None = None
    tests: list[TestRow] = field(default_factory=list)
    test_count: str = ""  # how many tests the parser reported; "": none
    tests_left_out: int = 0
    logs: list[Block] = field(default_factory=list)


@dataclass
class RetrievalSection:
    """The retrieval audit's findings on the task's trajectories: whose, at which step, of which kind, the command
    as recorded (cleaned and cut) and why; the imported candidates it could not audit."""

    audited: str  # what was audited, in words
    rows: list[list[str]]  # who, step, kind, command, reason
    unaudited: list[str]


@dataclass
class RolloutPanel:
    facts: list[Fact]
    notes: list[str]
    errors: list[str]
    trajectory: TrajectoryView | None
    patch: Diff


@dataclass
class JuniorsSection:
    rows: list[list[str]]  # the summary table; none: no rollout on record
    tabs: Tabs | None


@dataclass
class CandidateView:
    number: int
    votes: str
    chosen: str
    rollouts: str
    reasons: str
    files: str
    patch: Diff
    test_patch: Diff | None
    reached: str = ""  # its rollouts whose trajectories reached for the answer, and how ("": none)


@dataclass
class PoolSection:
    unreadable: str | None = None
    rollouts: str = ""
    candidate_count: int = 0
    notes: list[str] = field(default_factory=list)
    dropped: Block | None = None
    candidates: list[CandidateView] = field(default_factory=list)


@dataclass
class BriefView:
    facts: list[Fact]
    error: str | None
    analysis: Block
    problems: Block | None
    spans: list[list[str]]


@dataclass
class SeniorSection:
    brief: BriefView | None
    brief_problem: str | None
    context: list[Block] | None  # context.md, a fold per span; None: no context.md
    trajectory: TrajectoryView | None
    trajectory_problem: str | None


@dataclass
class Call:
    number: int
    messages: list[Block]
    reply: Block | None


@dataclass
class PrincipalSection:
    facts: list[Fact] | None = None  # of result.json; None: none readable
    error: str | None = None
    failed: list[str] = field(default_factory=list)
    shown: str | None = None
    problems: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    patch: Diff | None = None


@dataclass
class ReplaySection:
    problem: str | None  # why replay/result.json could not be read
    facts: list[Fact]
    lists: list[tuple[str, list[str]]]  # (what, its items): the files and steps that differ, the notes
    recorded_patch: Diff | None


@dataclass
class SoloSection:
    problem: str | None
    trajectory: TrajectoryView
    patch: Diff | None


@dataclass
class Event:
    time: str
    who: str
    what: str
    text: Block | None


@dataclass
class AgentPanel:
    facts: list[Fact] | None  # its delegation's stage, state and what it could write; None: not delegated
    task: Block | None
    report: Block | None
    problem: str | None
    trajectory: TrajectoryView


@dataclass
class TeamSection:
    problems: list[str]
    settings: list[Fact]
    torn: int
    events: list[Event]
    agents: Tabs | None


@dataclass
class LedgerSection:
    torn: int
    count: int
    rows: list[list[str]]


@dataclass
class Section:
    anchor: str
    title: str
    view: Any = None
    failure: str | None = None  # why it could not be shown


@dataclass
class TaskPage:
    """Everything one task page shows."""

    title: str
    instance_id: str
    back: list[str]
    facts: list[Fact]
    models: list[Fact]
    error: str | None
    cut_note: str | None
    max_tabs: int  # the largest tab group: the page's stylesheet shows that many panels
    sections: list[Section]
    generated: str
    source: str
