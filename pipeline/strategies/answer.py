"""What a strategy's ``run_task`` returns: the prediction's own fields for one task. The caller adds the instance,
strategy, models, dollars, tokens, timing and score (pipeline.run.task.run_one_task)."""

from __future__ import annotations

from pydantic import Field

from pipeline.records.base import Part, Word
from pipeline.records.brief import SkipDecision
from pipeline.records.team import LostWorkRecord
from pipeline.records.trajectory import ExitReason


class Spend(Part):
    """Spend carried in from elsewhere for one stage: rollouts reused from another run, paid there."""

    cost: float | int = 0.0
    input: int = 0
    cached: int = 0
    output: int = 0


class TaskAnswer(Part):
    """A strategy's answer to one task. Keys a plug-in strategy adds are kept and land in its prediction."""

    model_patch: str = Field("", description="the patch submitted; empty for none")
    source: str = Field("none", description="where the patch came from")
    error: str | None = Field(None, description="a stage's own error, when it gave no patch")
    exit_reason: Word[ExitReason] | None = Field(None, description="solo and team: how the agent (the lead) "
                                                                  "ended")
    skip_check: SkipDecision | None = Field(None, description="pipeline with principal.skip_when: its decision")
    juniors_reused_from: str | None = Field(None, description="the run the rollouts were reused from, if any")
    imported_from: list[str] | None = Field(None, description="the sources of the candidates taken in "
                                             "(--juniors-from) that are in this task's pool")
    imported_cost: float | None = Field(None, description="dollars those sources recorded for their candidates: "
                                        "spent there, not counted in this task's cost")
    carried_spend: dict[str, Spend] = Field(default_factory=dict, description="spend paid by another run, by "
                                                                              "stage (not in the prediction)")
    workers: int | None = Field(None, description="team: the workers started")
    delegations: dict[str, int] | None = Field(None, description="team: delegations by stage")
    lost_work: list[LostWorkRecord] | None = Field(None, description="team: work lost after the lead submitted")
    votes: int | None = Field(None, description="vote: the votes of the submitted candidate")
