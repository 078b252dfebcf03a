"""The team baseline: a lead and its workers in one container; the final diff is the prediction."""

from __future__ import annotations

import time

from pipeline.audit import task_subject
from pipeline.job import TaskJob, once
from pipeline.records import TeamResult
from pipeline.records.sources import PatchSource
from pipeline.settings.model_spec import Role
from pipeline.strategies.answer import TaskAnswer
from pipeline.strategies.base import BaseStrategy
from pipeline.team.lead import run_team
from pipeline.text import patchtext
from pipeline.text.prompts import render_task_prompt


class TeamStrategy(BaseStrategy):
    name = "team"
    roles = (Role.LEAD, Role.WORKER)
    spend_by = "role"

    def run_task(self, job: TaskJob) -> TaskAnswer:
        """Writes tasks/<id>/team/{lead,worker-N}.trajectory.json, commands.jsonl, delegations.json,
        messages.json, lead_waits.json, result.json and patch.diff (and submission.json with the guard off)."""
        files = job.paths.team_files
        job.stage = "team"

        def make() -> TeamResult:
            started = time.monotonic()
            lead, worker = (job.client(role, stage="team") for role in self.roles)
            runtime = job.open_runtime("team", background=True)
            try:
                result = run_team(render_task_prompt(job.task), runtime, lead, worker, job.budget, job.config,
                                  files.root, subject=task_subject(job.task, str(runtime.workdir)))
            finally:
                runtime.stop()
            job.seconds["team"] = round(time.monotonic() - started, 2)
            patchtext.write(files.patch, result.patch)
            return result

        result = once(files.result, make, TeamResult)
        source = PatchSource.TEAM if result.patch.strip() else PatchSource.NONE
        return TaskAnswer(model_patch=result.patch, source=source,
                          error=result.error, exit_reason=result.exit_reason,
                          workers=result.workers if "workers" in result.model_fields_set else 0,
                          delegations=result.delegations,
                          lost_work=result.lost_work if "lost_work" in result.model_fields_set else [])
