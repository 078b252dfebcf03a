"""The runtime protocol every stage uses to act on a task's repository."""

from __future__ import annotations

import binascii
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol, Self

from pipeline.errors import SwepipeError
from pipeline.runtime.output import DEFAULT_LIMIT
from pipeline.text import patchtext


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

    def diff(self, max_bytes: int | None = None) -> str:
        """The working tree's diff against the base commit; raises DiffFailed when git fails and PatchTooLarge
        when it is over ``max_bytes``."""
        ...

    def stop(self) -> None: ...


class OpenedRuntime(Runtime, Protocol):
    """A Runtime as an opener returns it (pipeline.runtime.factory.open_runtime, a ``containers.impl``): also a
    context manager that stops it on exit."""

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


def apply_check(runtime: Runtime, patch: str, scratch: str) -> str | None:
    """`git apply --check` of ``patch`` against ``runtime``'s working tree, the patch written to ``scratch`` (a file
    outside the repository, removed afterwards); None when it applies, else what git said. Writes nothing in the
    repository, so a read-only workspace will do."""
    runtime.write_file(scratch, patch)
    quoted = shlex.quote(scratch)
    result = runtime.run(f"git apply --check {quoted}; status=$?; rm -f {quoted}; exit $status", timeout=120)
    return None if result.ok else result.output.strip()[:2000] or f"exit code {result.exit_code}"


# Every command runs with these: no pager, no colour codes, no progress bars in the observation.
COMMAND_ENV = {"TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat", "PIP_PROGRESS_BAR": "off"}

# The harness's own git commands must not be bent by the repository's or the user's settings.
GIT_QUIET = "git -c core.pager=cat -c color.ui=false -c diff.noprefix=false -c diff.mnemonicPrefix=false"


class DiffFailed(SwepipeError):
    """The working tree's diff could not be taken (git failed in the workspace): that rollout's error, never an
    empty patch."""


class PatchTooLarge(DiffFailed):
    """The working tree's diff is over the size allowed for a patch; it was not carried."""


# Untracked files a diff leaves out: dependencies, virtualenvs, caches, build outputs and logs an agent's
# commands leave in the repository. They act as ignore rules, so they never touch a tracked file (an edit to
# a committed file under build/ still counts), and a new source file stays in. A new file the agent staged
# itself is checked against them too, and so is every file of a new virtualenv, whatever its name.
BUILD_OUTPUTS = (
    "node_modules/", "bower_components/", ".venv/", "venv/", "site-packages/", "dist-packages/", "__pycache__/",
    "*.py[cod]", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/", ".hypothesis/", ".tox/", ".nox/", "*.egg-info/",
    ".eggs/", ".coverage", ".coverage.*", "htmlcov/", ".nyc_output/", ".cache/", ".gradle/", ".next/",
    ".parcel-cache/", "*.tsbuildinfo", "*.log", "*.o", "*.a", "*.so", "*.dylib", "*.class", ".DS_Store",
)
# Top-level output folders, left out only when the base commit tracks nothing in them (else they are sources).
TOP_LEVEL_OUTPUTS = ("build", "dist", "target", "coverage")
TOO_LARGE_MARK = "SWEPIPE-DIFF-TOO-LARGE"
DIFF_MARK = "SWEPIPE-DIFF"


def _excludes_prelude(base_commit: str | None) -> str:
    """Shell that makes "$tmp" (removed on exit) and writes the build-output ignore rules to "$tmp/exclude"."""
    patterns = " ".join(shlex.quote(p) for p in BUILD_OUTPUTS)
    lines = [
        'tmp="$(mktemp -d)"; trap \'rm -rf "$tmp"\' EXIT',
        f"printf '%s\\n' {patterns} > \"$tmp/exclude\"",
    ]
    if base_commit:
        lines.append(f"for d in {' '.join(TOP_LEVEL_OUTPUTS)}; do "
                     f'[ -n "$({GIT_QUIET} ls-tree --name-only {base_commit} -- "$d")" ] || '
                     'echo "/$d/" >> "$tmp/exclude"; done')
    return "\n".join(lines) + "\n"


