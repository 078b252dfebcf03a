"""swepipe replay: other harnesses' trajectories replayed through swepipe's agent, in the tasks' images, with the
recorded replies as the model (pipeline.strategies.replay); nothing is called, nothing is paid."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Annotated, Optional

import typer

from pipeline.cli import options as opt
from pipeline.cli.app import app, console
from pipeline.cli.help import EXECUTION, OUTPUT, SCORING
from pipeline.errors import SwepipeError
from pipeline.evaluation.options import ScoringOptions
from pipeline.interop.recorded import RecordedTrajectory
from pipeline.text.printable import short_id
from pipeline.text.terminal import literal
from pipeline.text.terminal_table import TerminalTable

# What a replay sets, whatever the config says. The recorded commands come from a file, not from a model swepipe
# called: they are untrusted, so a replay's containers never get the network (containers.network is not used).
REPLAY_SETTINGS = (("strategy", "replay"), ("limits.action_format", "tools"), ("limits.editor", True),
                   ("containers.network", False))


@app.command()
def replay(
    ctx: typer.Context,
    trajectories: Annotated[list[Path], typer.Argument(
        metavar="TRAJECTORY...", show_default=False,
        help="Trajectory files, or folders searched for them: mini-swe-agent 1.x and 2.x (.traj.json), SWE-agent "
             "(.traj), ATIF (.json: Harbor's trials, OpenHands'), swepipe's export.")],
    dataset: opt.Dataset = opt.DEFAULT_DATASET, split: opt.Split = "test", instance_ids: opt.InstanceIds = None,
    run_scripts: opt.RunScripts = None, dockerfiles: opt.Dockerfiles = None, timeout: opt.Timeout = None,
    scoring_profile: opt.ScoringProfileName = opt.DEFAULT_PROFILE, eval_network: opt.EvalNetwork = False,
    eval_log_mb: opt.EvalLogMb = opt.DEFAULT_LOG_MB,
    config: opt.ConfigFile = None,
    assignments: opt.Set = None,
    workers: Annotated[int, typer.Option(help="Trajectories replayed at once.", rich_help_panel=EXECUTION)] = 1,
    image_template: opt.ImageTemplate = None,
    evaluate: Annotated[bool, typer.Option(
        "--evaluate", rich_help_panel=SCORING,
        help="Score each replay's patch with the hidden tests.")] = False,
    run_id: Annotated[Optional[str], typer.Option(
        help="Run id; the same id resumes the replay (default: replay-<time>).", rich_help_panel=OUTPUT)] = None,
    runs_dir: opt.RunsDir = Path("runs"),
) -> None:
    """Replay other tools' trajectories, compared with their records.

    Each recorded reply is fed back in order as the model's (bash commands, str_replace_editor calls, submit);
    paths under the source's repository root (/testbed) are read as the task's. The recorded commands are
    untrusted: the replay's containers never get the network, whatever containers.network says. Per trajectory it
    says whether
    the patch is the recorded submission, which files and hunks differ, the steps whose exit status differs, and
    with --evaluate the verdict beside the recorded one. The run directory is like any other (report, eval,
    compare, task pages); the same --run-id resumes it."""
    from pipeline.cli.run_commands import _run_once
    from pipeline.interop.replay import max_steps, write_recorded
    from pipeline.run.executors import executor_for
    from pipeline.run.lifecycle import RunRequest, new_run_id
    from pipeline.run.setup import resolve_config
    from pipeline.rundir.layout import RunLayout

    selection = opt.TaskSelection.chosen(ctx, dataset=dataset, split=split, instance_ids=instance_ids)
    scoring = ScoringOptions(run_scripts=run_scripts, dockerfiles=dockerfiles, timeout=timeout,
                          scoring_profile=scoring_profile, eval_network=eval_network, eval_log_mb=eval_log_mb)
    run_id = run_id or new_run_id("replay")
    if (runs_dir / run_id).exists():  # a resumed replay goes on with its own dataset
        selection = selection.for_run(runs_dir / run_id, console.print)
    recorded = _readable(trajectories)
    everything = dataclasses.replace(selection, instance_ids=None).load()
    recorded = _in_dataset(recorded, {task.instance_id for task in everything}, selection.instance_ids)
    if not recorded:
        raise SwepipeError("no trajectory to replay: none that could be read is of a task in the dataset"
                           f"{' and in --instance-ids' if selection.instance_ids else ''} (the others are named above)")
    layout = RunLayout(runs_dir / run_id)
    for trajectory in recorded:
        _keep(layout, trajectory, write_recorded)
    steps = max(max_steps(trajectory) for trajectory in recorded)
    from pipeline.settings.config_overlay import flag

    overlay = [flag(path, value, "swepipe replay") for path, value in REPLAY_SETTINGS]
    overlay += [flag("limits.max_steps", steps, "swepipe replay"),
                flag("limits.max_format_errors", steps, "swepipe replay"),
                flag("models.solo", {"model": "scripted/replay", "free": True}, "swepipe replay")]
    cfg = resolve_config(config, [*opt.config_assignments(assignments), *overlay])
    console.print(literal(f"replay {run_id}: the recorded replies as the model (nothing is called or paid), as "
                          f"swepipe's tool calls, at most {steps} step(s); containers without the network, whatever "
                          "containers.network says (the recorded commands are untrusted)"), soft_wrap=True)
    chosen = dataclasses.replace(selection, instance_ids=",".join(trajectory.instance_id for trajectory in recorded))
    request = RunRequest(config=cfg, run_id=run_id, runs_dir=runs_dir, dataset=chosen.dataset, split=chosen.split,
                         evaluate=evaluate, scoring=scoring, image_template=image_template, workers=workers)
    complete = _run_once(request, chosen, executor_for(cfg.executor), check_images=True)
    _print_replays(layout, recorded)
    if not complete:
        raise typer.Exit(1)


def _readable(paths: list[Path]) -> list:
    """Every trajectory the paths hold, read; one that cannot be replayed is named with why, and the rest go on."""
    from pipeline.interop.recorded import NotReplayable
    from pipeline.interop.trajectory_formats import find_trajectories, read_trajectory_file

    missing = [path for path in paths if not path.exists()]
    if missing:
        raise SwepipeError(f"no such file or folder: {', '.join(map(str, missing))}")
    found, read = find_trajectories(paths), []
    if not found:
        raise SwepipeError(f"no trajectory files in {', '.join(map(str, paths))} (.traj.json, .traj, or .json "
                           "files of a known format)")
    for path in found:
        try:
            read.append(read_trajectory_file(path))
        except NotReplayable as error:
            console.print(literal("not replayable", "red"), literal(str(error)), soft_wrap=True)
    return read


def _in_dataset(recorded: list[RecordedTrajectory], dataset_ids: set[str],
                chosen: str | None) -> list[RecordedTrajectory]:
    """The trajectories of tasks in the dataset (and in --instance-ids), one per task; the others named."""
    from pipeline.tasks import parse_instance_ids

    wanted = set(parse_instance_ids(chosen)) if chosen else None
    kept: dict[str, RecordedTrajectory] = {}
    for trajectory in recorded:
        iid = trajectory.instance_id
        if wanted is not None and iid not in wanted:
            continue
        if iid not in dataset_ids:
            console.print(literal("not replayed", "red"), literal(f"{trajectory.source}: task {iid} is not in the "
                                                                  "dataset (give it with --dataset)"),
                          soft_wrap=True)
        elif iid in kept:
            console.print(literal("not replayed", "red"),
                          literal(f"{trajectory.source}: a second trajectory of {iid} (the first is "
                                  f"{kept[iid].source}); replay it into another --run-id"), soft_wrap=True)
        else:
            kept[iid] = trajectory
    return list(kept.values())


def _keep(layout, trajectory, write) -> None:
    """The trajectory on record in the run, for its task; a resumed replay must replay the same one."""
    from pipeline.interop.replay import read_recorded

    path = layout.task(trajectory.instance_id).replay_files.recorded
    if path.exists():
        earlier = read_recorded(path)
        if earlier.source != trajectory.source or _actions(earlier) != _actions(trajectory):
            raise SwepipeError(f"run {layout.run_id} replays {earlier.source} for {trajectory.instance_id}, not "
                               f"{trajectory.source}; give another --run-id")
        return
    write(path, trajectory)


def _actions(trajectory: RecordedTrajectory) -> list[tuple]:
    """A trajectory's steps as what they do (an older swepipe kept no outputs on record)."""
    return [(step.thought, step.call, step.exit_code) for step in trajectory.steps]


