"""The one way every stage gets a runtime for a task: the image prepared, the container started."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.runtime.base import OpenedRuntime

if TYPE_CHECKING:
    from pipeline.settings.config import Containers
    from pipeline.tasks import Task

WORKDIR = "/app"


def open_runtime(task: Task, role: str, containers: Containers, *, run_id: str, image_template: str,
                 read_only: bool = False, background: bool = False, sanitise: bool = True) -> OpenedRuntime:
    """A started container of ``task``'s image for the agent ``role``, labelled with both.

    ``background`` returns at once: the image is prepared and the container started on a thread of
    its own (so that overlaps the model's first reply), and the first use waits for it. Otherwise
    both happen here and the DockerRuntime (a context manager) is returned. A ``read_only``
    container never gets the network. Call ``stop()`` on the result either way.
    """
    from pipeline.runtime.images.names import image_name

    image_name(image_template, task.to_row())  # a template the task cannot fill is said now, not on first use
    labels = {"swepipe.agent": role, "swepipe.instance_id": task.instance_id[:200]}

    def start() -> OpenedRuntime:
        from pipeline.runtime.docker import DockerRuntime
        from pipeline.runtime.limits import container_limits

        limits = container_limits(containers)  # a run fills them in for its K x workers (run/setup.py)
        image = prepare_task_image(task, containers, image_template, sanitise=sanitise)
        return DockerRuntime(image, task.base_commit, run_id=run_id, workdir=WORKDIR, platform=containers.platform,
                             limits=limits, network=containers.network and not read_only, read_only=read_only,
                             extra_labels=labels, server_in_image=sanitise)

    if background:
        from pipeline.runtime.background import BackgroundRuntime

        return BackgroundRuntime(start, workdir=WORKDIR, base_commit=task.base_commit)
    return start()


def prepare_task_image(task: Task, containers: Containers, image_template: str, *, sanitise: bool = True) -> str:
    """The image ``task``'s containers start from, made ready: pulled when missing and, with ``sanitise``, its
    sanitised copy built, which is done once per image and base commit (later calls find it). RuntimeUnavailable
    when it cannot be; a task calls this before its first stage, so that no model is paid for a workspace that
    could never start (the agents' containers start in the background while their first reply is awaited)."""
    from pipeline.runtime.images.names import image_name
    from pipeline.runtime.images.prepare import prepare_image
    from pipeline.runtime.limits import container_limits

    return prepare_image(image_name(image_template, task.to_row()), task.base_commit, platform=containers.platform,
                         workdir=WORKDIR, sanitise=sanitise, show_progress=False,
                         limits=container_limits(containers))  # the sanitising container's limits: the agents'
