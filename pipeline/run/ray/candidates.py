"""``swepipe eval --candidates RUN --executor ray``: a run's junior candidates scored on a Ray cluster.

Each candidate is one scoring as ``swepipe eval --executor ray`` runs one (pipeline.run.ray.scoring: a Ray task holding
one docker_slot, the official protocol in a scratch folder on its node, its artefacts sent back, a lost node's
scoring run again elsewhere), into the run's ``tasks/<id>/candidates/<key>/``; the driver writes each result.json
(pipeline.evaluation.candidates.record_candidate) once the artefacts are in place, so a rerun skips exactly the
candidates with a verdict, as on one machine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline.evaluation.batch import infra_error
from pipeline.evaluation.candidates import (
    CandidateJob,
    CandidatesPlan,
    CandidatesSummary,
    record_candidate,
    write_task_summaries,
)
from pipeline.evaluation.runner import EvalSettings
from pipeline.run.ray.connect import connect
from pipeline.run.ray.driver import eval_inputs
from pipeline.run.ray.node import AttemptOutcome
from pipeline.run.ray.scoring import RayScorings, ScoringShipment


class RayCandidates(RayScorings[CandidateJob, CandidatesSummary]):
    """Scorings of candidates: an item is a CandidateJob, its files go under the run directory."""

    label = "candidates"

    def __init__(self, ray: Any, plan: CandidatesPlan, settings: EvalSettings, attempts: int, show_progress: bool,
                 log: Callable[[str], None] | None = None) -> None:
        super().__init__(ray, plan.todo, plan.summary, plan.summary.run_dir, settings, attempts, show_progress, log)

    def item_id(self, job: CandidateJob) -> str:
        return f"{job.task.instance_id}/{job.key}"

    def ship(self, job: CandidateJob, key: str) -> Any:
        folder = job.paths.candidates.relative_to(self.output_dir) / job.key
        return self.remote.remote(ScoringShipment(
            task=job.task, patch=job.patch, settings=self.settings, attempts=self.scoring_attempts, key=key,
            session=self.session, folder=folder.as_posix(), eval_files=eval_inputs(job.task, self.settings),
            queue=self.queue, stop=self.stop_flag))

    def summary_line(self) -> str:
        return f"{self.summary.resolved} resolve"

    def completed(self, job: CandidateJob, result: AttemptOutcome) -> None:
        record = result["result"]
        record.node = self.node_label(result.get("node_id"))
        record_candidate(self.summary, job, record)

    def give_up(self, job: CandidateJob, error: str) -> None:
        record_candidate(self.summary, job, infra_error(job.task.instance_id, error))


def score_candidates_on_ray(plan: CandidatesPlan, settings: EvalSettings, *, attempts: int = 1,
                            show_progress: bool = True, address: str = "auto",
                            log: Callable[[str], None] | None = None) -> CandidatesSummary:
    """``score_candidates`` on the cluster at ``address``: the same files and summary; KeyboardInterrupt once the
    cluster's scoring has stopped (Ctrl-C, SIGTERM), after the task summaries say what was scored."""
    ray = connect(address)
    driver = RayCandidates(ray, plan, settings, attempts, show_progress, log)
    try:
        finished = driver.execute(plan.todo, total=len(plan.todo))
    finally:
        write_task_summaries(plan.summary)
    if not finished:
        raise KeyboardInterrupt
    return plan.summary
