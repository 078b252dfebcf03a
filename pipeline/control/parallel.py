"""Running work items on a thread pool behind a progress bar, stopping cleanly on Ctrl-C."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pipeline.control import stopping

STOP_GRACE = 5.0  # seconds running work gets, once a stop is requested, to notice it and save


def progress_bar(label: str, show: bool = True) -> Progress:
    """The progress bar every executor shows: label, bar, done/total, a description, elapsed time."""
    columns = (TextColumn(label, style="bold", markup=False), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.description}", markup=False), TimeElapsedColumn())  # text, not Rich markup
    return Progress(*columns, disable=not show)


def run_with_progress(label: str, items: Iterable, work: Callable, *, workers: int, total: int,
                      done_already: int = 0, describe: Callable[[], str] = lambda: "",
                      show: bool = True) -> None:
    """Call ``work(item)`` for every item, ``workers`` at a time; a worker's exception stops the run.

    The wait polls, so Ctrl-C reaches the main thread at once. On a stop (pipeline.control.stopping) queued
    items are cancelled and running ones get a few seconds to notice and save; threads still blocked
    after that (in a model call) are abandoned, not waited for.
    """
    with progress_bar(label, show) as progress:
        bar = progress.add_task(describe(), total=total, completed=done_already)
        executor = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix=label)
        try:
            pending = {executor.submit(work, item) for item in items}
            while pending:
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in done:
                    future.result()
                    progress.update(bar, advance=1)
                progress.update(bar, description=describe())  # also while nothing finishes (an outage's wait)
        finally:
            stopping_now = stopping.requested()
            executor.shutdown(wait=not stopping_now, cancel_futures=True)
            if stopping_now:
                wait(pending, timeout=STOP_GRACE)
