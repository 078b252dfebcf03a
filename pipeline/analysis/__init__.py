"""Analyses of runs already on disk, computed from their records alone (no model call, no container): a run read
(``load``) and counted (``stats``), coverage of the gold patch (``coverage``), paired comparisons (``compare``),
repeats (``repeats``), what other policies would have cost and resolved (``whatif_data``, ``repricing``,
``whatif``), and the team analysis (``team``). Their results are numbers and plain-string tables (``table``); the
run report (``pipeline.report``) draws and renders them.

Layer rule (tests/test_imports.py): no module here imports a stage package (agent, juniors, senior, principal,
team, strategies, evaluation, runtime, models, run) when it is imported; what a stage decides reaches an analysis
through the records it wrote.
"""

from pipeline.analysis.coverage import GoldEdits, RunCoverage, TaskCoverage, gold_edits, run_coverage, task_coverage
from pipeline.analysis.load import RunData, TaskData, load_run
from pipeline.analysis.stats import RunStats, bootstrap_interval, efficiency, run_stats

__all__ = [
    "GoldEdits", "RunCoverage", "RunData", "RunStats", "TaskCoverage", "TaskData", "bootstrap_interval",
    "efficiency", "gold_edits", "load_run", "run_coverage", "run_stats", "task_coverage",
]
