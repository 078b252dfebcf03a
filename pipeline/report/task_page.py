"""One offline HTML page per task of a run: what every agent saw, did and cost, and how the result was scored.

Built only from what the run directory holds (docs/run-layout.md), and from the dataset's problem statement
and gold patch when the report could read them: task_build makes the page's view (task_view) from what the loader
read, templates/task_page.html renders it. Each page is self-contained: the stylesheet inlined, tabs in CSS alone, no
script (a Content-Security-Policy forbids any), nothing fetched. Everything that came from a model, a repository
or a test run is HTML-escaped (templating.shown), so a reply holding ``<script>`` or ``</details>`` shows as text.
Pages stay quick to open in a run of hundreds of tasks: a page holds its own task only, long texts are folded
(``<details>``) and cut with a note, and a page that would pass MAX_PAGE_BYTES is made again with smaller cuts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from pipeline.analysis.load import RunData, TaskData
from pipeline.report.task_build import build_task_view
from pipeline.report.templating import render
from pipeline.rundir.layout import ReportFiles, file_name_part
from pipeline.rundir.storage import write_text_atomic

MAX_PAGE_BYTES = 5_000_000
CUTS = (20_000, 4_000, 1_000, 300)  # characters kept of one long text, tried in turn until the page fits


@dataclass
class PageSet:
    """Where the task pages of a report go: ``<run-id>/<instance id>.html`` in its task pages' folder."""

    files: ReportFiles

    @property
    def directory(self) -> Path:
        return self.files.task_pages

    def href(self, run_folder: str, instance_id: str) -> str:
        """The link from the report to a task page, relative to the report."""
        page = self.path(run_folder, instance_id).relative_to(self.files.root)
        return "/".join(quote(part) for part in page.parts)

    def path(self, run_folder: str, instance_id: str) -> Path:
        return self.files.task_page(run_folder, instance_id)


def run_folders(runs: list[RunData]) -> list[str]:
    """A folder name per run (its run id; a second run of the same name gets -2, ...)."""
    names: list[str] = []
    for run in runs:
        name = file_name_part(run.run_id) or "run"
        base, n = name, 1
        while name in names:
            n += 1
            name = f"{base}-{n}"
        names.append(name)
    return names


def write_task_pages(runs: list[RunData], files: ReportFiles, gold: dict[str, str] | None = None,
                     problems: dict[str, str] | None = None) -> dict[tuple[int, str], str]:
    """Write a page for every finished task of every run beside the report in ``files``; returns
    (run index, instance id) -> the link from report.html."""
    pages = PageSet(files)
    back = [f"../../{quote(files.html.name)}"]
    links: dict[tuple[int, str], str] = {}
    for number, (run, folder) in enumerate(zip(runs, run_folders(runs), strict=True)):
        for task in run.tasks:
            path = pages.path(folder, task.instance_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, task_page(run, task, (gold or {}).get(task.instance_id),
                                              (problems or {}).get(task.instance_id), back=back))
            links[(number, task.instance_id)] = pages.href(folder, task.instance_id)
    return links


def task_page(run: RunData, task: TaskData, gold_patch: str | None = None, problem: str | None = None,
              back: list[str] | None = None) -> str:
    """The page of one task; made again with smaller cuts while it is over MAX_PAGE_BYTES."""
    page = ""
    for level, cut in enumerate(CUTS):
        view = build_task_view(run, task, gold_patch, problem, cut, last=level == len(CUTS) - 1, back=back)
        page = render("task_page.html", page=view)
        if len(page.encode("utf-8")) <= MAX_PAGE_BYTES:
            break
    return page

