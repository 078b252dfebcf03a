"""A session of a run opened as `swepipe run` opens it (pipeline.run.lifecycle), for tests that need a run's
settings without running its tasks through the command line."""

from __future__ import annotations

from pathlib import Path

from pipeline.run.lifecycle import Run, RunRequest
from pipeline.run.task import RunSettings
from pipeline.settings.config import RunConfig


def request(config: RunConfig, run_id: str, runs_dir: Path, dataset: str = "bundled", **options) -> RunRequest:
    return RunRequest(config=config, run_id=run_id, runs_dir=runs_dir, dataset=dataset, **options)


def session(config: RunConfig, run_id: str, runs_dir: Path, dataset: str = "bundled", **options) -> RunSettings:
    """The settings of one session of the run, opened and closed again (its lock given back, as when the session's
    process ends); what it checks and writes on opening is done."""
    with Run.open(request(config, run_id, runs_dir, dataset, **options)) as run:
        return run.settings
