"""Start a runtime in the background, so container start-up overlaps the model's first reply."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import PurePosixPath
from typing import Callable

from pipeline.runtime.base import CommandResult, Runtime
from pipeline.runtime.output import DEFAULT_LIMIT


class BackgroundRuntime:
    """A Runtime whose start runs on its own thread; the first use waits for it (and re-raises its error)."""

    def __init__(self, start: Callable[[], Runtime], workdir: str, base_commit: str):
        self.workdir = PurePosixPath(workdir)
        self.base_commit = base_commit
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runtime-start")
        self._future: Future = self._pool.submit(self._start_and_warm, start)
        self._pool.shutdown(wait=False)

    @staticmethod
    def _start_and_warm(start: Callable[[], Runtime]) -> Runtime:
        runtime = start()
        try:
            runtime.run("true", timeout=60)  # brings up the command server too
        except BaseException:
            runtime.stop()  # the caller never gets this runtime, so nothing else would remove its container
            raise
        return runtime

    def __enter__(self) -> BackgroundRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _runtime(self) -> Runtime:
        return self._future.result()

    def run(self, command: str, timeout: float = 60, output_limit: int | None = DEFAULT_LIMIT) -> CommandResult:
        return self._runtime().run(command, timeout=timeout, output_limit=output_limit)

    def read_file(self, path: str) -> bytes:
        return self._runtime().read_file(path)

    def write_file(self, path: str, data: bytes | str) -> None:
        self._runtime().write_file(path, data)

    def diff(self, max_bytes: int | None = None) -> str:
        return self._runtime().diff(max_bytes)

    def stop(self) -> None:
        # exception() waits for the start; a start that raised left
        # nothing to stop, and its error is for the first use to raise, not for stop()
        if self._future.exception() is None:
            self._future.result().stop()

    @property
    def started(self) -> bool:
        """Whether its start finished and a workspace ran (False while it starts, or when the start failed)."""
        return self._future.done() and self._future.exception() is None

    @property
    def seal(self):
        """The started runtime's seal (pipeline.runtime.seal); None while it starts, or when it never did (no
        container ran) or reports none."""
        if not self.started:
            return None
        return getattr(self._future.result(), "seal", None)

    @property
    def container(self):
        return getattr(self._runtime(), "container", None)
