"""How a task's agents' containers were sealed: one ``ContainerSeal`` per container its strategy opened, from what
the sanitise step found in its repository (pipeline.runtime.seal), kept in the task's prediction (``containers``);
``TaskContainers`` carries them from one session of a run to the next, so a resumed task's prediction also names the
containers of the stages an earlier session finished."""

from __future__ import annotations

from pipeline.records.base import Flag, Int, Part, Record, Text, absent
from pipeline.rundir.layout import TASK


class ContainerSeal(Part):
    """One agent's container (or the local runtime's clone that stood in for one): how its repository was sealed,
    as found right after its sanitise step (a sanitised image keeps those facts, and every container of it reports
    them), and whether it had the network."""

    role: Text = absent("the agent it was opened for: rollout-NN (a junior), senior (its read-only view), principal, "
                        "solo, team (the lead and its workers share it), or a plug-in's role")
    read_only: Flag = absent("opened read-only (the senior's view)")
    runtime: Text = absent("docker; local (a clone on this machine: its network is the opener's setting, not cut); "
                           "unknown (an opener that reports no seal)")
    sanitised: Flag = absent("the sanitise step ran on its repository (its history replaced by the base's alone)")
    sealed: Flag = absent("sanitised, and its repositories hold nothing beyond the base commit: no ref, no remote, no "
                          "reflog, no object the base does not reach")
    commits: Int | None = absent("commits reachable from HEAD (the base commit and its history)")
    other_refs: Int | None = absent("refs of any kind (branches, tags, stashes, notes; HEAD is none), submodules "
                                    "included")
    remotes: Int | None = absent("remotes configured, submodules included")
    reflogs: Int | None = absent("reflog files, submodules included")
    unreachable_objects: Int | None = absent("objects in the store (alternates included) that HEAD does not reach, "
                                             "submodules included")
    submodules: Int = absent("initialised submodules looked at the same way")
    network: Flag | None = absent("it had the network (containers.network; a read-only view never has); null: not "
                                  "known")
    missing: Text = absent("why the facts above are not known")


class TaskContainers(Record):
    """The containers a task's sessions opened, how each was sealed, by role (a later session's replaces an earlier
    one's of the same role); copied into its prediction when it finishes."""

    FILE = str(TASK.containers)

    containers: list[ContainerSeal] = absent("one per container, in the order they were first opened")
