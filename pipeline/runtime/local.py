"""Local runtime: a temporary, sanitised clone of a repository, commands run with subprocess."""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path, PurePosixPath

from pipeline.errors import RuntimeUnavailable
from pipeline.runtime.base import COMMAND_ENV, CommandResult, diff_command, read_diff, resolve_in
from pipeline.runtime.output import DEFAULT_LIMIT, BoundedOutput
from pipeline.runtime.sanitise import SANITISE_SCRIPT
from pipeline.runtime.seal import SEAL_SCRIPT, Seal, found
from pipeline.text import patchtext

# Only these reach a command: never the caller's environment, which may hold API keys.
_PASSED_THROUGH = ("PATH", "LANG", "LC_ALL", "TZ")


class LocalRuntime:
    """A throwaway clone of ``source`` at ``base_commit``; ``stop()`` deletes it.

    ``seal`` says what its repository holds once its own sanitise step is done (or, without one, as cloned), as a
    container's does (pipeline.runtime.seal); ``network`` is the setting its opener was given, recorded as it is:
    commands run on this machine, whose network a clone cannot cut.
    """

    def __init__(self, source: str | Path, base_commit: str, *, env: dict[str, str] | None = None,
                 sanitise: bool = True, network: bool = False):
        if shutil.which("git") is None or shutil.which("bash") is None:
            raise RuntimeUnavailable("the local runtime needs git and bash on PATH")
        self.base_commit = base_commit
        self._root = Path(tempfile.mkdtemp(prefix="swepipe-local-"))
        self.workdir = PurePosixPath(self._root / "repo")
        self._env = {k: os.environ[k] for k in _PASSED_THROUGH if k in os.environ}
        self._env.update(COMMAND_ENV, HOME=str(self._root), **(env or {}))
        self.seal: Seal | None = None
        try:
            self._clone(Path(source), sanitise)
            self.seal = self._found_seal(sanitise).with_network(network, "local")
        except BaseException:
            self.stop()
            raise

    def _clone(self, source: Path, sanitise: bool) -> None:
        self._clone_with_submodules(source, Path(self.workdir), self.base_commit)
        if sanitise:
            script = self._root / "sanitise.sh"
            script.write_text(SANITISE_SCRIPT)
            result = self.run(f"bash {script} {self.base_commit}", timeout=600, output_limit=None)
        else:
            result = self.run(f"git checkout -q --detach {self.base_commit}", timeout=600)
        if not result.ok:
            raise RuntimeUnavailable(f"cannot prepare {source} at {self.base_commit}: {result.output.strip()}")

    def _found_seal(self, sanitised: bool) -> Seal:
        script = self._root / "seal.sh"
        script.write_text(SEAL_SCRIPT)
        return found(self.run(f"bash {script}", timeout=600, output_limit=None).output, sanitised)

    def _clone_with_submodules(self, source: Path, target: Path, commit: str) -> None:
        """Clone ``source``, and each submodule ``commit`` records that is initialised in ``source`` (as an image's
        would be), into its place; the sanitise script then cuts every history."""
        cloned = subprocess.run(["git", "clone", "-q", "--no-checkout", str(source), str(target)],
                                capture_output=True, text=True, env=self._env)
        if cloned.returncode != 0:
            raise RuntimeUnavailable(f"cannot clone {source}: {cloned.stderr.strip()}")
        listing = subprocess.run(["git", "-C", str(target), "ls-tree", "-r", "-z", commit], capture_output=True,
                                 env=self._env)
        for entry in listing.stdout.split(b"\0") if listing.returncode == 0 else []:
            meta, _, path = entry.partition(b"\t")
            mode, _, sha = meta.decode().partition(" commit ")
            if mode == "160000" and (source / os.fsdecode(path) / ".git").exists():
                self._clone_with_submodules(source / os.fsdecode(path), target / os.fsdecode(path), sha)

    def run(self, command: str, timeout: float = 60, output_limit: int | None = DEFAULT_LIMIT) -> CommandResult:
        output = BoundedOutput(output_limit)
        started = time.monotonic()
        proc = subprocess.Popen(["bash", "-c", command], cwd=self.workdir, env=self._env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        timed_out = False
        stdout = proc.stdout
        assert stdout is not None  # stdout=PIPE
        with selectors.DefaultSelector() as selector:
            selector.register(stdout, selectors.EVENT_READ)
            fd = stdout.fileno()
            while True:
                remaining = started + timeout - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                if not selector.select(min(remaining, 1.0)):
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                output.feed(chunk)
        if timed_out:
            _kill_group(proc.pid)
        stdout.close()
        exit_code = proc.wait()
        return CommandResult(exit_code=exit_code, output=output.text(), timed_out=timed_out,
                             duration=time.monotonic() - started, total_bytes=output.total, cut_bytes=output.cut)

    def read_file(self, path: str) -> bytes:
        return Path(resolve_in(self.workdir, path)).read_bytes()

    def write_file(self, path: str, data: bytes | str) -> None:
        target = Path(resolve_in(self.workdir, path))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(patchtext.to_bytes(data) if isinstance(data, str) else data)

    def diff(self, max_bytes: int | None = None) -> str:
        return read_diff(self.run(diff_command(self.base_commit, max_bytes), timeout=300, output_limit=None),
                         str(self.workdir))

    def stop(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> LocalRuntime:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
