"""Scoring profiles: the resources and time limit the hidden tests run under, chosen by name and recorded.

Verdicts move with resources (a suite that passes in 40 s on four CPUs can time out on a quarter of one), so a
result is only comparable with another scored under the same profile. Two are offered:

- ``local``: plain local Docker, as the official evaluator runs with ``--use_local_docker``: no CPU cap (each
  container may use every CPU of the machine), the memory, process and file limits every swepipe container has
  (sized so that the containers scored at once leave the host room), 1800 s.
- ``official``: the official grader's sandbox (``swe_bench_pro_eval.py``: Modal, ``cpu=(1, 4)``,
  ``memory=(5 GiB, 30 GiB)``, ``timeout=3600``): at most 4 CPUs and 30 GiB per container, capped at what this
  machine has, 3600 s.

Every result.json records the profile's name beside the limits and time limit it really had.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pipeline.errors import SwepipeError
from pipeline.runtime.limits import GIB, MEMORY_SHARE, ContainerLimits, machine_cpus, machine_memory


@dataclass(frozen=True)
class ScoringProfile:
    name: str
    timeout: float  # seconds the tests may take
    cpus: float | None  # per container; None: no cap (every CPU of the machine)
    memory: int | None  # bytes per container; None: the host-safe share every swepipe container gets
    summary: str

    def limits(self, base: ContainerLimits) -> ContainerLimits:
        """``base`` (the limits every container gets) with this profile's CPUs and memory, capped at the machine."""
        cpus = float(min(self.cpus, machine_cpus())) if self.cpus else float(machine_cpus())
        memory = min(self.memory, int(machine_memory() * MEMORY_SHARE)) if self.memory else base.memory
        return dataclasses.replace(base, cpus=cpus, memory=memory, tmp_size=min(base.tmp_size, memory))


PROFILES = {profile.name: profile for profile in (
    ScoringProfile("local", 1800, None, None, "plain local Docker: no CPU cap, 1800 s"),
    ScoringProfile("official", 3600, 4, 30 * GIB, "the official grader's sandbox: 4 CPUs, 30 GiB, 3600 s"),
)}
DEFAULT_PROFILE = "local"


def scoring_profile(name: str) -> ScoringProfile:
    """The profile called ``name``; a clear error naming the ones there are."""
    try:
        return PROFILES[name]
    except KeyError:
        raise SwepipeError(f"no scoring profile {name!r}; choose one of: "
                           + "; ".join(f"{p.name} ({p.summary})" for p in PROFILES.values())) from None
