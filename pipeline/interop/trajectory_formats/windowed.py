"""SWE-agent's windowed tools as bash commands for a replay: each call runs ``windowed_tools.py`` (SWE-agent's tools'
behaviour, written from their definitions) with python3 in the task's container, where the open file and the window
are kept between calls as SWE-agent keeps them; the first such step writes the script to the container.

Which tools: ``open``, ``goto``, ``scroll_up``, ``scroll_down``, ``create``, ``edit`` (a line range ``edit A:B`` with
its text up to ``end_of_edit``; 1.x's ``edit SEARCH REPLACE [REPLACE_ALL]`` in the window and ``edit TEXT`` of the
whole window), ``insert``, and the read-only ``search_dir``, ``search_file`` and ``find_file``. Arguments are read as
SWE-agent's shell read them (words split as bash splits them). Which behaviour, 0.x's or 1.x's, is the
trajectory's generation (``generation_of``).
"""

from __future__ import annotations

import base64
import re
import shlex
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from pipeline.interop.trajectory_formats.common import Refused, as_dict, as_string

WINDOWED_TOOLS = frozenset({"open", "goto", "scroll_up", "scroll_down", "create", "edit", "insert", "search_file",
                            "search_dir", "find_file"})
SCRIPT_PATH = "/tmp/.swepipe/windowed_tools.py"
_SCRIPT_END = "SWEPIPE_WINDOWED_TOOLS"
_LINE_RANGE = re.compile(r"edit[ \t]+(\d+):(\d+)[ \t]*")
# What SWE-agent's editing tools print when the edit was turned back (its linter found new errors, or the text was
# not found): the file was not changed.
_NOT_APPLIED = ("Your changes have NOT been applied", "Your edit was not applied",
                "Your proposed edit has introduced new syntax error")
DEFAULT_WINDOW, DEFAULT_OVERLAP = 100, 2


@dataclass(frozen=True)
class WindowSettings:
    generation: int  # 0: SWE-agent 0.x's bash tools; 1: 1.x's python tools
    window: int = DEFAULT_WINDOW
    overlap: int = DEFAULT_OVERLAP


def generation_of(info: dict[str, Any], trajectory: list[Any], history: list[Any]) -> int:
    """0 for SWE-agent 0.x, 1 for 1.x: the version the file records, else how it is written (0.x kept a step's
    state as JSON text and its history without ``message_type``)."""
    version = as_string(info.get("swe_agent_version")) or ""
    if version[:1].isdigit():
        return 0 if version.startswith("0.") else 1
    for step in trajectory:
        state = as_dict(step).get("state")
        if state is not None:
            return 0 if isinstance(state, str) else 1
    return 1 if any(isinstance(entry, dict) and "message_type" in entry for entry in history) else 0


def window_settings(generation: int, config: dict[str, Any]) -> WindowSettings:
    """The window's size and overlap the trajectory's config gives its tools (``env_variables`` or
    ``registry_variables``), else SWE-agent's defaults (100 and 2)."""
    tools = as_dict(as_dict(config.get("agent")).get("tools"))
    given = {**as_dict(tools.get("env_variables")), **as_dict(tools.get("registry_variables"))}
    return WindowSettings(generation, _positive(given.get("WINDOW"), DEFAULT_WINDOW),
                          _non_negative(given.get("OVERLAP"), DEFAULT_OVERLAP))


def _positive(value: Any, default: int) -> int:
    number = _integer(value)
    return number if number is not None and 0 < number <= 10_000 else default


def _non_negative(value: Any, default: int) -> int:
    number = _integer(value)
    return number if number is not None and 0 <= number <= 10_000 else default


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def windowed_command(action: str, settings: WindowSettings, observation: str | None, install: bool,
                     number: int) -> str:
    """The bash command that replays ``action`` (a windowed tool's call as SWE-agent ran it) in the container;
    ``install``: the first such step, which writes the script first. Refused for a call SWE-agent's tools read
    otherwise than these can (a cursor edit, an argument missing)."""
    arguments = _tool_arguments(action, number)
    tool = arguments[0]
    flags = []
    if tool.startswith(("edit", "insert")) and observation is not None and any(
            marker in observation for marker in _NOT_APPLIED):
        flags.append("--not-applied")
    run = " ".join(["python3", SCRIPT_PATH, *flags, str(settings.generation), str(settings.window),
                    str(settings.overlap), *(shlex.quote(argument) for argument in arguments)])
    if not install:
        return run
    script = files("pipeline.interop.trajectory_formats").joinpath("windowed_tools.py").read_text(encoding="utf-8")
    return (f"mkdir -p {SCRIPT_PATH.rsplit('/', 1)[0]} && cat > {SCRIPT_PATH} <<'{_SCRIPT_END}'\n{script}"
            f"{'' if script.endswith(chr(10)) else chr(10)}{_SCRIPT_END}\n{run}")


def _tool_arguments(action: str, number: int) -> list[str]:
    """The script's tool and arguments for ``action``: texts base64-encoded, everything else as bash read it."""
    first, _, rest = action.partition("\n")
    ranged = _LINE_RANGE.fullmatch(first.rstrip())
    if ranged:
        body = []
        for line in rest.split("\n"):
            if line == "end_of_edit":
                break
            body.append(line)
        else:
            if body and body[-1] == "":  # the action's own last newline, with no end_of_edit after it
                body.pop()
        return ["edit_range", ranged.group(1), ranged.group(2), _encoded("".join(line + "\n" for line in body))]
    try:
        words = shlex.split(action)
    except ValueError:
        raise Refused(f"step {number}: its {first.split()[0]} call cannot be read as bash reads it (an unclosed "
                      "quote)") from None
    tool, given = words[0], words[1:]
    if tool == "edit":
        if first.strip() == "edit" and rest.strip():
            raise Refused(f"step {number} uses SWE-agent's cursor edit (`edit` between set_cursors marks), which "
                          "swepipe does not replay")
        if len(given) == 1:
            return ["edit_rewrite", _encoded(given[0])]
        if len(given) in (2, 3):
            replace_all = "1" if len(given) == 3 and given[2] else "0"  # argparse's type=bool: any text is True
            return ["edit_replace", _encoded(given[0]), _encoded(given[1]), replace_all]
        raise Refused(f"step {number}: its edit call has {len(given)} arguments, which no SWE-agent edit takes")
    if tool == "insert":
        if not given or len(given) > 2 or (len(given) == 2 and _integer(given[1].lstrip("-")) is None):
            raise Refused(f"step {number}: its insert call is not insert TEXT [LINE]")
        return ["insert", _encoded(given[0]), *given[1:]]
    needed = {"goto": 1, "create": 1, "search_dir": 1, "search_file": 1, "find_file": 1}.get(tool, 0)
    if len(given) < needed:
        raise Refused(f"step {number}: its {tool} call lacks its argument")
    if tool in ("open", "goto") and any(_integer(word) is None for word in given[1 if tool == "open" else 0:2]):
        raise Refused(f"step {number}: its {tool} call's line number is no number")
    kept = {"open": 2, "goto": 1, "scroll_up": 0, "scroll_down": 0, "create": 1}.get(tool, 2)
    return [tool, *given[:kept]]


def _encoded(text: str) -> str:
    return base64.b64encode(text.encode("utf-8", "surrogateescape")).decode("ascii")

