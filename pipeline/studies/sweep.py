"""`swepipe sweep`: a grid of team configurations (and their solo baselines) over one task set.

Each cell of the grid is an ordinary run directory under ``<runs-dir>/<sweep-id>/<cell>``, run through the
same path as ``swepipe run`` (``Run.open`` + ``run_tasks``), so it resumes, stops and is scored the same
way; ``sweep.json`` in the sweep's directory lists the cells, their values, run directories and status.
Nothing is shared between cells (each pays for its own agents), and a cell's config is fixed once it ran:
a rerun that would change it is refused instead of mixing two configurations in one run directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from pipeline.control import stopping
from pipeline.errors import InfrastructureFault, SwepipeError
from pipeline.run.lock import lock_run
from pipeline.run.run_dataset import record_dataset
from pipeline.rundir.layout import RunLayout, SweepLayout
from pipeline.rundir.storage import write_json_atomic
from pipeline.settings.config import RunConfig, SoloConfig
from pipeline.settings.model_spec import ModelSpec, Role
from pipeline.studies.manifest import read_manifest
from pipeline.tasks import Task

if TYPE_CHECKING:
    from pipeline.run.lifecycle import RunRequest

AXES = ("sizes", "stages", "modes", "lead_models", "worker_models", "lead_prompts", "solo_prompts", "editors")
GRID_KEYS = (*AXES, "sizing")
STAGES = ("planning", "implementation", "verification", "all")
MODES = ("blocking", "async")
PROMPTS = ("minimal", "piv")
SIZINGS = ("fixed", "lead")
MAX_SIZE = 16
# What a cell's identity does not include: a rerun may raise a budget or change container limits.
NOT_IDENTITY = ("budgets", "containers")
LOCAL = "local model"


@dataclass(frozen=True)
class ModelChoice:
    """One value of a model axis: a model string (from the command line), a full spec (from a grid file), or
    None for the config's own model of that role (the local model when the config has none)."""

    spec: ModelSpec | None
    from_cli: bool = False  # a bare model string: the config's other options of the role are kept

    @property
    def model(self) -> str | None:
        return self.spec.model if self.spec else None

    @property
    def key(self) -> str:
        return json.dumps(self.spec.model_dump(mode="json") if self.spec else None, sort_keys=True) + str(self.from_cli)


@dataclass
class Grid:
    sizes: list[int]
    stages: list[str]
    modes: list[str]
    lead_models: list[ModelChoice]
    worker_models: list[ModelChoice]
    lead_prompts: list[str]
    solo_prompts: list[str]
    sizing: str = "fixed"
    editors: list[str] = field(default_factory=lambda: ["on"])  # limits.editor of every cell: on, off (bash only)

    def describe(self) -> dict:
        return {"sizes": self.sizes, "stages": self.stages, "modes": self.modes,
                "lead_models": [c.model or LOCAL for c in self.lead_models],
                "worker_models": [c.model or LOCAL for c in self.worker_models],
                "lead_prompts": self.lead_prompts, "solo_prompts": self.solo_prompts, "sizing": self.sizing,
                "editors": self.editors}


@dataclass
class SweepCell:
    name: str
    kind: str  # "team" or "solo"
    values: dict  # team: size, sizing, stage, mode, lead, worker, prompt; solo: model, prompt
    config: RunConfig
    baseline: str | None = None  # team cells: the solo cell they are compared with

    @property
    def fingerprint(self) -> str:
        identity = {k: v for k, v in self.config.model_dump(mode="json").items() if k not in NOT_IDENTITY}
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Plan:
    sweep_id: str
    root: Path
    grid: Grid
    cells: list[SweepCell]
    tasks: list[Task]
    baseline: Path | None = None  # an existing run every team cell is compared with (--baseline)

    def run_dir(self, cell: SweepCell) -> Path:
        return SweepLayout(self.root).cell(cell.name)


# -- reading the grid ------------------------------------------------------------------------------


