"""`swepipe replay`'s strategy: the solo agent, its model each task's recorded replies, then the replay set beside
its record (tasks/<id>/replay/result.json). Nothing is called and nothing is paid: the model is swepipe's scripted
one, reading the replies written to tasks/<id>/replay/script.json from the trajectory `swepipe replay` read."""

from __future__ import annotations

from pipeline.audit import task_subject
from pipeline.interop.recorded import audit_recorded
from pipeline.interop.replay import (
    compare_patches,
    exit_code_differences,
    not_submitted,
    read_recorded,
    script_replies,
)
from pipeline.job import TaskJob, once
from pipeline.models.client import ModelClient
from pipeline.records import ReplayResult, read_json, read_trajectory
from pipeline.rundir.storage import write_json_atomic
from pipeline.runtime.base import Runtime
from pipeline.settings.model_spec import ModelSpec, Role
from pipeline.strategies.answer import TaskAnswer
from pipeline.strategies.solo import SoloStrategy


class ReplayStrategy(SoloStrategy):
    name = "replay"
    roles = (Role.SOLO,)

    def run_task(self, job: TaskJob) -> TaskAnswer:
        if not job.paths.replay_files.recorded.exists():
            raise FileNotFoundError(f"{job.paths.replay_files.recorded}: no recorded trajectory for this task; "
                                    "replay one with `swepipe replay TRAJECTORY ...`, which writes it")
        answer = super().run_task(job)
        once(job.paths.replay_files.result, lambda: self.compare(job, answer.model_patch), ReplayResult)
        return answer

    def client(self, job: TaskJob, runtime: Runtime) -> ModelClient:
        """The scripted model, serving the recorded replies with the source's paths read in this workspace (written
        once: a resumed replay goes on with the same replies)."""
        files = job.paths.replay_files
        if not files.script.exists():
            replies, notes = script_replies(read_recorded(files.recorded), str(runtime.workdir))
            write_json_atomic(files.script, {"solo": [replies], "notes": notes})
        return job.client(Role.SOLO, spec=ModelSpec(model=f"scripted/{files.script.resolve()}", free=True))

    def compare(self, job: TaskJob, patch: str) -> ReplayResult:
        files = job.paths.replay_files
        recorded = read_recorded(files.recorded)
        steps = (read_trajectory(job.paths.solo_files.trajectory).data or {}).get("steps") or []
        notes = (read_json(files.script).data or {}).get("notes") or []
        comparison = compare_patches(patch, recorded.submission)
        return ReplayResult.of(dict(
            source=str(recorded.source), source_format=recorded.format, recorded_steps=len(recorded.steps),
            replayed_steps=len(steps), patch_identical=comparison.identical, recorded_patch=recorded.submission,
            only_replayed=comparison.only_replayed, only_recorded=comparison.only_recorded,
            differing=comparison.differing,
            not_submitted=not_submitted(patch, recorded.submitted_files, recorded.repo_root),
            exit_codes_differ=exit_code_differences(recorded.steps, steps),
            recorded_exit_status=recorded.exit_status, recorded_resolved=recorded.resolved,
            recorded_cost=recorded.cost, notes=[*recorded.notes, *notes],
            retrieval=audit_recorded(recorded, job.task.repo, job.task.base_commit,
                                     task_subject(job.task).task_text)))
