"""Tables and figures as Markdown (report.md, for terminals), HTML (one offline file, templates/report.html) or rich
tables."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass

from pipeline.report.tables import Table
from pipeline.report.templating import render

@dataclass
class Cell:
    """A table cell of the HTML report: its text, and the spaces it starts with (kept, as non-breaking)."""

    text: str
    indent: int = 0


@dataclass
class Row:
    cells: list[Cell]
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
    parts = [f"# {title}", ""] + ([*lead, ""] if lead else [])
    for table in tables:
        parts += [f"## {table.title}", ""]
        if table.rows:
            parts.append("| " + " | ".join(_md(h) for h in table.headers) + " |")
            parts.append("|" + "|".join("---" for _ in table.headers) + "|")
            for row, href in zip(table.rows, _row_links(table, links)):
                cells = [_md(c) for c in row]
                if href and cells:
                    cells[0] = f"[{cells[0]}]({href})"
                parts.append("| " + " | ".join(cells) + " |")
            parts.append("")
        parts += [f"_{note}_" + "  " for note in table.notes]
        parts.append("")
    if figures:
        parts += ["## Figures", ""]
        parts += [f"![{caption}]({path})\n" for caption, path in figures.items()]
    return "\n".join(parts).rstrip() + "\n"


def html_page(title: str, tables: list[Table], figures: dict[str, bytes], lead: list[str] | None = None,
              links: dict[tuple[int, str], str] | None = None, generated: str | None = None) -> str:
    """One self-contained page: the figures are embedded as base64 PNG, nothing is fetched. ``links``: as for
    ``markdown``, the task pages beside it; ``generated``: the time it says it was made (default now)."""
    return render("report.html", view=report_view(title, tables, figures, lead, links, generated))


def report_view(title: str, tables: list[Table], figures: dict[str, bytes], lead: list[str] | None = None,
                links: dict[tuple[int, str], str] | None = None, generated: str | None = None) -> ReportView:
    shown = [TableView(table.title, list(table.headers),
                       [Row([_cell(c) for c in row], href) for row, href in zip(table.rows, _row_links(table, links))],
                       list(table.notes))
             for table in tables]
    pictures = [Figure(caption, "data:image/png;base64," + base64.b64encode(png).decode("ascii"))
                for caption, png in figures.items()]
    return ReportView(title, list(lead or []), shown, pictures, generated or time.strftime("%Y-%m-%d %H:%M:%S"))


def rich_table(table: Table):
    from rich.table import Table as RichTable

    shown = RichTable(title=table.title, title_justify="left", show_lines=False)
    for number, header in enumerate(table.headers):
        shown.add_column(header, overflow="fold", no_wrap=number == 0)
    for row in table.rows:
        shown.add_row(*row)
    if not table.notes:
        return shown
    from rich.console import Group
    from rich.text import Text

    return Group(shown, *(Text(note, style="dim") for note in table.notes), Text(""))


def _row_links(table: Table, links: dict[tuple[int, str], str] | None) -> list[str | None]:
    if not links or not table.row_tasks or len(table.row_tasks) != len(table.rows):
        return [None] * len(table.rows)
    return [links.get(key) for key in table.row_tasks]


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _cell(text: str) -> Cell:
    indent = len(text) - len(text.lstrip(" "))
    return Cell(text[indent:], indent)
