"""An analysis's result as a table of plain strings, so Markdown, HTML and the terminal show the same thing, and the
cell formats every table shares (money, percent, seconds, counts, n/a; a short task id is pipeline.text.printable's)."""

from __future__ import annotations

from dataclasses import dataclass, field

NA = "n/a"


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    row_tasks: list[tuple[int, str]] | None = None  # (run number in the report, instance id) per row: its task page


def elided(label: str, width: int) -> str:
    """A label (a run id, a model's name, a title) cut to ``width`` characters for a figure; a task's id is
    shortened by printable.short_id instead, the same way everywhere."""
    return label if len(label) <= width else label[: width - 1] + "…"


def money(value: float | None) -> str:
    if value is None:
        return NA
    return f"${value:.4f}" if abs(value) < 10 else f"${value:,.2f}"


def percent(value: float | None) -> str:
    return NA if value is None else f"{value:.1%}"


def seconds(value: float | None) -> str:
    if value is None:
        return NA
    return f"{value:.1f} s" if value < 120 else f"{value / 60:.1f} min" if value < 7200 else f"{value / 3600:.1f} h"


def count(value: float | None) -> str:
    return NA if value is None else f"{value:,.0f}"


UNKNOWN = "?"  # a task's repository or language when the dataset was not read


def by_repository_and_language(items: list, ids: list[str], meta: dict[str, tuple[str, str]]):
    """("repo" or "language", its name, the items of its tasks), by repository then by language; ``ids`` are the
    items' instance ids, ``meta`` instance id -> (repository, language)."""
    for kind, position in (("repo", 0), ("language", 1)):
        members: dict[str, list] = {}
        for item, instance_id in zip(items, ids, strict=True):
            members.setdefault(meta.get(instance_id, (UNKNOWN, UNKNOWN))[position] or UNKNOWN, []).append(item)
        for name, grouped in sorted(members.items()):
            yield kind, name, grouped
