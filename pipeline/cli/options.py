"""Options shared by the commands, declared once so that they read the same everywhere, each in its --help panel
(pipeline.cli.help): task selection, models, strategy and config, execution, scoring, the run directory. A command
lists the ones it takes in its own signature and makes of the task-selection and scoring ones one value each
(TaskSelection.chosen, pipeline.evaluation.options.ScoringOptions)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from pipeline.cli.help import CONFIG, EXECUTION, MODELS, OUTPUT, SCORING, STRATEGY, TASKS
from pipeline.errors import SwepipeError
from pipeline.evaluation.logs import LOG_LIMIT
from pipeline.evaluation.profiles import DEFAULT_PROFILE  # noqa: F401 - the commands' default, opt.DEFAULT_PROFILE
from pipeline.tasks import Task, TaskFilter, load_tasks, parse_instance_ids
from pipeline.tasks.datasets import BUNDLED

DEFAULT_DATASET = BUNDLED
DEFAULT_LOG_MB = LOG_LIMIT / 1e6

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

    @classmethod
    def chosen(cls, context: typer.Context | None, **options) -> TaskSelection:
        """The selection a command's task-selection ``options`` make, noting which of them the command line set
        (``context``: the command's)."""
        return cls(**options, given=_given_on_command_line(context, options))

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
Timeout = Annotated[Optional[float], typer.Option(
    help="Seconds one instance's tests may take before it counts as a timeout (default: the scoring profile's).")]
ScoringProfileName = Annotated[str, typer.Option(
    "--scoring-profile", help="The resources and time limit of the tests, recorded in each result.json: local "
                              "(plain local Docker: no CPU cap, 1800 s) or official (the official grader's "
                              "sandbox: 4 CPUs, 30 GiB, 3600 s; capped at this machine).")]
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


SoloModel = Annotated[Optional[str], typer.Option(help="litellm model string for the solo agent.")]
LeadModel = Annotated[Optional[str], typer.Option(help="litellm model string for the team's lead.")]
WorkerModel = Annotated[Optional[str], typer.Option(help="litellm model string for the team's workers.")]
StrategyName = Annotated[Optional[str], typer.Option(
    help="pipeline, solo, team, vote, or a Strategy class as package.module:Class (default from config: "
         "pipeline).")]
PrintConfig = Annotated[bool, typer.Option(
    "--print-config", help="Print the resolved config (every option, its value and what it means) as YAML, and "
                           "run nothing.")]
Set = Annotated[Optional[list[str]], typer.Option(
    "--set", metavar="PATH=VALUE",
    help="Set any option of the config, e.g. --set team.mode=async --set budgets.per_task=2 (repeatable; "
         "--print-config lists every option). The flags above are shortcuts for the commonest ones.")]


def _in_panel(panel: str, *declarations) -> None:
    for declaration in declarations:
        declaration.__metadata__[0].rich_help_panel = panel


_in_panel(TASKS, Dataset, Split, InstanceIds, Repo, Language, Limit, Slice, Shuffle, Seed)
_in_panel(MODELS, JuniorModel, SeniorModel, PrincipalModel, SoloModel, LeadModel, WorkerModel)
_in_panel(STRATEGY, StrategyName)
_in_panel(CONFIG, ConfigFile, Set, PrintConfig)
_in_panel(EXECUTION, Executor, RayAddress, ImageTemplate, Platform)
_in_panel(SCORING, RunScripts, Dockerfiles, Timeout, ScoringProfileName, EvalNetwork, EvalLogMb, OutageSeconds)
_in_panel(OUTPUT, RunsDir)


# A shortcut flag -> the config path it sets.
SHORTCUTS = {"junior_model": ("models.junior.model", "--junior-model"),
             "senior_model": ("models.senior.model", "--senior-model"),
             "principal_model": ("models.principal.model", "--principal-model"),
             "solo_model": ("models.solo.model", "--solo-model"), "lead_model": ("models.lead.model", "--lead-model"),
             "worker_model": ("models.worker.model", "--worker-model"), "strategy": ("strategy", "--strategy"),
             "k": ("juniors.k", "-k"), "max_steps": ("limits.max_steps", "--max-steps"),
             "executor": ("executor.kind", "--executor"), "ray_address": ("executor.ray_address", "--ray-address")}


def config_assignments(sets: list[str] | None, **flags):
    """The command line's changes to the config, in one list (pipeline.settings.config_overlay): the shortcut flags
    given (``flags``, by SHORTCUTS name), then every ``--set``. A flag and a --set giving one option two values is
    refused: which one was meant cannot be known."""
    from pipeline.settings.config_overlay import flag, parse_set

    given = [flag(SHORTCUTS[name][0], value, f"{SHORTCUTS[name][1]} {value}")
             for name, value in flags.items() if value is not None]
    settings = [parse_set(text) for text in sets or []]
    for shortcut in given:
        for setting in settings:
            if setting.path == shortcut.path and setting.value != shortcut.value:
                raise SwepipeError(f"{shortcut.given} and {setting.given} both set {shortcut.dotted}; give one")
    return [*given, *settings]


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

