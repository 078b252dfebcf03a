"""Images on every node before a run or scoring on the cluster: `swepipe images check`'s preflight run on each
node that can take a task, a missing image no registry confirms stopping the command at once."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any, TypedDict

from pipeline.errors import InfrastructureFault, RuntimeUnavailable
from pipeline.records.prediction import finished_predictions
from pipeline.run.ray.connect import RESOURCE, alive_nodes, connect, node_labels
from pipeline.run.ray.driver import slots_per_task
from pipeline.run.task import RunSettings
from pipeline.tasks import Task

PREFLIGHT_TIMEOUT = 120.0  # seconds a node's preflight may take past the registry's timeout before it is left out


class NodeReport(TypedDict, total=False):
    """A node's preflight (``node_preflight``), or why it has none (``error``)."""

    host: str
    line: str  # the preflight's line, as `swepipe images check` prints it
    problem: str | None  # what stops the run there
    present: list[str]
    missing: dict[str, str | None]  # image -> what its registry said
    needed_bytes: int
    free_bytes: int | None
    error: str  # Docker cannot be asked there, or the node did not answer
    unanswered: bool


def node_preflight(names: list[str], budget_gb: float | None, registry_timeout: float) -> NodeReport:
    """A Ray task pinned to one node: `swepipe images check`'s preflight there (its Docker engine, its registry
    credentials), as a plain record."""
    from pipeline.runtime.images.preflight import preflight

    host = socket.gethostname()
    try:
        check = preflight(names, budget_gb, registry_timeout=registry_timeout)
    except RuntimeUnavailable as error:  # a node without a working Docker: said, by the driver
        return {"host": host, "error": f"Docker cannot be asked there ({type(error).__name__}: {error})"}
    except InfrastructureFault:
        raise
    except Exception as error:  # noqa: BLE001 - whatever else the engine's answer holds: said too
        return {"host": host, "error": f"Docker cannot be asked there ({type(error).__name__}: {error})"}
    return {"host": host, "line": check.line(), "problem": None if check.ok else check.problem(),
            "present": [i.name for i in check.images if i.present],
            "missing": {i.name: i.registry for i in check.missing}, "needed_bytes": check.needed_bytes,
            "free_bytes": check.free_bytes}


def check_images_on_nodes(ray: Any, names: Iterable[str], budget_gb: float | None = None,
                          announce: Callable[[str], None] = print, registry_timeout: float | None = None,
                          slots: int = 1) -> dict[str, NodeReport]:
    """The preflight on every alive node that can run a task (one that offers ``slots`` docker_slots), in
    parallel, one line per node; RuntimeUnavailable naming the nodes and images when an image is missing on a
    node and no registry confirmed it has it (or a node's Docker cannot be asked), so the run stops in its first
    minute with nothing spent. Missing images a registry has are only reported: their tasks pull them. A node
    that does not answer in time is reported and left out. Returns node label -> its report."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from pipeline.runtime.images.names import REGISTRY_TIMEOUT

    registry_timeout = REGISTRY_TIMEOUT if registry_timeout is None else registry_timeout
    names = list(dict.fromkeys(names))
    everyone = alive_nodes(ray)
    labels = node_labels(everyone)
    nodes = [n for n in everyone if n.get("Resources", {}).get(RESOURCE, 0) >= slots]
    if not names or not nodes:
        return {}  # no image to check, or no node to run on (the executor says so next)
    remote = ray.remote(node_preflight)
    refs = {remote.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
        node["NodeID"], soft=False)).remote(names, budget_gb, registry_timeout): labels[node["NodeID"]]
        for node in nodes}
    deadline = time.monotonic() + registry_timeout + PREFLIGHT_TIMEOUT
    reports: dict[str, NodeReport] = {}
    for ref, label in refs.items():
        try:
            reports[label] = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
        except Exception as error:  # noqa: BLE001 - a node that does not answer: said, not fatal
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
            reports[label] = {"unanswered": True, "error": f"no answer ({type(error).__name__}); its tasks find out "
                                                           "when they start"}
    announce(f"images on {len(reports)} node(s):")
    for label, report in sorted(reports.items()):
        announce(f"  {label}: {report.get('line') or report.get('error')}")
    problems: dict[str, list[str]] = {}
    for label, report in sorted(reports.items()):
        text = None if report.get("unanswered") else (report.get("problem") or report.get("error"))
        if text:
            problems.setdefault(text, []).append(label)
    if problems:
        raise RuntimeUnavailable("; ".join(f"on {', '.join(where)}: {text}" for text, where in problems.items())
                                 + "; or pass --skip-image-check")
    return reports


def check_run_images_on_nodes(tasks: list[Task], settings: RunSettings, announce: Callable[[str], None] = print,
                              registry_timeout: float | None = None) -> dict[str, NodeReport]:
    """``check_run_images`` for ``run --executor ray``: the images of the run's unfinished tasks, on every node."""
    from pipeline.runtime.images.names import run_image_names

    finished = finished_predictions(settings.layout.predictions)
    todo = [t for t in tasks if t.instance_id not in finished]
    return check_images_on_nodes(connect(settings.config.executor.ray_address),
                                 run_image_names(todo, settings.image_template),
                                 settings.config.containers.image_cache_gb, announce, registry_timeout,
                                 slots=slots_per_task(settings))
