"""The `swepipe` command line: ``main``, and the app (pipeline.cli.app) with its commands, from the modules imported
at the bottom."""

from __future__ import annotations

import sys

from pipeline.cli.app import app, console, err_console, images_app  # noqa: F401 - as pipeline.cli names them
from pipeline.errors import InfrastructureFault, SwepipeError


def main() -> None:
    from pipeline.control import stopping

    stopping.install()  # from the main thread, before any worker thread or container exists
    try:
        app()
    except (SwepipeError, InfrastructureFault) as error:  # e.g. a preflight that finds an image no one can get
        from pipeline.text.terminal import literal

        err_console.print(literal("error:", "bold red"), str(error))  # its brackets (swepipe[ray]) are text
        sys.exit(2)
    except SystemExit as done:
        # typer ends a KeyboardInterrupt its command did not catch with 130 (a stop between two steps of the
        # command): it ends as every stop does, with the signal's own code (143 after SIGTERM).
        if done.code == 130 and stopping.requested():
            from pipeline.cli.stops import exit_stopped

            exit_stopped(console, "what finished is saved; run the same command again to go on")
        raise


# Registering the commands; in this order they appear in --help.
# isort: off
from pipeline.cli import dataset_commands, eval_command, report_commands, run_commands  # noqa: E402,F401
from pipeline.cli import sweep_command  # noqa: E402,F401
from pipeline.cli import export_command  # noqa: E402,F401
from pipeline.cli import replay_command  # noqa: E402,F401
# isort: on
