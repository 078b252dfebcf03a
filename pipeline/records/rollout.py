"""A junior rollout's record (pipeline.juniors.rollout.run_rollout)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from pipeline.layout import NN, TASK, rollout_file
from pipeline.records.base import Int, Number, Record, Text



class Rollout(Record):
    """One junior rollout: the agent's whole trajectory, the candidate patch it left (the working tree's `git diff`
    against the base commit, whatever ended it), how it ended, and what it cost. Written once, when the rollout
    ends; a rerun reuses it as it is. While it runs, its trajectory is in rollout-NN.trajectory.json."""

    FILE = str(TASK.junior_files.rollout(NN))

    instance_id: Text = Field(None, description="the task")
    index: Int = Field(None, description="the rollout's number, from 0 (NN in the file name); records without "
                                         "it take the number of their file name")
    model: Text = Field(None, description="the junior model (litellm's model string)")
    temperature: Number = Field(None, description="the sampling temperature of this rollout")
    seed: Int = Field(None, description="juniors.seed plus the index")
    patch: Text = Field(None, description="the candidate: the working tree's diff (bytes that are not UTF-8 as "
                                          "\\udcXX escapes); empty when there is none or it could not be taken")
    patch_source: Text | None = Field(None, description="\"git diff\" when the patch was taken; null when not")
    exit_reason: Text = Field(None, description="how it ended: the agent's reason (submitted, step_limit, "
                                                "cost_limit, format_errors, ...), or runtime_error, patch_error, "
                                                "patch_too_large, resource_limit")
    error: Text | None = Field(None, description="what went wrong, if anything")
    trajectory: dict[str, Any] | None = Field(None, description="the agent's record (pipeline.agent.agent.AgentRun: "
                                                                "messages, steps, cost, tokens, seconds); absent "
                                                                "when no agent ran")
    traceback: Text = Field(None, description="an unexpected failure's traceback")
    patch_error: Text = Field(None, description="why the diff could not be taken (or was dropped)")
    patch_dropped: Text = Field(None, description="\"too_large\": a diff over juniors.max_patch_bytes, dropped")
    agent_exit_reason: Text | None = Field(None, description="with a patch_error: the agent's own exit reason")
    submodule_changes: list[Text] = Field(None, description="submodules edited inside, which a patch to the parent "
                                                            "repository cannot carry")
    patch_note: Text = Field(None, description="a note on the patch (the submodules left out)")
    base_entries: list[Text] = Field(None, description="what the base commit holds around the patch's new files "
                                                       "(pipeline.juniors.pool.layout_probe), for the pool")
    cost: Number = Field(None, description="dollars the rollout's calls cost")
    input_tokens: Int = Field(None, description="input tokens of its calls")
    output_tokens: Int = Field(None, description="output tokens of its calls")
    seconds: Number = Field(None, description="the agent's wall time")
    steps: Int = Field(None, description="the agent's steps")
    reused_from: Text = Field(None, description="the junior folder of the run it was copied from "
                                                "(--reuse-juniors-from): paid for there")

    @classmethod
    def upgrade(cls, data: dict, version: int, path: Path | None) -> dict:
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
