"""The retrieval audit's findings as records hold them (pipeline.audit): on a junior rollout, an imported candidate,
the solo agent's and the team's results, the senior's brief and a replay's record; the pool names the candidates
that came from such trajectories."""

from __future__ import annotations

from pipeline.records.base import Int, Part, Text, absent


class RetrievalFinding(Part):
    """A step of an agent's trajectory that reached for the answer instead of deriving it (pipeline.audit)."""

    kind: Text = absent("history (read history beyond the base commit), network (fetched the repository, its fix "
                        "or a release over the network) or outside (read from outside the task)")
    step: Int = absent("the step: its index in a swepipe agent's trajectory (from 0, as task pages number steps); "
                       "its place from 1 in another harness's trajectory (as replay's notes number them)")
    command: Text = absent("the step's command as recorded (its first 4,000 characters, then …); an editor call "
                           "as '<command> <path>'")
    reason: Text = absent("why: the program as it ran and what it reached for")
    agent: Text = absent("whose trajectory it is, where a record holds several (the team's lead, worker-N)")


class ReachedRollout(Part):
    """A rollout of a pool candidate whose trajectory reached for the answer."""

    rollout: Int = absent("the rollout's index")
    findings: list[RetrievalFinding] = absent("what its trajectory did, as its record holds it")