def split_values(text: str, option: str) -> list[str]:
    """``a,b,c`` as a list; an empty item (``a,,b``, a trailing comma) is refused, not skipped."""
    items = [item.strip() for item in str(text).split(",")]
    if not items or any(not item for item in items):
        raise SwepipeError(f"{option} {text!r}: an empty value in the list (give values separated by commas, "
                           "e.g. 1,2,4)")
    return items


def read_grid_file(path: Path) -> dict:
    """The axes a YAML grid file gives: ``{sizes: [1, 2, 4], modes: [blocking, async], lead_models: [gpt-4o,
    {model: openai/x, api_base: ..., prices: {...}}], sizing: fixed, ...}``; a scalar is a one-value axis."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise SwepipeError(f"cannot read the grid file {path}: {error}") from None
    except yaml.YAMLError as error:
        raise SwepipeError(f"the grid file {path} is not valid YAML: {error}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SwepipeError(f"the grid file {path} must map axes to values ({', '.join(GRID_KEYS)})")
    unknown = sorted(str(key) for key in data if key not in GRID_KEYS)
    if unknown:
        raise SwepipeError(f"the grid file {path}: unknown key(s) {', '.join(unknown)}; the axes are "
                           f"{', '.join(GRID_KEYS)}")
    found = {}
    for key, value in data.items():
        if key == "sizing":
            found[key] = value
        elif value is None or value == []:
            raise SwepipeError(f"the grid file {path}: {key} has no value")
        else:
            found[key] = value if isinstance(value, list) else [value]
    return found


def build_grid(config: RunConfig, file_axes: dict | None = None, cli_axes: dict[str, str | None] | None = None,
               sizing: str | None = None, grid_file: Path | None = None) -> Grid:
    """The grid: each axis from the command line (comma-separated), else the grid file, else the config's one
    value. Every value is checked here, before anything runs."""
    file_axes = file_axes or {}
    chosen: dict[str, tuple[list, str]] = {}  # axis -> (raw values, where they came from, for messages)
    for axis in AXES:
        option = "--" + axis.replace("_", "-")
        given = (cli_axes or {}).get(axis)
        if given is not None:
            chosen[axis] = (split_values(given, option), option)
        elif axis in file_axes:
            chosen[axis] = (file_axes[axis], f"the grid file {grid_file}: {axis}" if grid_file else axis)
    team = config.team

    def values(axis: str, default: list, check: Callable) -> list:
        if axis not in chosen:
            return default
        raw, where = chosen[axis]
        checked = [check(value, where) for value in raw]
        unique: dict[Any, Any] = {}
        for value in checked:
            unique.setdefault(value.key if isinstance(value, ModelChoice) else value, value)
        return list(unique.values())

    sizing_value = sizing if sizing is not None else file_axes.get("sizing", "fixed")
    if sizing_value not in SIZINGS:
        raise SwepipeError(f"sizing {sizing_value!r}: use fixed (every delegation uses the whole team of that size) "
                           "or lead (the lead picks up to that many workers)")
    lead_prompts = values("lead_prompts", [team.lead_prompt], _prompt)
    default_size = team.size or team.model_copy(update={"sizing": sizing_value}).team_size  # for this sizing
    return Grid(
        sizes=values("sizes", [default_size], _size),
        stages=values("stages", [team.stages], _stage),
        modes=values("modes", [team.mode], _mode),
        lead_models=values("lead_models", [ModelChoice(None)], _model),
        worker_models=values("worker_models", [ModelChoice(None)], _model),
        lead_prompts=lead_prompts,
        solo_prompts=values("solo_prompts", lead_prompts, _prompt),
        sizing=sizing_value,
        editors=values("editors", [EDITOR_VALUES[not config.limits.editor]], _editor))


def _size(value, where: str) -> int:
    if isinstance(value, bool):
        raise SwepipeError(f"{where}: {value!r} is not a team size (1 to {MAX_SIZE})")
    try:
        size = int(str(value).strip())
    except ValueError:
        raise SwepipeError(f"{where}: {value!r} is not a team size (1 to {MAX_SIZE})") from None
    if str(size) != str(value).strip() or not 1 <= size <= MAX_SIZE:
        raise SwepipeError(f"{where}: {value!r} is not a team size: sizes are whole numbers from 1 to {MAX_SIZE} "
                           "(the solo baseline is its own cell)")
    return size


def _one_of(choices: tuple[str, ...], what: str):
    def check(value, where: str) -> str:
        text = str(value).strip()
        if text not in choices:
            raise SwepipeError(f"{where}: unknown {what} {value!r}; use {', '.join(choices)}")
        return text
    return check


_stage = _one_of(STAGES, "stage")
_mode = _one_of(MODES, "mode")
_prompt = _one_of(PROMPTS, "prompt")
EDITOR_VALUES = ("on", "off")  # limits.editor true, false


def _editor(value, where: str) -> str:
    if isinstance(value, bool):  # a grid file's YAML reads on/off as booleans
        return EDITOR_VALUES[not value]
    return _one_of(EDITOR_VALUES, "editor setting")(value, where)


def _model(value, where: str) -> ModelChoice:
    if isinstance(value, dict):
        try:
            spec = ModelSpec.model_validate(value)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
            raise SwepipeError(f"{where}: {problems}") from None
        from_cli = False
    elif isinstance(value, str) and value.strip():
        spec, from_cli = ModelSpec(model=value.strip()), True
    else:
        raise SwepipeError(f"{where}: {value!r} is not a model (a litellm model string, or in a grid file a "
                           "mapping like the config's models entries)")
    if spec.is_none:
        raise SwepipeError(f"{where}: a team's lead and workers cannot be switched off (model none)")
    return ModelChoice(spec, from_cli)


# -- the cells -------------------------------------------------------------------------------------


def plan_sweep(config: RunConfig, grid: Grid, tasks: list[Task], *, sweep_id: str, runs_dir: Path,
               baseline: Path | None = None) -> Plan:
    """Every cell of the grid with its config, checked (values, plug-ins, prices) before anything runs: the
    solo baselines first (one per lead model and solo prompt, unless ``baseline`` names an existing run),
    then the team cells."""
    lead_slugs = _slugs(grid.lead_models, config.models.get(Role.LEAD))
    worker_slugs = _slugs(grid.worker_models, config.models.get(Role.WORKER))
    cells: list[SweepCell] = []
    solo_names: dict[tuple[str, str, str], str] = {}
    if baseline is None:
        for lead, prompt, editor in itertools.product(grid.lead_models, grid.solo_prompts, grid.editors):
            models = _with_choice(config.models, Role.LEAD, lead)
            solo_models = dict(models)
            if Role.LEAD in models:
                solo_models[Role.SOLO] = models[Role.LEAD]  # the lead model playing solo
            else:
                solo_models.pop(Role.SOLO, None)  # no lead model: the local model plays both
            cfg = _checked(config.model_copy(update={"strategy": "solo", "models": solo_models,
                                                     "solo": SoloConfig(prompt=prompt),
                                                     "limits": _limits(config, editor)}), "the solo baseline")
            name = f"solo-{lead_slugs[lead.key]}-{prompt}{_editor_part(editor)}"
            solo_names[(lead.key, prompt, editor)] = name
            cells.append(SweepCell(name, "solo", {"model": _model_name(solo_models.get(Role.SOLO)), "prompt": prompt,
                                                  "editor": editor}, cfg))
    for lead, worker, prompt, stage, mode, size, editor in itertools.product(
            grid.lead_models, grid.worker_models, grid.lead_prompts, grid.stages, grid.modes, grid.sizes,
            grid.editors):
        models = _with_choice(_with_choice(config.models, Role.LEAD, lead), Role.WORKER, worker)
        team = config.team.model_copy(update={"size": size, "sizing": grid.sizing, "stages": stage, "mode": mode,
                                              "lead_prompt": prompt})
        cfg = _checked(config.model_copy(update={"strategy": "team", "models": models, "team": team,
                                                 "limits": _limits(config, editor)}), "a team cell")
        size_part = f"s{size}" if grid.sizing == "fixed" else f"upto{size}"
        name = (f"team-{size_part}-{stage}-{mode}-lead_{lead_slugs[lead.key]}-worker_{worker_slugs[worker.key]}"
                f"-{prompt}{_editor_part(editor)}")
        solo_prompt = prompt if prompt in grid.solo_prompts else grid.solo_prompts[0]
        cells.append(SweepCell(name, "team", {"size": size, "sizing": grid.sizing, "stage": stage, "mode": mode,
                                              "lead": _model_name(models.get(Role.LEAD)),
                                              "worker": _model_name(models.get(Role.WORKER)), "prompt": prompt,
                                              "editor": editor},
                               cfg, baseline=solo_names.get((lead.key, solo_prompt, editor))))
    _check_prices(cells)
    return Plan(sweep_id=sweep_id, root=runs_dir / sweep_id, grid=grid, cells=cells, tasks=tasks, baseline=baseline)


def _limits(config: RunConfig, editor: str):
    return config.limits.model_copy(update={"editor": editor == "on"})


def _editor_part(editor: str) -> str:
    """A cell name's mark of its editor setting: none when on (the default, so the names of sweeps from before the
    axis stand), "-bashonly" when off."""
    return "" if editor == "on" else "-bashonly"


def _with_choice(models: dict[str, ModelSpec], role: str, choice: ModelChoice) -> dict[str, ModelSpec]:
    if choice.spec is None:
        return dict(models)
    if choice.from_cli:  # as `swepipe run --lead-model X`: the config's options of the role kept
        return dict(RunConfig(models=models).with_model(role, choice.spec.model).models)
    return {**models, role: choice.spec}


def _checked(cfg: RunConfig, what: str) -> RunConfig:
    """``cfg`` validated again (``model_copy`` checks nothing) and its strategy's plug-ins loaded."""
    from pipeline.strategies.base import needed_roles, strategy_class

    try:
        cfg = RunConfig.model_validate(cfg.model_dump())
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" if e["loc"]
                             else e["msg"].removeprefix("Value error, ") for e in error.errors())
        raise SwepipeError(f"{what}: {problems}") from None
    off = [role for role in needed_roles(strategy_class(cfg.strategy), cfg) if not cfg.plays(role)]
    if off:
        raise SwepipeError(f"{what}: the {cfg.strategy} strategy cannot run without its {off[0]} model, which is "
                           "none in the config")
    return cfg


