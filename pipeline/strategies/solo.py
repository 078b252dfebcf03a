"""The solo baseline: one agent, one model, end to end; its final diff is the prediction."""

from __future__ import annotations

import time

from pipeline.audit import audit_agent, task_subject
from pipeline.job import TaskJob, once
from pipeline.juniors.rollout import leave_out_scratch, task_agent
from pipeline.models.client import ModelClient
from pipeline.records import SoloResult
from pipeline.records.sources import PatchSource
from pipeline.runtime.base import Runtime
from pipeline.settings.model_spec import Role
from pipeline.strategies.answer import TaskAnswer
from pipeline.strategies.base import BaseStrategy
from pipeline.text import patchtext


class SoloStrategy(BaseStrategy):
    name = "solo"
    roles = (Role.SOLO,)

    def run_task(self, job: TaskJob) -> TaskAnswer:
        """Writes tasks/<id>/solo/{trajectory.json, result.json, patch.diff}."""
        files = job.paths.solo_files
        job.stage = "solo"

        def make() -> SoloResult:
            started = time.monotonic()
            runtime = job.open_runtime("solo", background=True)
            try:
                agent = task_agent(job, "solo", self.client(job, runtime), runtime, job.budget,
                                   system_prompt=job.config.solo.prompt, trajectory_path=files.trajectory)
                agent.resume()
                run = agent.record if agent.finished else agent.run()
                patch = runtime.diff()
                patch, left_out = leave_out_scratch(runtime, patch) if job.config.limits.leave_out_scratch \
                    else (patch, {})
            finally:
                runtime.stop()
            job.seconds["solo"] = round(time.monotonic() - started, 2)
            patchtext.write(files.patch, patch)
            result = SoloResult.of({"exit_reason": run.exit_reason, "error": run.error, "steps": len(run.steps),
                                    "cost": run.cost, "prompt": job.config.solo.prompt, "patch": patch,
                                    "retrieval": audit_agent(run.to_dict(),
                                                             task_subject(job.task, str(runtime.workdir)))})
            if left_out:
                result.scratch_left_out = left_out
            return result

        result = once(files.result, make, SoloResult)
        source = PatchSource.SOLO if result.patch.strip() else PatchSource.NONE
        return TaskAnswer(model_patch=result.patch, source=source,
                          error=result.error, exit_reason=result.exit_reason)

    def client(self, job: TaskJob, runtime: Runtime) -> ModelClient:
        """The agent's model, once its workspace is open."""
        return job.client(Role.SOLO)
