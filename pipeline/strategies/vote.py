"""The vote baseline: juniors only, and the source candidate most rollouts proposed is submitted.

What the pipeline is measured against: the same paid-for rollouts, used by a vote instead of being
handed to a senior and a principal.
"""

from __future__ import annotations

from pipeline.errors import SwepipeError
from pipeline.job import TaskJob
from pipeline.juniors.stage import junior_stage
from pipeline.records.sources import PatchSource
from pipeline.settings.config import RunConfig
from pipeline.settings.model_spec import Role
from pipeline.strategies.answer import TaskAnswer
from pipeline.strategies.base import BaseStrategy
from pipeline.strategies.pipeline import reused_juniors, with_imported


class VoteStrategy(BaseStrategy):
    name = "vote"
    roles = (Role.JUNIOR,)

    def __init__(self, config: RunConfig):
        super().__init__(config)
        self.needed_roles(config)

    @staticmethod
    def needed_roles(config: RunConfig) -> tuple[str, ...]:
        """The juniors, unless k is 0 and every candidate is imported (--juniors-from: a vote over published runs
        calls no model); a vote among no rollouts and no imported candidates is refused before anything is
        spent."""
        if config.juniors.k == 0 and not config.juniors.imported:
            raise SwepipeError("the vote strategy needs juniors, but juniors.k is 0 and no candidates are imported: "
                               "there would be nothing to vote on; pass -k N (N >= 1) or --juniors-from")
        return ("junior",) if config.juniors.k > 0 else ()

    def run_task(self, job: TaskJob) -> TaskAnswer:
        rollouts, pool = junior_stage(job)
        # The pool lists candidates most-voted first; ties keep the order of the earliest rollout.
        top = pool.candidates[0] if pool.candidates else None
        reused_from, carried = reused_juniors(rollouts)
        return with_imported(TaskAnswer(
            model_patch=top.patch if top else "", source=PatchSource.VOTE if top else PatchSource.NONE,
            error=None if top else "no rollout left a source edit", votes=top.votes if top else 0,
            juniors_reused_from=reused_from, carried_spend={"junior": carried} if carried else {}), rollouts)
