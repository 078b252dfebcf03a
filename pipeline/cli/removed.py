"""Options that are gone, refused naming what to type instead (a usage error, exit 2) rather than with click's bare
'no such option'. They are declared nowhere as options: the refusal is made when click meets an unknown one."""

from __future__ import annotations

import importlib
from pathlib import Path

import typer

from pipeline.cli.help import Command
from pipeline.rundir.layout import ReportFiles

# The click typer runs on: its own copy since typer 0.2x, click itself before.
_IN_DIR = ReportFiles(Path("DIR"))  # where a report's files go under --output DIR, as the messages say
_errors = importlib.import_module(typer.BadParameter.__module__)

# A command -> its removed options -> what to type instead ({} is the value the old option was given).
REMOVED = {
    "run": {"--team-stages": "--set team.stages={}", "--team-mode": "--set team.mode={}",
            "--team-size": "--set team.size={}", "--team-sizing": "--set team.sizing={}",
            "--team-messages": "--set team.messages=true", "--no-team-messages": "--set team.messages=false",
            "--team-submit-guard": "--set team.submit_guard={}", "--team-directory": "--set team.directory={}",
            "--lead-prompt": "--set team.lead_prompt={}", "--solo-prompt": "--set solo.prompt={}"},
    "rollouts": {"--output-dir": "--runs-dir DIR --run-id ID (the rollouts go to DIR/ID/tasks/<id>/junior, and "
                                 "the same id reuses finished ones)"},
    "eval": {"--output-dir": "--output {}",
             "--block-network": "no flag (the tests have no network unless --eval-network)"},
    "validate": {"--output-dir": "--output {}"},
    "cleanup": {"--run-id": "swepipe cleanup {} (RUN: a run id or a run directory)"},
    "report": {"--html": "--output DIR (DIR gets report.html, report.md, report_tasks/ and figures/)"},
    "coverage": {"--figure": f"--output DIR (the figure goes to {_IN_DIR.coverage_figure('<run-id>')})"},
    "whatif": {"--figure": f"--output DIR (the figure goes to {_IN_DIR.whatif_figure})"},
    "compare": {"--markdown": "--output DIR (DIR gets compare.md and compare.html)",
                "--html": "--output DIR (DIR gets compare.md and compare.html)"},
}

_WORDS = {"on": "true", "off": "false"}  # the old flags' spellings of a boolean, as --set writes it


def replacement(command: str, option: str, args: list[str]) -> str | None:
    """What to type instead of ``option`` of ``command``, its old value in place, or None when it was never
    ``command``'s."""
    instead = REMOVED.get(command, {}).get(option)
    if instead is None:
        return None
    return instead.format(_WORDS.get(value := _value_of(option, args), value))


def _value_of(option: str, args: list[str]) -> str:
    """The value ``option`` was given in ``args`` (``--name VALUE`` or ``--name=VALUE``)."""
    for place, arg in enumerate(args):
        if arg.startswith(option + "="):
            return arg.partition("=")[2]
        if arg == option and place + 1 < len(args):
            return args[place + 1]
    return "VALUE"


class RefusingCommand(Command):
    """A command (its --help as pipeline.cli.help prints it) that refuses its removed options naming the new."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        given = list(args)  # click consumes the list it parses
        try:
            return super().parse_args(ctx, args)
        except _errors.NoSuchOption as error:
            instead = replacement(self.name or "", error.option_name, given)
            if instead is None:
                raise
            raise _errors.UsageError(f"{error.option_name} was removed; use {instead} instead", ctx) from None
