"""Tables and figures as Markdown (report.md, for terminals), HTML (one offline file) or rich tables."""

from __future__ import annotations

import base64
import html
import time

from pipeline.report.tables import Table

_CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2em auto; max-width: 1200px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.88em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } tr:nth-child(even) td { background: #fafafa; }
td:first-child { white-space: nowrap; }
.note { color: #555; font-size: 0.85em; margin: 0.2em 0; }
figure { margin: 1em 0; } img { max-width: 100%; border: 1px solid #eee; }
"""


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
    body = [f"<h1>{html.escape(title)}</h1>", *(f"<p>{html.escape(line)}</p>" for line in lead or [])]
    for table in tables:
        body.append(f"<h2>{html.escape(table.title)}</h2>")
        if table.rows:
            body.append("<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in table.headers)
                        + "</tr></thead><tbody>")
            for row, href in zip(table.rows, _row_links(table, links)):
                cells = [_html_cell(c) for c in row]
                if href and cells:
                    cells[0] = f'<a href="{html.escape(href)}">{cells[0]}</a>'
                body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
            body.append("</tbody></table>")
        body += [f'<p class="note">{html.escape(note)}</p>' for note in table.notes]
    if figures:
        body.append("<h2>Figures</h2>")
        for caption, png in figures.items():
            data = base64.b64encode(png).decode("ascii")
            body.append(f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
                        f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    generated = generated or time.strftime("%Y-%m-%d %H:%M:%S")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(body)
            + f'\n<p class="note">generated {generated} by swepipe report</p></body></html>\n')


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


def _html_cell(text: str) -> str:
    indent = len(text) - len(text.lstrip(" "))
    return "&nbsp;" * indent + html.escape(text[indent:])
