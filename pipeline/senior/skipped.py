"""The senior stage when ``principal.skip_when`` holds (pipeline.principal.skip): no model, no workspace; its brief
records the skip and why."""

from __future__ import annotations

from pipeline.job import TaskJob, once
from pipeline.pool_rules import CandidatePool
from pipeline.records import Brief
from pipeline.records.brief import SkipDecision
from pipeline.records.sources import BriefSource
from pipeline.settings.config import RunConfig


class SkippedBrief:
    """A senior stage that calls no model (``role = None``): ``brief(job, pool)`` records senior/brief.json with
    source ``skipped`` and the skip rule's decision, and an empty context."""

    role = None

    def __init__(self, config: RunConfig, decision: SkipDecision):
        self.config, self.decision = config, decision

    def brief(self, job: TaskJob, pool: CandidatePool) -> Brief:
        """The brief an earlier session recorded (the resume cache), else the one that records the skip."""
        return once(job.paths.senior_files.brief, lambda: self.skip_record(job), Brief).model_copy(
            update={"context": ""})

    def skip_record(self, job: TaskJob) -> Brief:
        job.paths.senior.mkdir(parents=True, exist_ok=True)
        return Brief.of({
            "source": BriefSource.SKIPPED, "analysis": f"(Skipped by principal.skip_when: {self.decision.reason}.)",
            "spans": [], "candidate": 1, "problems": [], "context_spans": None, "context_tokens": 0,
            "senior_error": None, "senior_exit": "skipped", "senior_cost": 0.0, "senior_steps": 0,
            "skipped": self.decision.to_dict()})