def _print_replays(layout, recorded: list) -> None:
    from pipeline.records import ReplayResult

    rows = []
    verdicts = _verdicts(layout)
    differences = []
    for trajectory in recorded:
        result = ReplayResult.read(layout.task(trajectory.instance_id).replay_files.result)
        if not isinstance(result, ReplayResult):
            rows.append([_named(trajectory), trajectory.format, "-", "not replayed (see above)", "-", "-", "-"])
            continue
        word = _patch_word(result)
        steps = f"{result.replayed_steps} of {result.recorded_steps}"
        rows.append([_named(trajectory), str(result.source_format), steps, word.split(":")[0],
                     f"{len(result.exit_codes_differ or [])} differ", _reached_word(result),
                     f"{_word(verdicts.get(trajectory.instance_id))} ({_word(result.recorded_resolved)})"])
        said = [f"patch {word}", *(result.exit_codes_differ or []),
                *(f"step {finding.step} reached for the answer ({finding.kind}): {finding.reason}; command: "
                  f"{_first_line(finding.command)}" for finding in result.retrieval or [])]
        differences += [f"{trajectory.source.name}: {item}" for item in said]
    console.print(TerminalTable(f"replay {layout.run_id}", ["trajectory", "format", "steps", "patch", "exit codes",
                                                            "reached", "resolved (recorded)"], rows))
    for line in differences:  # below the table, whole: a cell folds them to its width
        console.print(literal(line), soft_wrap=True)
    from pipeline.rundir.layout import TASK

    console.print(f"per trajectory: {layout.root / TASK.replay_files.result}", soft_wrap=True)


