"""The `swepipe` Typer app, its `images` group and the console: what every command module registers with or prints
to, in a module that imports none of them (pipeline/cli/__init__.py imports the commands)."""

from __future__ import annotations

import typer
from rich.console import Console

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Resolve SWE-Bench Pro tasks cheaply and score the patches with hidden tests.")
images_app = typer.Typer(no_args_is_help=True, help="Build, check and prune the Docker images tasks run in.")
app.add_typer(images_app, name="images")
console = Console()
