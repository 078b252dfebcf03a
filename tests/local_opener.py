"""A runtime opener with open_runtime's signature, named in configs as ``local_opener:open_local``:
a fresh local clone of $SWEPIPE_TEST_REPO at $SWEPIPE_TEST_BASE instead of a container."""

import os

from pipeline.runtime.local import LocalRuntime


def open_local(task, role, containers, *, run_id, image_template, read_only=False, background=False):
    if os.environ.get("SWEPIPE_TEST_REFUSE"):
        raise AssertionError("a finished task must not open a runtime again")
    return LocalRuntime(os.environ["SWEPIPE_TEST_REPO"], os.environ["SWEPIPE_TEST_BASE"])