def _check_prices(cells: list[SweepCell]) -> None:
    """An unpriced model stops the sweep before its first cell spends anything (not at the cell that uses it)."""
    from pipeline.models.pricing import resolve_prices
    from pipeline.strategies.base import needed_roles, strategy_class

    for cell in cells:
        for role in needed_roles(strategy_class(cell.config.strategy), cell.config):
            spec = cell.config.models.get(role)
            if spec is not None and not spec.is_none:
                resolve_prices(spec, role)


def _model_name(spec: ModelSpec | None) -> str:
    return spec.model if spec else LOCAL


def slug(model: str | None) -> str:
    """A short readable name for a model in a directory name: its last path part (a scripted model's file
    name without the extension), only letters, digits, '.', '_' and '-'."""
    if not model:
        return "local"
    text = model.rstrip("/").split("/")[-1]
    text = re.sub(r"\.(ya?ml|json)$", "", text)
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "model"
    return text[:40]


def _slugs(choices: list[ModelChoice], configured: ModelSpec | None) -> dict[str, str]:
    """Choice key -> slug; choices whose slugs collide get a short hash of their spec each, so no two share a
    directory name."""
    named = {c.key: slug(c.model or (configured.model if configured else None)) for c in choices}
    counts: dict[str, int] = {}
    for value in named.values():
        counts[value] = counts.get(value, 0) + 1
    return {key: value if counts[value] == 1 else f"{value}-{hashlib.sha1(key.encode()).hexdigest()[:6]}"
            for key, value in named.items()}