def _named(trajectory: RecordedTrajectory) -> str:
    """A trajectory as the table lists it: its file's name, and its task when the name does not give it (swepipe's
    files are named for their agent)."""
    name = trajectory.source.name
    return name if name.startswith(trajectory.instance_id) else f"{name} ({short_id(trajectory.instance_id)})"


def _first_line(command: object, limit: int = 200) -> str:
    text = str(command or "")
    line = text.split("\n", 1)[0]
    return line[:limit] + ("…" if len(line) > limit or "\n" in text else "")


def _reached_word(result) -> str:
    """The recorded trajectory's steps that reached for the answer (the retrieval audit), by kind."""
    findings = result.retrieval if isinstance(result.retrieval, list) else None
    if findings is None:
        return "-"
    kinds = Counter(str(finding.kind) for finding in findings)
    return ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items())) or "none"


def _patch_word(result) -> str:
    if result.patch_identical is None:
        return "no recorded patch"
    if result.patch_identical:
        return "identical"
    parts = [*(f"+{path}" for path in result.only_replayed or []), *(f"-{path}" for path in result.only_recorded or []),
             *(result.differing or [])]
    return "differs: " + "; ".join(parts)


def _verdicts(layout) -> dict[str, object]:
    from pipeline.records import read_predictions

    return {iid: prediction.resolved for iid, prediction in read_predictions(layout.predictions).records.items()}


def _word(verdict: object) -> str:
    """Only JSON true and false are verdicts (a record read back may hold anything)."""
    return ("yes" if verdict else "no") if isinstance(verdict, bool) else "-"
