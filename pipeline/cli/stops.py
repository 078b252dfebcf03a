"""How every command ends after a stop (a signal, or a fault every task would meet): the same cleanup and words."""

from __future__ import annotations

from typing import NoReturn

from rich.console import Console

from pipeline.text.terminal import literal


def exit_stopped(console: Console, saved: str) -> NoReturn:
    """Remove what is left of the run's containers, charge the model calls the stop abandons (their worst case:
    the provider may bill them), say why the run stopped when a fault stopped it and ``saved`` (what is kept and
    how to resume), then exit without waiting for threads still blocked in a call: 130 or 143 after a signal,
    1 for an outage, 2 for a configuration error."""
    from pipeline.control import stopping
    from pipeline.models.client import charge_abandoned_calls
    from pipeline.runtime import containers

    containers.remove_all_tracked()
    abandoned = charge_abandoned_calls()
    if stopping.reason():
        console.print(literal("stopped:", "red"), stopping.reason(), soft_wrap=True)
    note = (f"; {abandoned} model call(s) still in flight were abandoned and are charged their worst case in the "
            "ledger" if abandoned else "")
    console.print(f"stopped: {saved}{note}", soft_wrap=True)
    stopping.exit_now(stopping.exit_code())