# -- worst case ------------------------------------------------------------------------------------


def worst_case(config: RunConfig, tasks: int) -> tuple[float | None, str]:
    """The most a cell of ``tasks`` tasks can spend under its budgets, and how that follows; None: unbounded."""
    per_task, per_run = config.budgets.per_task, config.budgets.per_run
    if per_task is None and per_run is None:
        return None, "unbounded: budgets.per_task and budgets.per_run are unset"
    by_task = per_task * tasks if per_task is not None else None
    if per_run is not None and (by_task is None or per_run < by_task):
        return per_run, f"per_run ${per_run:g}" + (f", under per_task ${per_task:g} x {tasks} task(s)"
                                                    if by_task is not None else "")
    return by_task, f"per_task ${per_task:g} x {tasks} task(s)"


def dry_run_lines(plan: Plan) -> list[str]:
    """The grid, one line per cell (its values, its run directory, its worst case), and the sweep's worst case."""
    lines = [f"sweep {plan.sweep_id}: {len(plan.cells)} cell(s) x {len(plan.tasks)} task(s) -> {plan.root}"]
    if plan.baseline is not None:
        lines.append(f"baseline: {plan.baseline} (an existing run; no solo cell)")
    total, unbounded = 0.0, []
    for cell in plan.cells:
        cost, why = worst_case(cell.config, len(plan.tasks))
        values = " ".join(f"{key}={value}" for key, value in cell.values.items())
        against = f" baseline={cell.baseline}" if cell.baseline else ""
        shown = f"${cost:.2f} ({why})" if cost is not None else "UNBOUNDED (budgets.per_task and per_run unset)"
        lines.append(f"{cell.kind:4}  {values}{against}  -> {plan.run_dir(cell)}  worst case {shown}")
        if cost is None:
            unbounded.append(cell.name)
        else:
            total += cost
    if unbounded:
        lines.append(f"worst case: UNBOUNDED: {len(unbounded)} cell(s) have no budget (budgets.per_task and "
                     "budgets.per_run unset in --config); set them to bound the sweep" + (
                         f"; the other cells: at most ${total:.2f}" if len(unbounded) < len(plan.cells) else ""))
    else:
        lines.append(f"worst case: ${total:.2f} for the whole sweep (per cell: per_task x tasks, capped by per_run)")
    lines.append("dry run: nothing was run or written")
    return lines


