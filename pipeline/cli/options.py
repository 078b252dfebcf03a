"""Options shared by every command that takes tasks, so they read the same everywhere."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from dataclasses import dataclass
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


@dataclass(frozen=True)
class TaskSelection:
    """The task-selection options of a command, as one value."""

    dataset: str = DEFAULT_DATASET
    split: str = "test"
    instance_ids: str | None = None
    repo: str | None = None
    language: str | None = None
    limit: int | None = None
    slice_: str | None = None
    shuffle: bool = False
    seed: int = 0
    given: frozenset[str] = frozenset()  # the options set on the command line, not left at their defaults

    def for_run(self, run_root: Path, announce=None) -> TaskSelection:
        """The selection for a command on the run at ``run_root``: the run's recorded dataset and split
        (pipeline.run.run_dataset) unless --dataset or --split was given; announced when it changes anything."""
        from pipeline.run.run_dataset import recorded_dataset

        recorded = recorded_dataset(run_root)
        if recorded is None or self.given & {"dataset", "split"}:
            return self
        chosen = dataclasses.replace(self, dataset=recorded.dataset, split=recorded.split or self.split)
        if announce and (chosen.dataset, chosen.split) != (self.dataset, self.split):
            announce(f"tasks from {recorded.describe()}, as run {run_root.name} recorded")
        return chosen

    def load(self) -> list[Task]:
        """Load the dataset and apply the filters; filters are checked before the dataset is read."""
        task_filter = TaskFilter(
            instance_ids=parse_instance_ids(self.instance_ids) if self.instance_ids else None,
            repo=self.repo, language=self.language, limit=self.limit, slice=self.slice_, shuffle=self.shuffle,
            seed=self.seed,
        )
        return task_filter.apply(load_tasks(self.dataset, self.split))


_SELECTION_OPTIONS = {"dataset": Dataset, "split": Split, "instance_ids": InstanceIds, "repo": Repo,
                      "language": Language, "limit": Limit, "slice_": Slice, "shuffle": Shuffle, "seed": Seed}
ALL_FILTERS = tuple(_SELECTION_OPTIONS)


def selects_tasks(*names: str):
    """Give a command the task-selection options ``names`` (default: all); it receives them as
    ``selection: TaskSelection``. Declared here once, shown in each command's --help."""
    names = names or ALL_FILTERS
    defaults = TaskSelection()

    def wrap(command):
        own = inspect.signature(command, eval_str=True)
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=getattr(defaults, name),
                                   annotation=_SELECTION_OPTIONS[name]) for name in names]
        kept = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own.parameters.values()
                if p.name != "selection"]
        context = inspect.Parameter(_CONTEXT, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)

        @functools.wraps(command)
        def with_selection(**options):
            chosen = {name: options.pop(name) for name in names}
            given = _given_on_command_line(options.pop(_CONTEXT, None), names)
            return command(selection=TaskSelection(**chosen, given=given), **options)

        del with_selection.__wrapped__  # typer must read the signature below, not the command's
        signature = own.replace(parameters=[*added, *kept, context])
        with_selection.__signature__ = signature
        with_selection.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
        return with_selection

    return wrap


_CONTEXT = "_typer_context"  # the command's context, which typer passes to a parameter of this type


def _given_on_command_line(context: typer.Context | None, names) -> frozenset[str]:
    """Which of ``names`` the command line (or the environment) set; all of them when there is no context to ask
    (the command called as a function), so that nothing is then taken from a run's record instead."""
    if context is None:
        return frozenset(names)
    sources = {name: context.get_parameter_source(name) for name in names}
    return frozenset(name for name, source in sources.items() if source is not None and source.name != "DEFAULT")


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
EvalNetwork = Annotated[bool, typer.Option(
    "--eval-network", help="Give the scoring containers the network (off by default, as for agents), for tasks "
                           "whose tests need it; recorded in each result.json.")]
EvalLogMb = Annotated[float, typer.Option(
    "--eval-log-mb", help="Megabytes kept of each scoring log (stdout.log, stderr.log, entry.log): past it, its "
                          "head and tail, with a note of what was cut (the tests' parser still reads it whole).")]
OutageSeconds = Annotated[float, typer.Option(
    help="Docker failing this long while scoring stops the scoring as a stop does (exit 1; the same command "
         "resumes it); shorter failures pause the scoring and are waited out.")]
Platform = Annotated[Optional[str], typer.Option(
    help="Docker platform, e.g. linux/amd64 (the official images are amd64 only).")]
RunsDir = Annotated[Path, typer.Option(help="Where run directories live.")]
ConfigFile = Annotated[Optional[Path], typer.Option(
    "--config", help="YAML run configuration (models, budgets, limits).")]
JuniorModel = Annotated[Optional[str], typer.Option(help="litellm model string for the junior role.")]
SeniorModel = Annotated[Optional[str], typer.Option(
    help="litellm model string for the senior role; none: no senior call, the principal gets the candidates and "
         "the code expansion (an ablation).")]
PrincipalModel = Annotated[Optional[str], typer.Option(
    help="litellm model string for the principal role; none: no frontier call, the senior's chosen candidate (else "
         "the most-voted that applies) is submitted (an ablation).")]
Executor = Annotated[Optional[str], typer.Option(
    "--executor", help="Where tasks run: threads (this machine) or ray (a Ray cluster; pip install 'swepipe[ray]'; "
                       "default from config: threads).")]
RayAddress = Annotated[Optional[str], typer.Option(
    "--ray-address", help="The Ray cluster: auto (the one `ray start` began on this machine), host:port or "
                          "ray://host:port (default from config: auto).")]


def executor_settings(base, executor: str | None, ray_address: str | None):
    """``base`` (an ExecutorConfig) with the executor flags on top, checked as the config file's values are."""
    from pydantic import ValidationError

    from pipeline.errors import SwepipeError

    given = {key: value for key, value in (("kind", executor), ("ray_address", ray_address)) if value is not None}
    if not given:
        return base
    try:
        return type(base).model_validate({**base.model_dump(), **given})
    except ValidationError as error:
        raise SwepipeError("; ".join(f"--executor/--ray-address: {e['msg']}" for e in error.errors())) from None


def with_executor(cfg, executor: str | None, ray_address: str | None):
    """``cfg`` with the executor flags on top (``executor_settings``)."""
    return cfg.model_copy(update={"executor": executor_settings(cfg.executor, executor, ray_address)})
