"""The runtime protocol every stage uses to act on a task's repository."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol

from pipeline.errors import SwepipeError
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

    def diff(self) -> str:
        """The working tree's diff against the base commit; raises DiffFailed when git fails."""
        ...

    def stop(self) -> None: ...


# Every command runs with these: no pager, no colour codes, no progress bars in the observation.
COMMAND_ENV = {"TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat", "PIP_PROGRESS_BAR": "off"}

# The harness's own git commands must not be bent by the repository's or the user's settings.
GIT_QUIET = "git -c core.pager=cat -c color.ui=false -c diff.noprefix=false -c diff.mnemonicPrefix=false"


class DiffFailed(SwepipeError):
    """The working tree's diff could not be taken (git failed in the workspace): that rollout's error, never an
    empty patch."""


def diff_command(base_commit: str) -> str:
    """Shell that prints the working tree's diff against the base commit, new files included.

    A throwaway index keeps the agent's own staging area untouched. Submodules are left out: a patch to
    the parent repository cannot carry edits inside them (``changed_submodules`` names those).
    """
    return (
        'set -e; idx="$(mktemp)"; trap \'rm -f "$idx"\' EXIT; '
        'cp "$(git rev-parse --git-dir)/index" "$idx" 2>/dev/null || true; '
        f'GIT_INDEX_FILE="$idx" {GIT_QUIET} add -A; '
        f'GIT_INDEX_FILE="$idx" {GIT_QUIET} diff --cached --no-ext-diff --no-renames --ignore-submodules=all '
        f'{base_commit}'
    )


def read_diff(result: CommandResult, where: str) -> str:
    """The patch ``diff_command`` printed; DiffFailed when it failed."""
    if not result.ok:
        why = "timed out" if result.timed_out else f"exit code {result.exit_code}"
        raise DiffFailed(f"git diff failed in {where} ({why}): {result.output.strip()[-2000:]}")
    return result.output


_SUBMODULE_MARK = "SWEPIPE-SUBMODULE "


def submodules_command(base_commit: str) -> str:
    """Shell that names each submodule of the base commit whose checkout no longer matches what the base records:
    another commit checked out, or files in it changed, added or deleted."""
    return r"""
GIT ls-tree -r -z BASE | while IFS= read -r -d '' entry; do
  case "$entry" in "160000 "*) ;; *) continue ;; esac
  path="${entry#*$'\t'}"; recorded="${entry%%$'\t'*}"; recorded="${recorded##* }"
  [ -e "$path/.git" ] || continue
  head="$(GIT -C "$path" rev-parse -q --verify HEAD 2>/dev/null || true)"
  changed="$(GIT -C "$path" status --porcelain --ignore-submodules=none 2>&1 | head -c 1)"
  if [ "$head" != "$recorded" ] || [ -n "$changed" ]; then printf 'MARK%s\n' "$path"; fi
done""".replace("GIT", GIT_QUIET).replace("BASE", base_commit).replace("MARK", _SUBMODULE_MARK)


def changed_submodules(runtime: Runtime) -> list[str]:
    """Paths of the submodules whose content the workspace changed (edits a parent patch cannot carry)."""
    result = runtime.run(submodules_command(runtime.base_commit), timeout=300, output_limit=None)
    if not result.ok:
        raise DiffFailed(f"cannot check the submodules: {result.output.strip()[-2000:]}")
    return [line[len(_SUBMODULE_MARK):] for line in result.output.splitlines() if line.startswith(_SUBMODULE_MARK)]


def resolve_in(workdir: PurePosixPath, path: str) -> PurePosixPath:
    """A path relative to the workspace, or an absolute one as given."""
    p = PurePosixPath(path)
    return p if p.is_absolute() else workdir / p
