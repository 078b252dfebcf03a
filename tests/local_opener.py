"""Runtime openers with open_runtime's signature, named in configs as ``local_opener:open_local``: a fresh local
clone of $SWEPIPE_TEST_REPO at $SWEPIPE_TEST_BASE instead of a container, sanitised as an image is and given the
config's network setting (recorded as it is: a clone cannot cut the network). ``local_opener:open_unsanitised``
leaves the clone's history as it is (every ref, the origin remote), ``local_opener:open_with_planted_ref`` adds a
branch to a sanitised clone: neither is sealed."""

import os
import subprocess

from pipeline.runtime.local import LocalRuntime


def open_local(task, role, containers, *, run_id, image_template, read_only=False, background=False):
    if os.environ.get("SWEPIPE_TEST_REFUSE"):
        raise AssertionError("a finished task must not open a runtime again")
    return LocalRuntime(os.environ["SWEPIPE_TEST_REPO"], os.environ["SWEPIPE_TEST_BASE"],
                        network=containers.network and not read_only)


def open_unsanitised(task, role, containers, *, run_id, image_template, read_only=False, background=False):
    return LocalRuntime(os.environ["SWEPIPE_TEST_REPO"], os.environ["SWEPIPE_TEST_BASE"], sanitise=False,
                        network=containers.network and not read_only)


class _PlantedRef(LocalRuntime):
    def _clone(self, source, sanitise):
        super()._clone(source, sanitise)
        subprocess.run(["git", "-C", str(self.workdir), "update-ref", "refs/heads/planted", "HEAD"], check=True)


def open_with_planted_ref(task, role, containers, *, run_id, image_template, read_only=False, background=False):
    return _PlantedRef(os.environ["SWEPIPE_TEST_REPO"], os.environ["SWEPIPE_TEST_BASE"],
                       network=containers.network and not read_only)
