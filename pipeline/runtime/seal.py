"""How an agent's workspace was sealed, from what its repository was found to hold (``seal.sh``, run right after
the sanitise step, or alone where that step did not run) and whether it had the network.

A sanitised image carries the facts its sanitising found as a label (``SEAL_LABEL``), so every container of it
reports them without looking again; the local runtime reports those of its own sanitise. ``Seal.record_fields``
gives them as the task's record keeps them (pipeline.records.sealing).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from importlib.resources import files
from typing import NotRequired, TypedDict

SEAL_SCRIPT = files("pipeline.runtime").joinpath("seal.sh").read_text()
SEAL_LABEL = "swepipe.seal"  # on a sanitised image: the facts its sanitising found, as JSON
_MARK = "swepipe seal: "
_COUNTS = ("commits", "refs", "remotes", "reflogs", "objects", "reachable")


@dataclass(frozen=True)
class RepositoryFacts:
    """One repository as ``seal.sh`` found it (the top one, or an initialised submodule); None: git could not
    say."""

    path: str
    commits: int | None
    refs: int | None
    remotes: int | None
    reflogs: int | None
    objects: int | None
    reachable: int | None

    @property
    def unreachable(self) -> int | None:
        """Objects in the store that HEAD does not reach: history beyond the base."""
        return None if self.objects is None or self.reachable is None else max(self.objects - self.reachable, 0)


def read_facts(output: str) -> list[RepositoryFacts]:
    """The repositories ``seal.sh`` reported in ``output`` (other lines ignored), the top one first."""
    found = []
    for line in output.splitlines():
        if not line.startswith(_MARK):
            continue
        parts = line[len(_MARK):].split(" ", len(_COUNTS))
        if len(parts) != len(_COUNTS) + 1:
            continue
        numbers = [int(part) if part.isdigit() else None for part in parts[:-1]]
        found.append(RepositoryFacts(parts[-1], *numbers))
    return found


class SealFields(TypedDict):
    """A seal as a container's entry in the task's record holds it (pipeline.records.sealing.ContainerSeal): the
    counts when the repository was looked at, else why not (``missing``)."""

    runtime: str
    sanitised: bool
    network: bool | None
    sealed: bool
    missing: NotRequired[str]
    commits: NotRequired[int | None]
    other_refs: NotRequired[int | None]
    remotes: NotRequired[int | None]
    reflogs: NotRequired[int | None]
    unreachable_objects: NotRequired[int | None]
    submodules: NotRequired[int]


@dataclass(frozen=True)
class Seal:
    """A workspace's seal: how its repository was found (``repositories``: none when it could not be looked at,
    ``missing`` says why), whether the sanitise step ran, whether it had the network, and where it ran."""

    sanitised: bool
    repositories: tuple[RepositoryFacts, ...] = ()
    network: bool | None = None  # None: not known
    runtime: str = "docker"  # docker, or local (a clone on this machine: the network setting is not enforced)
    missing: str | None = None  # why there are no facts

    @property
    def sealed(self) -> bool:
        """Sanitised, and every repository holds nothing beyond HEAD: no ref, no remote, no reflog, no object
        HEAD does not reach."""
        return self.sanitised and bool(self.repositories) and all(
            facts.refs == 0 and facts.remotes == 0 and facts.reflogs == 0 and facts.unreachable == 0
            for facts in self.repositories)

    def with_network(self, network: bool | None, runtime: str) -> Seal:
        return replace(self, network=network, runtime=runtime)

    def label(self) -> str:
        """The facts as the sanitised image's label keeps them (not the network: that is each container's)."""
        return json.dumps({"sanitised": self.sanitised, "repositories": [asdict(r) for r in self.repositories],
                           "missing": self.missing})

    @classmethod
    def from_label(cls, text: str | None) -> Seal:
        """The facts an image's label holds; an image without them (sanitised before they were kept, or not by
        swepipe) says so in ``missing``."""
        if not text:
            return cls(sanitised=False, missing="the image carries no record of a sanitise step")
        try:
            data = json.loads(text)
            repositories = tuple(RepositoryFacts(str(facts["path"]), *(_count(facts.get(name)) for name in _COUNTS))
                                 for facts in data["repositories"])
            missing = data.get("missing")
            return cls(sanitised=data["sanitised"] is True, repositories=repositories,
                       missing=missing if isinstance(missing, str) else None)
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            return cls(sanitised=False, missing=f"the image's {SEAL_LABEL} label cannot be read ({error})")

    def record_fields(self) -> SealFields:
        """The fields of a container's entry in the task's record (pipeline.records.sealing.ContainerSeal)."""
        top = self.repositories[0] if self.repositories else None
        fields: SealFields = {"runtime": self.runtime, "sanitised": self.sanitised, "network": self.network,
                              "sealed": self.sealed}
        if top is None:
            fields["missing"] = self.missing or "nothing was found"
            return fields
        fields["commits"] = top.commits
        fields["other_refs"] = _sum(r.refs for r in self.repositories)
        fields["remotes"] = _sum(r.remotes for r in self.repositories)
        fields["reflogs"] = _sum(r.reflogs for r in self.repositories)
        fields["unreachable_objects"] = _sum(r.unreachable for r in self.repositories)
        fields["submodules"] = len(self.repositories) - 1
        return fields


def found(output: str, sanitised: bool) -> Seal:
    """The seal ``seal.sh``'s ``output`` reports (the network and runtime still to be said)."""
    repositories = tuple(read_facts(output))
    return Seal(sanitised=sanitised, repositories=repositories,
                missing=None if repositories else "the repository could not be looked at: "
                                                  + (output.strip()[-300:] or "no output"))


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _sum(values: Iterable[int | None]) -> int | None:
    """The sum of counts, None when any is unknown."""
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total