# -- the manifest ----------------------------------------------------------------------------------


def _manifest(plan: Plan, earlier: dict | None) -> dict:
    """The manifest for ``plan``, keeping what an earlier session recorded (cells not in this grid too);
    refuses a cell whose config changed since it ran."""
    earlier_cells = {c.get("name"): c for c in (earlier or {}).get("cells", []) if isinstance(c, dict)}
    cells = []
    for cell in plan.cells:
        before = earlier_cells.pop(cell.name, None)
        ran = RunLayout(plan.run_dir(cell)).tasks.is_dir()
        if before and before.get("fingerprint") not in (None, cell.fingerprint) and ran:
            raise SwepipeError(
                f"cell {cell.name} of sweep {plan.sweep_id} ran with another config (models, limits, team or solo "
                f"options differ from {RunLayout(plan.run_dir(cell)).config}); resuming would mix two configs in one "
                "run directory. Use a new --sweep-id, or the config it ran with")
        cells.append({"name": cell.name, "kind": cell.kind, "values": cell.values, "baseline": cell.baseline,
                      "run_dir": str(plan.run_dir(cell)), "fingerprint": cell.fingerprint,
                      "status": (before or {}).get("status", "pending"), "tasks": len(plan.tasks),
                      "finished": (before or {}).get("finished", 0), "spent": (before or {}).get("spent", 0.0)})
    for old in earlier_cells.values():  # cells of an earlier grid: kept in the report
        cells.append({**old, "in_grid": False})
    now = time.strftime("%Y-%m-%d %H:%M:%S")
    return {"sweep_id": plan.sweep_id, "created": (earlier or {}).get("created", now), "updated": now,
            "grid": plan.grid.describe(), "task_ids": [t.instance_id for t in plan.tasks],
            "baseline": str(plan.baseline) if plan.baseline is not None else None, "cells": cells}


