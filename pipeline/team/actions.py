"""The team actions' names and the YAML bodies of their blocks (```delegate, ```message, ```resume, ...).

Which block of a reply is the action is read by pipeline.agent.actions, as for every agent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml

from pipeline.agent.actions import ActionError, FormatError, fenced_block
from pipeline.text.linenumbers import line_number

__all__ = ["ActionError", "FormatError"]

STAGES = ("planning", "implementation", "verification")
LEAD_ACTIONS = ("bash", "delegate", "wait", "check", "message", "stop", "resume", "directory")
WORKER_ACTIONS = ("bash", "message", "directory")
_DELEGATION_KEYS = {"stage", "task", "writable"}


@dataclass(frozen=True)
class DelegationRequest:
    task: str
    stage: str
    writable: list[str] = field(default_factory=list)


def report_block(reply: str) -> str | None:
    """The text of the reply's ```report block, if it has a non-empty one."""
    return fenced_block(reply, "report")


def load_yaml(kind: str, body: str):
    try:
        return yaml.safe_load(body) if body.strip() else None
    except (yaml.YAMLError, ValueError, RecursionError) as error:  # a number past reading, nesting past the stack
        first = (str(error).splitlines() or [type(error).__name__])[0][:300]
        raise FormatError(f"your ```{kind} block is not valid YAML ({first})") from None


def parse_delegations(body: str, default_stage: str | None, workdir: str = "") -> list[DelegationRequest]:
    """One delegation (a mapping) or several (a list of mappings)."""
    data = load_yaml("delegate", body)
    items = data if isinstance(data, list) else [data]
    if not items or not all(isinstance(item, dict) for item in items):
        raise FormatError("a ```delegate block holds a YAML mapping {stage, task, writable} or a list of them")
    delegations = []
    for item in items:
        unknown = sorted(set(map(str, item)) - _DELEGATION_KEYS)
        if unknown:
            raise FormatError(f"unknown key(s) {', '.join(unknown)} in ```delegate; the keys are stage, task, writable")
        task = str(item.get("task") or "").strip()
        if not task:
            raise FormatError("every delegation needs a non-empty task")
        stage = str(item.get("stage") or default_stage or "").strip().lower()
        if stage not in STAGES:
            raise FormatError(f"a delegation's stage must be one of {', '.join(STAGES)} (got {stage or 'none'})")
        writable = item.get("writable")
        if writable is None:
            writable = ["."] if stage == "implementation" else []
        elif isinstance(writable, str):
            writable = [writable]
        if not isinstance(writable, list) or not all(isinstance(w, str) for w in writable):
            raise FormatError("writable is a list of folders or files, e.g. [src/pkg/]")
        delegations.append(DelegationRequest(task, stage, sorted({normalise_path(w, workdir) for w in writable})))
    return delegations


def parse_message(body: str) -> tuple[str, str]:
    data = load_yaml("message", body)
    if not isinstance(data, dict) or not str(data.get("text") or "").strip() or data.get("to") in (None, ""):
        raise FormatError("a ```message block is a YAML mapping {to: lead | worker-N | all, text: ...}")
    return str(data["to"]).strip(), str(data["text"]).strip()


def parse_resume(body: str) -> tuple[str, str]:
    data = load_yaml("resume", body)
    if not isinstance(data, dict) or data.get("worker") in (None, "") or not str(data.get("text") or "").strip():
        raise FormatError("a ```resume block is a YAML mapping {worker: worker-N, text: what to do next}")
    return worker_name(data["worker"]), str(data["text"]).strip()


def parse_names(body: str) -> list[str] | None:
    """Worker names in a ```wait, ```check or ```stop block; None (empty or ``all``) means every worker."""
    words = [w for w in re.split(r"[\s,\[\]]+", body or "") if w]
    if not words or [w.lower() for w in words] == ["all"]:
        return None
    return [worker_name(word) for word in words]


def worker_name(value) -> str:
    text = str(value).strip().lower()
    match = re.fullmatch(r"(?:worker[-_ ]?)?(\d+)", text)
    number = line_number(match.group(1)) if match else None
    if number is None:
        raise FormatError(f"{text[:60]!r} is not a worker name (worker-0, worker-1, ...)")
    return f"worker-{number}"


def normalise_path(path: str, workdir: str = "") -> str:
    """A path relative to the repository ("." for all of it); absolute paths under ``workdir`` are made relative."""
    text, root = path.strip(), workdir.rstrip("/")
    if root and (text == root or text.startswith(root + "/")):
        text = text[len(root):]
    text = text.strip("/")
    while text.startswith("./"):
        text = text[2:].lstrip("/")
    return text if text and text != "." else "."


def inside(path: str, folders: list[str]) -> bool:
    return any(folder == "." or path == folder or path.startswith(folder + "/") for folder in folders)
