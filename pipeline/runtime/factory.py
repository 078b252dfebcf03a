"""The one way every stage gets a runtime for a task: the image prepared, the container started."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.runtime.base import Runtime

if TYPE_CHECKING:
    from pipeline.config import Containers
    from pipeline.tasks import Task

WORKDIR = "/app"


def open_runtime(task: Task, role: str, containers: Containers, *, run_id: str, image_template: str,
                 read_only: bool = False, background: bool = False, sanitise: bool = True) -> Runtime:
    """A started container of ``task``'s image for the agent ``role``, labelled with both.

    ``background`` returns at once: the image is prepared and the container started on a thread of
    its own (so that overlaps the model's first reply), and the first use waits for it. Otherwise
    both happen here and the DockerRuntime (a context manager) is returned. A ``read_only``
    container never gets the network. Call ``stop()`` on the result either way.
    """
    from pipeline.runtime.images import image_name

    name = image_name(image_template, task.to_row())
    labels = {"swepipe.agent": role, "swepipe.instance_id": task.instance_id[:200]}

    def start() -> Runtime:
        from pipeline.runtime.docker import DockerRuntime
        from pipeline.runtime.images import prepare_image
        from pipeline.runtime.limits import container_limits

        limits = container_limits(containers)  # a run fills them in for its K x workers (run/setup.py)
        image = prepare_image(name, task.base_commit, platform=containers.platform, workdir=WORKDIR,
                              sanitise=sanitise, show_progress=False, limits=limits)
        return DockerRuntime(image, task.base_commit, run_id=run_id, workdir=WORKDIR, platform=containers.platform,
                             limits=limits, network=containers.network and not read_only, read_only=read_only,
                             extra_labels=labels, server_in_image=sanitise)

    if background:
        from pipeline.runtime.background import BackgroundRuntime

        return BackgroundRuntime(start, workdir=WORKDIR, base_commit=task.base_commit)
    return start()
