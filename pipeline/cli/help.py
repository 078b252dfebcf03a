"""``--help`` as swepipe prints it: a command's options grouped in panels (task selection, models, strategy,
budgets, execution, scoring), every option name whole at any width from 80 columns (names in a column that never
wraps, their help wrapped beside them), and each command's summary one line of prose, never cut by the line
breaks of its docstring."""

from __future__ import annotations

import re

import typer.core
from rich.console import Console
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from pipeline.text.terminal import literal_console

OPTIONS = "Options"
TASKS = "Task selection"
MODELS = "Models"
STRATEGY = "Strategy"
CONFIG = "Config (every option: --set)"
EXECUTION = "Execution"
SCORING = "Scoring"
OUTPUT = "Run directory and output"

PANELS = (TASKS, MODELS, STRATEGY, CONFIG, EXECUTION, SCORING, OUTPUT, OPTIONS)  # in this order in --help
_MAX_NAME = 34  # a name column wider than this leaves too little for the help at 80 columns: help goes below


def paragraphs(help_text: str | None) -> list[str]:
    """A docstring's paragraphs, each as one line."""
    return [" ".join(part.split()) for part in re.split(r"\n\s*\n", (help_text or "").strip()) if part.strip()]


def summary(help_text: str | None) -> str:
    """A command's summary: its docstring's first paragraph as one line."""
    return next(iter(paragraphs(help_text)), "")


def option_name(param, ctx) -> str:
    """``--name / --no-name`` or ``--name, -n METAVAR``: how the option is typed."""
    names = ", ".join(param.opts)
    if getattr(param, "secondary_opts", None):
        names += " / " + ", ".join(param.secondary_opts)
    if not getattr(param, "is_flag", False) and not getattr(param, "count", False):
        names += f" {_metavar(param, ctx)}"
    return names


def _metavar(param, ctx) -> str:
    if param.metavar:
        return param.metavar
    shown = param.display_type(ctx) if hasattr(param, "display_type") else None
    return shown or "VALUE"


def option_help(param, ctx) -> str:
    text = " ".join((getattr(param, "help", None) or "").split())
    if getattr(param, "is_flag", False) or getattr(param, "required", False):
        return text
    default = param.default
    if default not in (None, "", (), []) and getattr(param, "show_default", True) is not False:
        text += f" [default: {default}]"
    return text


def _panel_of(param) -> str:
    return getattr(param, "rich_help_panel", None) or OPTIONS


def options_table(rows: list[tuple[str, str]], width: int) -> Table:
    table = Table.grid(padding=(0, 2), expand=True)
    name_width = max((len(name) for name, _ in rows), default=0)
    if name_width <= _MAX_NAME and width - name_width > 30:
        table.add_column(no_wrap=True, style="bold cyan")
        table.add_column(ratio=1)
        for name, text in rows:
            table.add_row(Text(name), Text(text))
    else:  # too wide for two columns: each name on its line, its help indented below it
        table.add_column(ratio=1)
        for name, text in rows:
            table.add_row(Text(name, style="bold cyan"))
            if text:
                table.add_row(Padding(Text(text), (0, 0, 0, 4)))
    return table


def _console() -> Console:
    return literal_console(soft_wrap=False)


class Command(typer.core.TyperCommand):
    """A command whose ``--help`` is printed by ``print_command_help``."""

    def format_help(self, ctx, formatter) -> None:
        print_command_help(self, ctx, _console())


class Group(typer.core.TyperGroup):
    """The app, or a group of commands (``swepipe images``): its ``--help`` lists each command on one line."""

    def format_help(self, ctx, formatter) -> None:
        print_group_help(self, ctx, _console())


def _usage(command, ctx) -> Text:
    pieces = command.collect_usage_pieces(ctx)
    return Text.assemble(("Usage: ", "bold"), (f"{ctx.command_path} {' '.join(pieces)}", ""))


def print_command_help(command, ctx, console: Console) -> None:
    console.print(_usage(command, ctx))
    for paragraph in paragraphs(command.help):
        console.print()
        console.print(Text(paragraph))
    panels: dict[str, list[tuple[str, str]]] = {}
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        if param.param_type_name == "option" and not param.opts:
            continue
        panels.setdefault(_panel_of(param), []).append((option_name(param, ctx), option_help(param, ctx)))
    width = console.width - 4  # the panel's border and padding
    order = {title: place for place, title in enumerate(PANELS)}
    for title, rows in sorted(panels.items(), key=lambda item: order.get(item[0], len(PANELS) - 1)):
        console.print(Panel(options_table(rows, width), title=title, title_align="left", border_style="dim"))


def print_group_help(group, ctx, console: Console) -> None:
    console.print(_usage(group, ctx))
    for paragraph in paragraphs(group.help):
        console.print()
        console.print(Text(paragraph))
    rows = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        rows.append((name, summary(command.help or command.short_help)))
    options = [(option_name(p, ctx), option_help(p, ctx)) for p in group.get_params(ctx)
               if not getattr(p, "hidden", False) and p.opts]
    width = console.width - 4
    console.print(Panel(options_table(rows, width), title="Commands", title_align="left", border_style="dim"))
    if options:
        console.print(Panel(options_table(options, width), title=OPTIONS, title_align="left", border_style="dim"))
    if group.epilog:  # examples, each line as written
        console.print(Panel(Text(group.epilog, overflow="fold"), title="Examples",
                            title_align="left", border_style="dim"))
