"""The `swepipe` Typer app, its `images` group and the consoles (stdout, stderr; pipeline.text.terminal: every string
printed literally): what every command module registers with or prints to, in a module that imports none of them
(pipeline/cli/__init__.py imports the commands)."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.cli.help import Group
from pipeline.cli.removed import RefusingCommand
from pipeline.rundir.layout import ReportFiles
from pipeline.text.terminal import literal_console


class App(typer.Typer):
    """A Typer app whose commands and groups print swepipe's --help (pipeline.cli.help)."""

    def __init__(self, **settings) -> None:
        super().__init__(cls=Group, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                         **settings)

    def command(self, *args, cls=RefusingCommand, **settings):
        return super().command(*args, cls=cls, **settings)


# Shown under the top-level --help line by line, as written.
EXAMPLES = f"""\
The pipeline on 3 bundled tasks, scored by the hidden tests, into runs/demo:
  swepipe run --limit 3 --run-id demo --evaluate
Its report (RUN: a run id under --runs-dir, or a run directory):
  swepipe report demo
Two runs task by task, each against the first, also into {ReportFiles(Path('site')).compare_markdown} and .html:
  swepipe compare runs/solo demo --output site
Every distinct junior candidate of a run scored, for swepipe whatif:
  swepipe eval demo --candidates"""

app = App(help="Resolve SWE-Bench Pro tasks cheaply and score the patches with hidden tests.", epilog=EXAMPLES)
images_app = App(help="Build, check and prune the Docker images tasks run in.")
app.add_typer(images_app, name="images")
console = literal_console()
err_console = literal_console(stderr=True)  # errors, and notes beside data on stdout
