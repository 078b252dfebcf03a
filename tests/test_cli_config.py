"""The command line is the config: --set PATH=VALUE for any option, the common flags as shortcuts, removed flags
refused with what to type instead, and --help grouped in panels whose option names are whole at 80 columns."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import typer
import yaml

from pipeline.cli import app
from pipeline.cli.help import PANELS, option_name
from pipeline.cli.removed import REMOVED
from pipeline.errors import SwepipeError


def swepipe(*args: str, columns: int = 200) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": str(columns)})


def printed_config(*args: str) -> dict:
    done = swepipe("run", *args, "--print-config")
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_set_changes_any_option_and_print_config_shows_it():
    cfg = printed_config("--set", "team.mode=async", "--set", "juniors.k=4", "--set", "budgets.per_task=2.5",
                         "--set", "models.junior.model=openai/gpt-4o-mini")
    assert cfg["team"]["mode"] == "async" and cfg["juniors"]["k"] == 4 and cfg["budgets"]["per_task"] == 2.5
    assert cfg["models"]["junior"]["model"] == "openai/gpt-4o-mini"


def test_shortcut_flags_and_set_reach_the_same_options(tmp_path):
    assert printed_config("-k", "3", "--junior-model", "openai/x") == printed_config(
        "--set", "juniors.k=3", "--set", "models.junior.model=openai/x")


@pytest.mark.parametrize("args, message", [
    (["--set", "no.such.key=1"], "--set no.such.key=1: no option 'no'; the keys at the top are strategy"),
    (["--set", "juniors.k=lots"], "--set juniors.k=lots: Input should be a valid integer"),
    (["--set", "team.mode"], "expected PATH=VALUE"),
    (["-k", "4", "--set", "juniors.k=6"], "-k 4 and --set juniors.k=6 both set juniors.k; give one"),
    (["-k", "99"], "-k 99: Input should be less than or equal to 64"),
])
def test_a_bad_setting_is_refused_naming_what_was_typed(args, message):
    done = swepipe("run", *args, "--print-config")
    assert done.returncode == 2, done.stdout
    assert message in " ".join(done.stderr.split()), done.stderr


@pytest.mark.parametrize("command, args, replacement", [
    ("run", ["--team-mode", "async"], "--team-mode was removed; use --set team.mode=async instead"),
    ("run", ["--team-size=2"], "use --set team.size=2 instead"),
    ("run", ["--no-team-messages"], "--no-team-messages was removed; use --set team.messages=false instead"),
    ("run", ["--team-submit-guard", "off"], "use --set team.submit_guard=false instead"),
    ("run", ["--solo-prompt", "piv"], "use --set solo.prompt=piv instead"),
    ("rollouts", ["--task", "x", "--output-dir", "out"], "--output-dir was removed; use --runs-dir DIR --run-id ID"),
    ("eval", ["--predictions", "p.jsonl", "--output-dir", "out"], "--output-dir was removed; use --output out instead"),
    ("eval", ["--predictions", "p.jsonl", "--block-network"], "--block-network was removed; use no flag"),
    ("validate", ["--output-dir", "v"], "--output-dir was removed; use --output v instead"),
    ("cleanup", ["--run-id", "r1"], "--run-id was removed; use swepipe cleanup r1 (RUN: a run id or a run directory)"),
])
def test_a_removed_flag_is_refused_naming_its_replacement(command, args, replacement):
    done = swepipe(command, *args)
    assert done.returncode == 2
    assert replacement in " ".join(done.stderr.replace("│", " ").split()), done.stderr


def test_removed_flags_are_declared_nowhere():
    """Gone from every command, hidden or not: refused when the command line is parsed (pipeline.cli.removed)."""
    for path, command, ctx in _all_commands():
        declared = {name for param in command.get_params(ctx) for name in [*param.opts, *param.secondary_opts]}
        assert not declared & set(REMOVED.get(command.name, {})), path
        assert not [param.name for param in command.get_params(ctx) if getattr(param, "hidden", False)], path


def test_an_unknown_option_is_still_clicks_no_such_option():
    done = swepipe("run", "--no-such-flag")
    assert done.returncode == 2 and "No such option" in done.stderr and "removed" not in done.stderr


def _commands(group, ctx):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        sub = command.make_context(name, [], parent=ctx, resilient_parsing=True)
        if isinstance(command, typer.core.TyperGroup):
            yield from _commands(command, sub)
        else:
            yield [*sub.command_path.split()[1:]], command, sub


def _all_commands():
    group = typer.main.get_command(app)
    return list(_commands(group, group.make_context("swepipe", [], resilient_parsing=True)))


@pytest.mark.parametrize("path, command, ctx", _all_commands(), ids=lambda value: " ".join(value)
                         if isinstance(value, list) else "")
def test_every_commands_help_at_80_columns_shows_each_option_whole_in_a_panel(path, command, ctx):
    done = swepipe(*path, "--help", columns=80)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert "…" not in done.stdout
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False) or not param.opts:
            continue
        assert option_name(param, ctx) in done.stdout, option_name(param, ctx)  # on one line, not cut
    titles = [title for title in PANELS if f"╭─ {title} " in done.stdout]
    assert titles and titles == sorted(titles, key=PANELS.index)


def test_run_help_groups_its_options_by_what_they_are_for():
    shown = swepipe("run", "--help", columns=80).stdout
    for title in ("Task selection", "Models", "Strategy", "Config (every option: --set)", "Execution", "Scoring",
                  "Run directory and output"):
        assert f"╭─ {title} " in shown, title
    assert shown.index("--junior-model") > shown.index("╭─ Models ") > shown.index("--instance-ids")


def test_each_command_summary_is_one_line_at_80_columns():
    shown = swepipe("--help", columns=80).stdout
    body = shown[shown.index("╭─ Commands"):]
    body = body[:body.index("╰")]
    rows = [line[2:-1].rstrip() for line in body.splitlines()[1:] if line.startswith("│")]
    names = [row.split()[0] for row in rows if row and not row.startswith(" ")]
    group = typer.main.get_command(app)
    assert sorted(names) == sorted(group.list_commands(None)), rows
    assert len(rows) == len(names), "a summary wrapped onto a second line:\n" + "\n".join(rows)


def test_the_scoring_groups_log_cap_reaches_a_runs_scoring_settings(tmp_path):
    """--eval-log-mb, once only swepipe eval's, is in the scoring group run --evaluate and sweep share."""
    from run_sessions import session
    from test_run_dataset import scripted_config

    from pipeline.evaluation.options import ScoringOptions
    from pipeline.run.setup import resolve_config

    settings = session(resolve_config(scripted_config(tmp_path)), "r", tmp_path / "runs", evaluate=True,
                       scoring=ScoringOptions(eval_log_mb=0.5))
    assert settings.evaluation.log_limit == 500_000
    with pytest.raises(SwepipeError, match="--eval-log-mb"):
        ScoringOptions(eval_log_mb=0)


def test_the_top_level_help_ends_with_examples_whole_at_80_columns():
    done = swepipe("--help", columns=80)
    assert done.returncode == 0, done.stderr
    examples = done.stdout[done.stdout.index("╭─ Examples "):]
    for command in ("swepipe run --limit 3 --run-id demo --evaluate", "swepipe report demo",
                    "swepipe compare runs/solo demo", "swepipe eval demo --candidates"):
        assert command in examples, command
    assert all(len(line) <= 80 for line in done.stdout.splitlines())
