"""Image names and their registries: a task's image name from the template, the local image of a name, the
registry a name points at and whether it holds the image. A leaf of the image layer: it imports none of the other
image modules (``prepare``, ``disk``, ``preflight``, ``prune``, ``prefetch``, ``cache``, ``debian_base``), which
import it.
"""

from __future__ import annotations

import string
import threading
from collections.abc import Mapping

from docker.errors import APIError, DockerException, ImageNotFound

from pipeline.errors import InfrastructureFault, RuntimeUnavailable, SwepipeError
from pipeline.runtime import containers

REGISTRY_TIMEOUT = 20.0  # seconds one manifest query may take before the registry counts as unreachable


def image_name(template: str, fields: Mapping[str, object]) -> str:
    """Fill ``template`` from a task's fields, e.g. ``jefzda/sweap-images:{dockerhub_tag}``."""
    names = {name for _, name, _, _ in string.Formatter().parse(template) if name}
    missing = sorted(n for n in names if not fields.get(n))
    if missing:
        raise SwepipeError(
            f"image template {template!r} uses {', '.join(missing)}, which the task "
            f"{fields.get('instance_id', '?')} does not have; fix --image-template"
        )
    return template.format(**fields)


def run_image_names(tasks, image_template: str) -> list[str]:
    """The image name of each of ``tasks``, in order."""
    return [image_name(image_template, task.to_row()) for task in tasks]


def local_image(name: str):
    """The local image ``name`` (a name or an id), or None."""
    try:
        return containers.client().images.get(name)
    except ImageNotFound:
        return None


def error_text(exc: BaseException, width: int = 200) -> str:
    """A Docker error (or any) as one line of at most ``width`` characters: its explanation when it has one."""
    text = " ".join(str(getattr(exc, "explanation", None) or exc).split())
    return text if len(text) <= width else text[:width - 1] + "…"


def registry_host(name: str) -> str:
    """The registry an image name points at (``docker.io`` unless its first part names a host)."""
    first, slash, _ = name.partition("/")
    return first if slash and ("." in first or ":" in first or first == "localhost") else "docker.io"


def rate_limited(exc: BaseException) -> bool:
    """Whether a registry refused a request for its rate limit (Docker Hub: 429 ``toomanyrequests``)."""
    response = getattr(exc, "response", None)
    text = " ".join(str(getattr(exc, "explanation", None) or exc).split()).lower()
    return (getattr(response, "status_code", None) == 429 or "toomanyrequests" in text
            or "too many requests" in text or "rate limit" in text)


def registry_status(name: str, timeout: float = REGISTRY_TIMEOUT) -> str:
    """Whether the registry holds ``name`` (a manifest query through the engine, with the user's `docker login`
    credentials): ``available``, ``missing (...)``, or ``unknown (...)`` when it could not be asked; never longer
    than ``timeout`` seconds."""
    answer: dict[str, str] = {}

    def ask() -> None:
        try:
            containers.client().api.inspect_distribution(name)
            answer["status"] = "available"
        except APIError as exc:
            answer["status"] = _classify(exc)
        except (DockerException, RuntimeUnavailable) as exc:  # RuntimeUnavailable: no engine at all
            answer["status"] = f"unknown (registry unreachable: {error_text(exc)})"
        except InfrastructureFault:
            raise
        except Exception as exc:  # noqa: BLE001 - a connection error surfaces as requests' own types
            answer["status"] = f"unknown (registry unreachable: {error_text(exc)})"

    thread = threading.Thread(target=ask, name=f"manifest {name}", daemon=True)
    thread.start()
    thread.join(timeout)
    return answer.get("status") or f"unknown (registry unreachable: no answer in {timeout:.0f} s)"


def _classify(exc: APIError) -> str:
    text = error_text(exc)
    lowered = text.lower()
    code = getattr(exc, "status_code", None)
    if code == 429 or "toomanyrequests" in lowered or "rate limit" in lowered:
        return f"unknown (registry rate limit, 429: {text})"
    if any(word in lowered for word in ("manifest unknown", "not found", "does not exist", "name unknown")):
        return f"missing ({text})"
    if any(word in lowered for word in ("unauthorized", "denied", "authentication required")):
        return f"missing or private ({text}; `docker login` to the registry if it is private)"
    return f"unknown (registry unreachable: {text})"
