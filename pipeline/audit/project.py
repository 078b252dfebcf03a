"""What the audit knows of the task a trajectory worked on (``Subject``), and the names its project goes by: its
repository (``owner/name``), the package names a registry would list it under, its Go module path, and the forms
a task's instance id takes (SWE-bench's ``owner__name-1234``, SWE-Bench Pro's ``instance_owner__name-<sha>...``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.tasks import Task

HEX_HASH = re.compile(r"(?<![0-9A-Za-z])[0-9a-f]{7,40}(?![0-9A-Za-z])")
# A path segment that is a task's instance id: SWE-bench's owner__name-1234, SWE-Bench Pro's instance_owner__name-...
INSTANCE_ID = re.compile(r"^(?:instance_)?([A-Za-z0-9][A-Za-z0-9_.-]*?)__([A-Za-z0-9][A-Za-z0-9_.-]*?)-"
                         r"(?:\d+|[0-9a-f]{7,40})(?:-v[0-9a-f]+)?$")


def normalised(name: str) -> str:
    """A package name as registries compare them (PEP 503: case and runs of ``-_.`` do not count)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def repo_of_instance_id(instance_id: str | None) -> str | None:
    """The repository an instance id names (``django__django-11099`` -> ``django/django``), or None."""
    match = INSTANCE_ID.match((instance_id or "")[:200])
    return f"{match.group(1)}/{match.group(2)}" if match else None


@dataclass(frozen=True)
class Subject:
    """The task a trajectory worked on, as far as it is known: its instance id, repository (``owner/name``), base
    commit, the text it was given (the hashes it names are the base's history, see pipeline.audit.history) and
    where its repository was checked out (``/app`` in swepipe's containers, ``/testbed`` in SWE-bench's)."""

    instance_id: str | None = None
    repo: str | None = None
    base_commit: str | None = None
    task_text: str = ""
    repo_root: str | None = None
    names: frozenset[str] = field(init=False)
    owner: str | None = field(init=False)
    repo_name: str | None = field(init=False)  # the repository's name as written (a folder a harness may clone to)

    def __post_init__(self) -> None:
        repo = self.repo or repo_of_instance_id(self.instance_id)
        owner, _, name = (repo or "").strip().strip("/").rpartition("/")
        name = name.removesuffix(".git")
        names = {normalised(name)} if name else set()
        object.__setattr__(self, "names", frozenset(names))
        object.__setattr__(self, "owner", owner.lower() or None)
        object.__setattr__(self, "repo_name", name or None)

    @property
    def known(self) -> bool:
        """Whether the project is known (its repository named, or an instance id that names it)."""
        return bool(self.names)

    def is_project(self, name: str) -> bool:
        """Whether ``name`` (a package, a repository's name) is the project's own."""
        return bool(name) and normalised(name.removesuffix(".git")) in self.names

    def is_project_module(self, module: str) -> bool:
        """Whether the Go module path ``module`` is the project's (or a package of it): its repository on its host,
        or a path whose last part (a major version's ``/vN`` aside) is the project's name."""
        parts = [part for part in module.lower().split("/") if part]
        if len(parts) >= 3 and parts[0] in ("github.com", "gitlab.com", "bitbucket.org") and \
                self.is_project(parts[2]):
            return True
        while parts and re.fullmatch(r"v\d+", parts[-1]):
            parts.pop()
        return len(parts) >= 2 and "." in parts[0] and self.is_project(parts[-1])


def task_subject(task: Task, repo_root: str | None = None) -> Subject:
    """What the audit knows of a task of the dataset: all of it (its text is what its agents are given: the problem
    statement, the requirements, the interface)."""
    text = "\n\n".join(part for part in (task.problem_statement, task.requirements, task.interface) if part)
    return Subject(instance_id=task.instance_id, repo=task.repo, base_commit=task.base_commit, task_text=text,
                   repo_root=repo_root)
