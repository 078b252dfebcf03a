"""The runtime protocol every stage uses to act on a task's repository."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol

from pipeline.runtime.output import DEFAULT_LIMIT


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    output: str  # stdout and stderr merged, bounded, decoded with replacement characters
    timed_out: bool
    duration: float
    total_bytes: int  # bytes the command printed
    cut_bytes: int  # bytes dropped from the middle of the output

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class Runtime(Protocol):
    """A started workspace holding the task's repository at ``workdir``."""

    workdir: PurePosixPath
    base_commit: str

    def run(self, command: str, timeout: float = 60, output_limit: int | None = DEFAULT_LIMIT) -> CommandResult: ...

    def read_file(self, path: str) -> bytes: ...

    def write_file(self, path: str, data: bytes | str) -> None: ...

    def diff(self) -> str: ...

    def stop(self) -> None: ...


# Every command runs with these: no pager, no colour codes, no progress bars in the observation.
COMMAND_ENV = {"TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat", "PIP_PROGRESS_BAR": "off"}

# The harness's own git commands must not be bent by the repository's or the user's settings.
GIT_QUIET = "git -c core.pager=cat -c color.ui=false -c diff.noprefix=false -c diff.mnemonicPrefix=false"


def diff_command(base_commit: str) -> str:
    """Shell that prints the working tree's diff against the base commit, new files included.

    A throwaway index keeps the agent's own staging area untouched.
    """
    return (
        'set -e; idx="$(mktemp)"; trap \'rm -f "$idx"\' EXIT; '
        'cp "$(git rev-parse --git-dir)/index" "$idx" 2>/dev/null || true; '
        f'GIT_INDEX_FILE="$idx" {GIT_QUIET} add -A; '
        f'GIT_INDEX_FILE="$idx" {GIT_QUIET} diff --cached --no-ext-diff --no-renames {base_commit}'
    )


def resolve_in(workdir: PurePosixPath, path: str) -> PurePosixPath:
    """A path relative to the workspace, or an absolute one as given."""
    p = PurePosixPath(path)
    return p if p.is_absolute() else workdir / p
