"""Reading the one action out of a model's reply."""

from __future__ import annotations

import re
from dataclasses import dataclass

_BASH_BLOCK = re.compile(r"^```bash[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
SUBMIT = "submit"


class FormatError(Exception):
    """The reply does not hold exactly one bash block; the message says what was wrong."""


@dataclass(frozen=True)
class Action:
    command: str

    @property
    def is_submit(self) -> bool:
        return self.command.strip() == SUBMIT


def parse_action(reply: str) -> Action:
    blocks = _BASH_BLOCK.findall(reply or "")
    if len(blocks) != 1:
        found = "no" if not blocks else str(len(blocks))
        raise FormatError(f"your reply had {found} ```bash blocks; it must have exactly one")
    command = blocks[0].strip("\n")
    if not command.strip():
        raise FormatError("your ```bash block was empty")
    return Action(command)
