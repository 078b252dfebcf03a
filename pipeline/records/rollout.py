"""A junior rollout's record (pipeline.juniors.rollout.run_rollout)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.records.base import Int, Number, Record, Text, absent
from pipeline.records.retrieval import RetrievalFinding
from pipeline.rundir.layout import NN, TASK, rollout_file


class Rollout(Record):
    """One junior rollout: the agent's whole trajectory, the candidate patch it left (the working tree's `git diff`
    against the base commit, whatever ended it), how it ended, and what it cost. Written once, when the rollout
    ends; a rerun reuses it as it is. While it runs, its trajectory is the journal rollout-NN.trajectory.jsonl."""

    FILE = str(TASK.junior_files.rollout(NN))

    instance_id: Text = absent("the task")
    index: Int = absent("the rollout's number, from 0 (NN in the file name); records without "
                        "it take the number of their file name")
    model: Text = absent("the junior model (litellm's model string)")
    temperature: Number = absent("the sampling temperature of this rollout")
    seed: Int = absent("juniors.seed plus the index")
    patch: Text = absent("the candidate: the working tree's diff (bytes that are not UTF-8 as "
                         "\\udcXX escapes); empty when there is none or it could not be taken")
    patch_source: Text | None = absent("\"git diff\" when the patch was taken; null when not")
    exit_reason: Text = absent("how it ended: the agent's reason (submitted, step_limit, "
                               "cost_limit, format_errors, ...), or runtime_error, patch_error, "
                               "patch_too_large, resource_limit")
    error: Text | None = absent("what went wrong, if anything")
    trajectory: dict[str, Any] | None = absent("the agent's record (pipeline.agent.agent_run.AgentRun: "
                                               "messages, steps, cost, tokens, seconds); absent "
                                               "when no agent ran")
    traceback: Text = absent("an unexpected failure's traceback")
    patch_error: Text = absent("why the diff could not be taken (or was dropped)")
    patch_dropped: Text = absent("\"too_large\": a diff over juniors.max_patch_bytes, dropped; an imported patch "
                                 "kept out of the pool: \"git_dir\" (it touches .git/), \"binary\" (a binary "
                                 "diff), \"does_not_apply\" (not to the base commit)")
    agent_exit_reason: Text | None = absent("with a patch_error: the agent's own exit reason")
    submodule_changes: list[Text] = absent("submodules edited inside, which a patch to the parent "
                                           "repository cannot carry")
    patch_note: Text = absent("a note on the patch (the submodules left out)")
    base_entries: list[Text] = absent("what the base commit holds around the patch's new files "
                                      "(pipeline.juniors.pool.source_tree_probe), for the pool")
    cost: Number = absent("dollars the rollout's calls cost")
    input_tokens: Int = absent("input tokens of its calls")
    output_tokens: Int = absent("output tokens of its calls")
    seconds: Number = absent("the agent's wall time")
    steps: Int = absent("the agent's steps")
    reused_from: Text = absent("the junior folder of the run it was copied from "
                               "(--reuse-juniors-from): paid for there")
    scratch_left_out: dict[str, Text] = absent("with limits.leave_out_scratch: the files left out of the patch, each "
                                               "with the reason")
    imported_from: Text = absent("the source it was taken in from (run --juniors-from: a swepipe run, a "
                                 "predictions file or a folder of trajectories); not run here")
    imported_cost: Number | None = absent("dollars the source recorded for it: spent there, never counted as "
                                          "this run's spend; null when the source recorded none")
    retrieval: list[RetrievalFinding] = absent("the retrieval audit's findings on its trajectory (pipeline.audit): the "
                                               "steps that reached for the answer instead of deriving it; [] when "
                                               "none; absent when it was not audited (an older record, an imported "
                                               "candidate without a trajectory)")
    unaudited: Text = absent("an imported candidate that could not be audited, and why (a predictions file holds "
                             "no trajectory)")

    @classmethod
    def upgrade(cls, data: dict[str, Any], version: int, path: Path | None) -> dict[str, Any]:
        """Format 0: a record without its index takes its file name's."""
        named = rollout_file(path.name) if path is not None else None
        if data.get("index") is None and named and not named[1]:
            data["index"] = named[0]
        return data

    def without_trajectory(self) -> Rollout:
        """This record, its trajectory (the bulk of it) left out: what a report keeps of every rollout."""
        kept = self.model_copy()
        kept.__dict__["trajectory"] = None
        kept.__pydantic_fields_set__.discard("trajectory")
        return kept