def diff_command(base_commit: str, max_bytes: int | None = None) -> str:
    """Shell that prints the working tree's diff against the base commit, new files included (but not
    ``BUILD_OUTPUTS``); with ``max_bytes``, a patch over it is not printed: only ``TOO_LARGE_MARK`` is.

    A throwaway index keeps the agent's own staging area untouched. Submodules are left out: a patch to
    the parent repository cannot carry edits inside them (``changed_submodules`` names those). Git's
    messages are shown only when it fails, so a warning never lands inside the patch.
    """
    diff = 'G diff --cached --no-ext-diff --no-renames --ignore-submodules=all @BASE@ 2>>"$tmp/err"'
    if max_bytes is None:
        emit = diff + ' > "$tmp/patch"\n'
    else:
        emit = f"""{{ rc=0; {diff} || rc=$?; echo "$rc" > "$tmp/rc"; }} | head -c {max_bytes + 1} > "$tmp/patch"
if [ "$(wc -c < "$tmp/patch")" -gt {max_bytes} ]; then echo "{TOO_LARGE_MARK} {max_bytes}"; exit 0; fi
[ "$(cat "$tmp/rc")" = 0 ] || exit 1
"""
    # The patch's bytes cross over as base64, so a file that is not UTF-8 keeps every byte; raw where the
    # image has no base64 (then bytes that are not UTF-8 arrive replaced).
    emit += f"""set -o pipefail
size=$(( $(wc -c < "$tmp/patch") ))
if command -v base64 >/dev/null; then
  echo "{DIFF_MARK} base64 $size"; base64 < "$tmp/patch" | tr -d '\\n'; echo
else
  echo "{DIFF_MARK} raw $size"; cat "$tmp/patch"
fi
"""
    script = _excludes_prelude(base_commit) + r"""set -e
trap 'rc=$?; if [ $rc != 0 ]; then cat "$tmp/err" 2>/dev/null; fi; rm -rf "$tmp"; exit $rc' EXIT
cp -p "$(git rev-parse --git-dir)/index" "$tmp/index" 2>/dev/null || true
export GIT_INDEX_FILE="$tmp/index"
G() { @GIT@ -c core.excludesFile="$tmp/exclude" "$@"; }
G add -A 2>>"$tmp/err"
G diff --cached --name-only -z --no-renames --diff-filter=A @BASE@ > "$tmp/added" 2>>"$tmp/err"
{
  G check-ignore --no-index -z --stdin < "$tmp/added" 2>/dev/null || true
  venvs=()
  while IFS= read -r -d '' f; do case "$f" in */pyvenv.cfg) venvs+=("${f%pyvenv.cfg}") ;; esac; done < "$tmp/added"
  if [ ${#venvs[@]} -gt 0 ]; then
    while IFS= read -r -d '' f; do
      for v in "${venvs[@]}"; do case "$f" in "$v"*) printf '%s\0' "$f"; break ;; esac; done
    done < "$tmp/added"
  fi
} | G update-index --force-remove -z --stdin 2>>"$tmp/err"
""" + emit
    return script.replace("@GIT@", GIT_QUIET).replace("@BASE@", base_commit)


def read_diff(result: CommandResult, where: str) -> str:
    """The patch ``diff_command`` printed; DiffFailed when it failed, PatchTooLarge when it was over the limit."""
    if not result.ok:
        why = "timed out" if result.timed_out else f"exit code {result.exit_code}"
        raise DiffFailed(f"git diff failed in {where} ({why}): {result.output.strip()[-2000:]}")
    if result.output.startswith(TOO_LARGE_MARK):
        limit = result.output.split()[1]
        raise PatchTooLarge(f"the diff in {where} is over the {limit}-byte limit for a patch; it was not kept")
    header, _, body = result.output.partition("\n")
    fields = header.split()
    if len(fields) != 3 or fields[0] != DIFF_MARK or fields[1] not in ("base64", "raw") or not fields[2].isdigit():
        raise DiffFailed(f"git diff in {where} printed no patch: {result.output.strip()[:2000]}")
    if fields[1] == "raw":
        return body
    try:
        data = binascii.a2b_base64(body.strip())
    except binascii.Error as error:
        raise DiffFailed(f"the diff from {where} arrived garbled ({error})") from None
    if len(data) != int(fields[2]):
        raise DiffFailed(f"the diff from {where} arrived cut short ({len(data)} of {fields[2]} bytes)")
    return patchtext.from_bytes(data)


_SUBMODULE_MARK = "SWEPIPE-SUBMODULE "


def submodules_command(base_commit: str) -> str:
    """Shell that names each submodule of the base commit whose checkout no longer matches what the base records:
    another commit checked out, or files in it changed, added or deleted."""
    script = _excludes_prelude(None) + r"""
@GIT@ cat-file -e @BASE@:.gitmodules 2>/dev/null || exit 0
@GIT@ ls-tree -r -z @BASE@ | while IFS= read -r -d '' entry; do
  case "$entry" in "160000 "*) ;; *) continue ;; esac
  path="${entry#*$'\t'}"; recorded="${entry%%$'\t'*}"; recorded="${recorded##* }"
  [ -e "$path/.git" ] || continue
  head="$(@GIT@ -C "$path" rev-parse -q --verify HEAD 2>/dev/null || true)"
  changed="$(@GIT@ -c core.excludesFile="$tmp/exclude" -C "$path" status --porcelain --ignore-submodules=none \
             2>&1 | head -c 1)"
  if [ "$head" != "$recorded" ] || [ -n "$changed" ]; then printf '@MARK@%s\n' "$path"; fi
done"""
    return script.replace("@GIT@", GIT_QUIET).replace("@BASE@", base_commit).replace("@MARK@", _SUBMODULE_MARK)


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
