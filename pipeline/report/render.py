"""Tables and figures as Markdown (report.md, for terminals), HTML (one offline file, templates/report.html) or rich
tables."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass

from pipeline.analysis.table import Table
from pipeline.report import markdown_text as md
from pipeline.report.templating import render
from pipeline.text.printable import clean


@dataclass
class TableCell:
    """A table cell of the HTML report: its text, and the spaces it starts with (kept, as non-breaking)."""

    text: str
    indent: int = 0


@dataclass
class Row:
    cells: list[TableCell]
    href: str | None = None  # the task page its first cell links to


@dataclass
class TableView:
    title: str
    headers: list[str]
    rows: list[Row]
    notes: list[str]


@dataclass
class Figure:
    caption: str
    src: str  # the PNG as a data: URL


@dataclass
class ReportView:
    """Everything report.html shows (templates/report.html)."""

    title: str
    lead: list[str]
    tables: list[TableView]
    figures: list[Figure]
    generated: str


def markdown(title: str, tables: list[Table], figures: dict[str, str], lead: list[str] | None = None,
             links: dict[tuple[int, str], str] | None = None) -> str:
    """``figures`` maps a caption to the image's path relative to the Markdown file; ``links`` (run number,
    instance id) to a task page's path relative to it (the first cell of a task's row links there)."""
    parts = [f"# {md.inline(title)}", ""] + ([*map(md.line, lead), ""] if lead else [])
    for table in tables:
        parts += [f"## {md.inline(table.title)}", ""]
        if table.rows:
            parts.append("| " + " | ".join(md.inline(h) for h in table.headers) + " |")
            parts.append("|" + "|".join("---" for _ in table.headers) + "|")
            for row, href in zip(table.rows, _row_links(table, links), strict=True):
                cells = [md.inline(c) for c in row]
                if href and cells:
                    cells[0] = f"[{cells[0]}]({href})"
                parts.append("| " + " | ".join(cells) + " |")
            parts.append("")
        parts += [_md_note(note) + "  " for note in table.notes]
        parts.append("")
    if figures:
        parts += ["## Figures", ""]
        parts += [f"![{md.inline(caption)}]({path})\n" for caption, path in figures.items()]
    return "\n".join(parts).rstrip() + "\n"


def html_page(title: str, tables: list[Table], figures: dict[str, bytes], lead: list[str] | None = None,
              links: dict[tuple[int, str], str] | None = None, generated: str | None = None) -> str:
    """One self-contained page: the figures are embedded as base64 PNG, nothing is fetched. ``links``: as for
    ``markdown``, the task pages beside it; ``generated``: the time it says it was made (default now)."""
    return render("report.html", view=report_view(title, tables, figures, lead, links, generated))


def report_view(title: str, tables: list[Table], figures: dict[str, bytes], lead: list[str] | None = None,
                links: dict[tuple[int, str], str] | None = None, generated: str | None = None) -> ReportView:
    shown = [TableView(table.title, list(table.headers),
                       [Row([_cell(c) for c in row], href)
                        for row, href in zip(table.rows, _row_links(table, links), strict=True)],
                       list(table.notes))
             for table in tables]
    pictures = [Figure(caption, "data:image/png;base64," + base64.b64encode(png).decode("ascii"))
                for caption, png in figures.items()]
    return ReportView(title, list(lead or []), shown, pictures, generated or time.strftime("%Y-%m-%d %H:%M:%S"))


def rich_table(table: Table):
    """The table for a terminal; every text in it shown literally, whatever console prints it."""
    from pipeline.text.terminal_table import TerminalTable

    return TerminalTable(table.title, table.headers, table.rows, table.notes)


def _row_links(table: Table, links: dict[tuple[int, str], str] | None) -> list[str | None]:
    if not links or not table.row_tasks or len(table.row_tasks) != len(table.rows):
        return [None] * len(table.rows)
    return [links.get(key) for key in table.row_tasks]


def _md_note(note: str) -> str:
    """A table's note, in italics (unless its ends are blank: the underscores would then show)."""
    text = md.inline(note)
    return f"_{text}_" if text and text == text.strip() else md.line(note)


def _cell(text: str) -> TableCell:
    text = text if isinstance(text, str) else clean(text)  # a value read from a file may be any JSON
    indent = len(text) - len(text.lstrip(" "))
    return TableCell(text[indent:], indent)
