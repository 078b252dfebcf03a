"""Every table swepipe prints to a terminal or a log, readable at the width it is printed in.

A grid whose rows fit the width (every cell on one line, no header folded) is printed as a grid. Any other table
is turned: one block per row, headed by its first column ("instance: markroll@4554c23"), then one line per
column ("label  value"); a table of two columns is one such line per row. A value that does not fit beside its
label, or holds several lines, goes on lines of its own below it, wrapped at its spaces. Nothing is cut: every
cell is whole here, and the whole tables are in report.md and report.html.

Without a terminal (a log, CI) Rich prints at $COLUMNS, or 80 columns when it is unset; the rule is the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table as RichTable
from rich.text import Text

from pipeline.text.terminal import literal

_INDENT = 2  # a turned block's lines, under its heading
_VALUE_INDENT = 4  # a value on lines of its own, under its label
_GAP = 2  # between a label and the value beside it


@dataclass
class TerminalTable:
    """A table as plain strings (the first column names the row: it heads the row's block when turned), with
    the notes printed under it. Every string is shown literally (pipeline.text.terminal)."""

    title: str
    headers: Sequence[str]
    rows: Sequence[Sequence[str]]
    notes: Sequence[str] = field(default_factory=tuple)
    right: Iterable[str] = field(default_factory=tuple)  # the headers of columns aligned right in a grid

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        yield Text("")
        if self.title:
            yield literal(self.title, "table.title")
        grid = self._grid()
        if self._fits(grid, console, options, width):
            yield grid
        elif not self.rows:
            yield from _wrapped(console, literal("columns: " + " | ".join(self.headers) + " (no rows)"), 0, width)
        elif len(self.headers) == 2:  # a list of pairs: the headers, then each row, on one line where they fit
            yield from _pairs(console, [literal(self.headers[0]).plain, *(literal(row[0]).plain for row in self.rows)],
                              [literal(self.headers[1], "bold"), *(literal(row[1]) for row in self.rows)], width, 0)
        else:
            yield from self._turned(console, width)
            if self.notes:
                yield Text("")
        for note in self.notes:
            yield literal(note, "dim")

    def _grid(self) -> RichTable:
        right = set(self.right)
        grid = RichTable(show_lines=False)
        for header in self.headers:
            grid.add_column(literal(header), no_wrap=True, justify="right" if header in right else "left")
        for row in self.rows:
            grid.add_row(*(literal(cell) for cell in row))
        return grid

    def _fits(self, grid: RichTable, console: Console, options: ConsoleOptions, width: int) -> bool:
        if any("\n" in literal(cell).plain for row in self.rows for cell in row):
            return False
        if any("\n" in literal(header).plain for header in self.headers):
            return False
        return grid.__rich_measure__(console, options.update(width=10**6)).maximum <= width

    def _turned(self, console: Console, width: int) -> RenderResult:
        labels = [literal(header).plain for header in self.headers]
        for row in self.rows:
            yield Text("")
            first = literal(row[0] if row else "").plain
            heading = literal(f"{labels[0]}: {first}" if labels and labels[0].strip() else first, "bold")
            yield from _wrapped(console, heading, 0, width)
            yield from _pairs(console, labels[1:], [literal(cell) for cell in row[1:]], width, _INDENT)


def _pairs(console: Console, labels: list[str], values: list[Text], width: int, indent: int) -> Iterable[Text]:
    """One line per label and its value, the values aligned; a value that does not fit beside its label, or holds
    several lines, on lines of its own below it. A pair with nothing in it is left out; a label with no value is
    shown alone (the label may be all a row holds)."""
    label_width = min(max((cell_len(label) for label in labels), default=0), max(width // 3, 8))
    for label, value in zip(labels, values, strict=False):
        if not value.plain.strip():
            if label.strip():
                yield from _wrapped(console, Text(" " * indent + label), 0, width)
            continue
        beside = indent + label_width + _GAP + cell_len(value.plain)
        if "\n" not in value.plain and cell_len(label) <= label_width and beside <= width:
            yield Text(" " * indent + label + " " * (label_width + _GAP - cell_len(label))).append_text(value)
        else:
            yield from _wrapped(console, Text(label, style="italic"), indent, width)
            yield from _wrapped(console, value, indent + _VALUE_INDENT - _INDENT, width)


def _wrapped(console: Console, text: Text, indent: int, width: int) -> Iterable[Text]:
    """``text`` on lines of its own, ``indent`` spaces in, wrapped at its spaces (a word longer than a line is
    folded: it has no space to wrap at)."""
    for line in text.wrap(console, max(width - indent, 1), overflow="fold", no_wrap=False):
        line.rstrip()
        yield Text(" " * indent) + line if line.plain else line

