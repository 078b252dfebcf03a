"""The one workspace a team shares: commands serialised, and which files each worker's commands changed."""

from __future__ import annotations

import threading

from pipeline.runtime.base import GIT_QUIET, CommandResult, Runtime
from pipeline.runtime.output import DEFAULT_LIMIT

_MARK = "@@swepipe-team@@"
# Dirty paths (status and content hash) of the working tree; hashes of regular files in one git process.
SNAPSHOT = (
    f'st=$({GIT_QUIET} -c core.quotepath=off status --porcelain=v1 -uall --no-renames 2>/dev/null | head -n 2000); '
    'files=$(printf "%s\\n" "$st" | while IFS= read -r l; do p="${l:3}"; '
    '[ -n "$p" ] && [ -f "$p" ] && printf "%s\\n" "$p"; done); '
    f'printf "%s\\n" "$st"; echo {_MARK}; printf "%s\\n" "$files"; echo {_MARK}; '
    '[ -z "$files" ] || printf "%s\\n" "$files" | git hash-object --stdin-paths 2>/dev/null; true'
)


class SharedWorkspace:
    """A Runtime whose calls are serialised by one lock (LocalRuntime has none of its own)."""

    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        self.workdir, self.base_commit = runtime.workdir, runtime.base_commit
        self.lock = threading.RLock()
        self._generation = 0  # commands run so far; a snapshot taken at the same generation is still true
        self._snapshot: tuple[int, dict[str, str]] | None = None

    def run(self, command: str, timeout: float = 60, output_limit: int | None = DEFAULT_LIMIT) -> CommandResult:
        with self.lock:
            self._generation += 1
            return self.runtime.run(command, timeout=timeout, output_limit=output_limit)

    def run_tracked(self, command: str, timeout: float = 60,
                    output_limit: int | None = DEFAULT_LIMIT) -> tuple[CommandResult, set[str]]:
        """Run ``command`` and name the repository paths it changed (nobody else runs in between)."""
        with self.lock:
            before = self.snapshot()
            result = self.run(command, timeout=timeout, output_limit=output_limit)
            after = self.snapshot()
        changed = {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}
        return result, changed

    def snapshot(self) -> dict[str, str]:
        with self.lock:
            if self._snapshot is not None and self._snapshot[0] == self._generation:
                return self._snapshot[1]
            result = self.runtime.run(SNAPSHOT, timeout=120, output_limit=None)
            state = _parse_snapshot(result.output) if result.exit_code == 0 else {}
            self._snapshot = (self._generation, state)
            return state

    def read_file(self, path: str) -> bytes:
        with self.lock:
            return self.runtime.read_file(path)

    def write_file(self, path: str, data: bytes | str) -> None:
        with self.lock:
            self._generation += 1
            self.runtime.write_file(path, data)

    def diff(self) -> str:
        with self.lock:
            return self.runtime.diff()

    def stop(self) -> None:
        self.runtime.stop()


def _parse_snapshot(output: str) -> dict[str, str]:
    parts = output.split(_MARK + "\n")
    if len(parts) != 3:
        return {}
    status, files, hashes = (part.splitlines() for part in parts)
    state = {line[3:]: line[:2] for line in status if len(line) > 3}
    for path, digest in zip((f for f in files if f), hashes):
        state[path] = f"{state.get(path, '??')} {digest}"
    return state
