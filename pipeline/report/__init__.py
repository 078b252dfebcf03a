"""Reports over run directories: resolve rate against dollars, coverage of the gold patch, figures.

load (a run on disk) -> stats / coverage (numbers) -> tables / figures -> render (Markdown, HTML, terminal);
team (records, summaries, cells) and team_figures read, count and draw what team runs record; build puts them
together. Nothing here calls a model or Docker.
"""

from pipeline.report.build import Report, build_report, write_report
from pipeline.report.coverage import GoldEdits, RunCoverage, TaskCoverage, gold_edits, run_coverage, task_coverage
from pipeline.report.load import RunData, TaskRecord, load_run
from pipeline.report.stats import RunStats, bootstrap_interval, efficiency, run_stats

__all__ = [
    "GoldEdits", "Report", "RunCoverage", "RunData", "RunStats", "TaskCoverage", "TaskRecord", "bootstrap_interval",
    "build_report", "efficiency", "gold_edits", "load_run", "run_coverage", "run_stats", "task_coverage",
    "write_report",
]
