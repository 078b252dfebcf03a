"""Options shared by every command that takes tasks, so they read the same everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pipeline.datasets import BUNDLED
from pipeline.tasks import Task, TaskFilter, load_tasks, parse_instance_ids

DEFAULT_DATASET = BUNDLED

Dataset = Annotated[str, typer.Option(
    "--dataset", "-d",
    help="'bundled' (the tasks shipped with swepipe), a .jsonl/.json/.csv/.parquet file, or a Hugging Face "
         "dataset such as ScaleAI/SWE-bench_Pro.")]
Split = Annotated[str, typer.Option(help="Split of a Hugging Face dataset.")]
InstanceIds = Annotated[Optional[str], typer.Option(
    "--instance-ids", help="Comma-separated instance ids, or @FILE with one id a line.")]
Repo = Annotated[Optional[str], typer.Option(help="Only tasks of this repository (owner/name).")]
Language = Annotated[Optional[str], typer.Option(help="Only tasks in this language: python, go, js, ts.")]
Limit = Annotated[Optional[int], typer.Option(help="At most this many tasks (after the other filters).")]
Slice = Annotated[Optional[str], typer.Option("--slice", help="Python-style slice A:B of the selected tasks.")]
Shuffle = Annotated[bool, typer.Option(help="Shuffle the selected tasks before slicing and limiting.")]
Seed = Annotated[int, typer.Option(help="Seed for --shuffle.")]


def select_tasks(dataset: str, split: str, instance_ids: str | None, repo: str | None, language: str | None,
                 limit: int | None, slice_: str | None, shuffle: bool, seed: int) -> list[Task]:
    """Load a dataset and apply the filters; filters are checked before the dataset is read."""
    task_filter = TaskFilter(
        instance_ids=parse_instance_ids(instance_ids) if instance_ids else None,
        repo=repo, language=language, limit=limit, slice=slice_, shuffle=shuffle, seed=seed,
    )
    return task_filter.apply(load_tasks(dataset, split))


ImageTemplate = Annotated[Optional[str], typer.Option(
    help="Image name from task fields, e.g. 'jefzda/sweap-images:{dockerhub_tag}' (the default for Hub "
         "datasets); bundled tasks default to their local images.")]
RunScripts = Annotated[Optional[Path], typer.Option(
    help="Directory laid out as DIR/<instance_id>/{run_script.sh,parser.py} (the official run_scripts/); "
         "bundled tasks carry their own.")]
Dockerfiles = Annotated[Optional[Path], typer.Option(
    help="Directory with base_dockerfile/<id>/Dockerfile and instance_dockerfile/<id>/Dockerfile whose ENV "
         "lines are exported before the tests, as the official harness does.")]
Timeout = Annotated[float, typer.Option(help="Seconds one instance's tests may take before it counts as a timeout.")]
Platform = Annotated[Optional[str], typer.Option(help="Docker platform, e.g. linux/amd64 (the official images are amd64 only).")]
ConfigFile = Annotated[Optional[Path], typer.Option("--config", help="YAML run configuration (models, budgets, limits).")]
JuniorModel = Annotated[Optional[str], typer.Option(help="litellm model string for the junior role.")]
SeniorModel = Annotated[Optional[str], typer.Option(help="litellm model string for the senior role.")]
PrincipalModel = Annotated[Optional[str], typer.Option(help="litellm model string for the principal role.")]
