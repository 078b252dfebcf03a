"""How a run's agents' containers were sealed, from its predictions' ``containers`` (pipeline.records.sealing): how
many were sealed, whether any had the network, and the warnings a report and the end of a run put first."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.analysis.load import RunData, config_section
from pipeline.analysis.table import NA
from pipeline.records import Prediction
from pipeline.records.sealing import ContainerSeal

SHOWN = 5  # unsealed containers named in a warning; the rest are counted


@dataclass
class SealCount:
    """The containers of a run's finished tasks, as their predictions record them."""

    tasks: int = 0  # finished tasks
    not_recorded: int = 0  # of them, those whose prediction says nothing of its containers (an older run)
    containers: int = 0
    sealed: int = 0
    network: int = 0  # containers that had the network
    network_unknown: int = 0  # containers whose network is not on record
    local: int = 0  # local clones standing in for containers (the network setting not enforced)
    setting: bool | None = None  # the run's containers.network (None: its config does not say)
    elsewhere: int = 0  # tasks whose rollouts (some or all) ran elsewhere: reused from a run, imported
    unsealed: list[str] = field(default_factory=list)  # "<task> <role>: why", for each container not sealed

    @property
    def recorded(self) -> bool:
        return self.tasks > self.not_recorded

    @property
    def loud(self) -> bool:
        """The network was on (by the config, or in a container), or a container was not sealed."""
        return bool(self.setting) or self.network > 0 or self.sealed < self.containers


def seal_count(predictions: list[Prediction], setting: object = None) -> SealCount:
    """``predictions``: the run's finished tasks; ``setting``: its config's containers.network."""
    count = SealCount(tasks=len(predictions), setting=setting if isinstance(setting, bool) else None)
    for prediction in predictions:
        count.elsewhere += bool(prediction.juniors_reused_from or prediction.imported_from)
        containers = prediction.containers
        if not isinstance(containers, list):
            count.not_recorded += 1
            continue
        for entry in containers:
            if not isinstance(entry, ContainerSeal):
                continue
            count.containers += 1
            count.local += entry.runtime == "local"
            if entry.network is True:
                count.network += 1
            elif entry.network is not False:
                count.network_unknown += 1
            if entry.sealed is True:
                count.sealed += 1
            else:
                count.unsealed.append(f"{prediction.instance_id} {entry.role}: {why_not_sealed(entry)}")
    return count


def run_seal_count(run: RunData) -> SealCount:
    """``seal_count`` of a run on disk: its finished tasks and its config's containers.network."""
    return seal_count([task.prediction for task in run.tasks], config_section(run.config, "containers").get("network"))


def why_not_sealed(entry: ContainerSeal) -> str:
    """What keeps a container from being sealed, in words."""
    if entry.missing:
        return f"not known ({entry.missing})"
    reasons = [] if entry.sanitised is True else ["not sanitised"]
    for name, words in (("other_refs", "ref(s) besides HEAD"), ("remotes", "remote(s)"), ("reflogs", "reflog(s)"),
                        ("unreachable_objects", "object(s) the base does not reach")):
        value = getattr(entry, name)
        if value is None or not isinstance(value, int) or isinstance(value, bool):
            reasons.append(f"{words}: not known")
        elif value:
            reasons.append(f"{value} {words}")
    return ", ".join(reasons) or "not sealed"


def sealed_words(count: SealCount) -> str:
    """"sealed: 12 of 12 containers; network off", or "not recorded" for a run before swepipe recorded it ("n/a"
    for one with no finished task)."""
    if not count.tasks:
        return NA
    if not count.recorded:
        return "not recorded"
    if count.network == 0 and count.network_unknown == 0:
        network = "network off"
    elif count.network == count.containers:
        network = "network on"
    else:
        network = ", ".join(part for part in (
            f"network on in {count.network}" if count.network else "",
            f"not known in {count.network_unknown}" if count.network_unknown else "") if part) + \
            f" of {count.containers}"
    words = f"sealed: {count.sealed} of {count.containers} containers; {network}"
    if count.setting:
        words += " (containers.network on)"
    if count.local:
        words += f"; {count.local} a local clone (no container: the network setting not enforced)"
    if count.not_recorded:
        words += f"; {count.not_recorded} task(s) not recorded"
    if count.elsewhere:
        words += (f"; {count.elsewhere} task(s) with rollouts that ran elsewhere (reused or imported), whose "
                  "containers are not counted")
    return words


def seal_warnings(run_id: str, count: SealCount) -> list[str]:
    """The warnings to put first: the network on, containers not sealed."""
    warnings = []
    if count.setting or count.network:
        warnings.append(f"Warning: {run_id}: the agents' containers had the network ({count.network} of "
                        f"{count.containers}{', containers.network on' if count.setting else ''}): they could fetch "
                        "the repository, its fix or a newer release, so a resolved task may be retrieval, not repair")
    if count.sealed < count.containers:
        named = "; ".join(count.unsealed[:SHOWN]) + (f"; and {len(count.unsealed) - SHOWN} more"
                                                     if len(count.unsealed) > SHOWN else "")
        warnings.append(f"Warning: {run_id}: {count.containers - count.sealed} of {count.containers} containers were "
                        f"not sealed (history beyond the base within an agent's reach): {named}")
    return warnings