# -- running ---------------------------------------------------------------------------------------


@dataclass
class SweepOutcome:
    manifest: dict
    stopped: bool = False
    infra_errors: dict[str, int] = field(default_factory=dict)  # cell -> tasks left unfinished by Docker trouble
    ran: list[str] = field(default_factory=list)  # cells that had tasks to run in this session


def run_sweep(plan: Plan, request: RunRequest, *, show_progress: bool = False, log: Callable[[str], None] = print,
              announce: Callable[[str], None] = print) -> SweepOutcome:
    """Run every cell in turn through the run path; a stop (Ctrl-C, SIGTERM) ends the sweep after saving what
    finished, with the cell marked stopped, so the same command resumes it. ``request``: what every cell shares
    (its dataset, workers, scoring); each cell runs with its own config and id, under the sweep's directory."""
    from pipeline.run.executors import executor_for
    from pipeline.run.lifecycle import Run

    sweep_layout = RunLayout(plan.root)
    lock_run(sweep_layout)  # one process per sweep (each cell is locked as well)
    record_dataset(sweep_layout, request.dataset, request.split)  # its cells, and a resumed sweep, use the same tasks
    manifest = _manifest(plan, read_manifest(plan.root))
    write_json_atomic(SweepLayout(plan.root).manifest, manifest)
    outcome = SweepOutcome(manifest)
    entries = {entry["name"]: entry for entry in manifest["cells"]}
    try:
        for number, cell in enumerate(plan.cells, start=1):
            stopping.check()
            entry = entries[cell.name]
            entry["status"] = "running"
            write_json_atomic(SweepLayout(plan.root).manifest, manifest)
            announce(f"cell {number}/{len(plan.cells)} {cell.name}")
            cell_request = dataclasses.replace(request, config=cell.config, run_id=cell.name, runs_dir=plan.root)
            with Run.open(cell_request, announce=announce) as run:
                summary = executor_for(run.settings.config.executor).run_tasks(
                    plan.tasks, run.settings, workers=request.workers, show_progress=show_progress, log=log)
            if len(summary.skipped) < len(plan.tasks):
                outcome.ran.append(cell.name)
            entry["finished"] = len(summary.predictions)
            entry["spent"] = round(sum((p.cost or {}).get("total", 0.0) for p in summary.predictions.values()), 8)
            if summary.stopped:
                entry["status"] = "stopped"
                outcome.stopped = True
                break
            if summary.infra_errors:
                entry["status"] = f"incomplete ({len(summary.infra_errors)} task(s) not run: Docker or image trouble)"
                outcome.infra_errors[cell.name] = len(summary.infra_errors)
            else:
                entry["status"] = "done"
            write_json_atomic(SweepLayout(plan.root).manifest, manifest)
            announce(f"cell {cell.name}: {entry['status']}; {summary.line()}")
    except (KeyboardInterrupt, stopping.Stopped):
        outcome.stopped = True
        for entry in manifest["cells"]:
            if entry["status"] == "running":
                entry["status"] = "stopped"
    except (SwepipeError, InfrastructureFault) as error:  # e.g. the cell's run directory is in use, an image missing
        for entry in manifest["cells"]:
            if entry["status"] == "running":
                entry["status"] = f"failed: {error}"[:300]
        raise
    finally:
        manifest["updated"] = time.strftime("%Y-%m-%d %H:%M:%S")
        write_json_atomic(SweepLayout(plan.root).manifest, manifest)
    return outcome


def resolve_sweep_root(sweep_id: str, runs_dir: Path) -> Path:
    """The sweep's directory: ``runs_dir/sweep_id``, or ``sweep_id`` itself when it is a path to one."""
    candidate = Path(sweep_id)
    if SweepLayout(candidate).manifest.is_file():
        return candidate
    return runs_dir / sweep_id
