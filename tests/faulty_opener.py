"""A runtime opener for fault tests (``containers: {impl: "faulty_opener:open_faulty"}``): the real Docker
runtime, except that while $SWEPIPE_FAULT_FILE holds a number above zero, each junior command fails as
a Docker daemon error would (and the number goes down by one)."""

import os
from pathlib import Path

from pipeline.errors import RuntimeUnavailable
from pipeline.runtime.factory import open_runtime


def open_faulty(task, role, containers, **options):
    runtime = open_runtime(task, role, containers, **options)
    return FaultyRuntime(runtime) if role.startswith("rollout") else runtime


class FaultyRuntime:
    def __init__(self, runtime):
        self.runtime = runtime
        self.workdir, self.base_commit = runtime.workdir, runtime.base_commit

    def run(self, command, timeout=60, output_limit=None):
        counter = Path(os.environ["SWEPIPE_FAULT_FILE"])
        left = int(counter.read_text() or 0) if counter.exists() else 0
        if left > 0 and command != "true":
            counter.write_text(str(left - 1))
            raise RuntimeUnavailable("injected fault: the Docker daemon timed out (read timeout=60)")
        return self.runtime.run(command, timeout=timeout, output_limit=output_limit)

    def __getattr__(self, name):  # everything else (files, diff, stop) as the real runtime does it
        return getattr(self.runtime, name)
