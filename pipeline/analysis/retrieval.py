"""The retrieval audit's findings on a run's tasks (pipeline.audit, recorded by the stages): who reached for the
answer and how, the candidates that came from such trajectories, and the imported candidates no trajectory came
with, as the report counts them and the task pages list them. Read from the records alone."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from pipeline.analysis.load import TaskData
from pipeline.records import Rollout
from pipeline.records.retrieval import RetrievalFinding

AGENTS = {"solo": "solo agent", "team": "team", "replay": "replayed trajectory"}


@dataclass(frozen=True)
class WhoseFinding:
    """One finding, and whose trajectory it is on (``rollout 03``, ``senior``, ``solo agent``, ``team: lead``,
    ``replayed trajectory``)."""

    who: str
    finding: RetrievalFinding


@dataclass
class CandidateCount:
    """A task's candidates from audited trajectories: how many, how many came from one that reached, and the
    kinds of reaching among those."""

    audited: bool = False
    candidates: int = 0
    reached: int = 0
    kinds: Counter = field(default_factory=Counter)


def _findings(value: object) -> list[RetrievalFinding]:
    return [item for item in value if isinstance(item, RetrievalFinding)] if isinstance(value, list) else []


def rollout_name(rollout: Rollout, number: int) -> str:
    index = rollout.index if isinstance(rollout.index, int) and not isinstance(rollout.index, bool) else number
    source = f" (imported from {rollout.imported_from})" if isinstance(rollout.imported_from, str) else ""
    return f"rollout {index:02d}{source}"


def task_findings(task: TaskData) -> list[WhoseFinding]:
    """Every finding on the task's trajectories, the juniors' first, then the senior's, the solo agent's, the
    team's and a replayed trajectory's."""
    found = [WhoseFinding(rollout_name(rollout, number), finding) for number, rollout in enumerate(task.rollouts)
             for finding in _findings(rollout.retrieval)]
    if task.brief is not None:
        found += [WhoseFinding("senior", finding) for finding in _findings(task.brief.senior_retrieval)]
    for name, findings in task.agent_retrieval.items():
        for finding in findings:
            agent = f": {finding.agent}" if isinstance(finding.agent, str) else ""
            found.append(WhoseFinding(f"{AGENTS.get(name, name)}{agent}", finding))
    return found


def unaudited(task: TaskData) -> list[Rollout]:
    """The task's imported candidates that came without a trajectory to audit (a predictions file's)."""
    return [rollout for rollout in task.rollouts if isinstance(rollout.unaudited, str)]


def candidate_count(task: TaskData) -> CandidateCount:
    """The task's candidates from audited trajectories: the pool's (a candidate reached when any of its rollouts'
    trajectories did), else the solo agent's, the team's or a replayed prediction (one candidate)."""
    audited_rollouts = {rollout.index: _findings(rollout.retrieval) for rollout in task.rollouts
                        if isinstance(rollout.retrieval, list)}
    pool = task.pool.candidates if task.pool is not None and task.pool.candidates else []
    if pool and audited_rollouts:
        count = CandidateCount(audited=True)
        for candidate in pool:
            rollouts = [index for index in candidate.rollouts or [] if index in audited_rollouts]
            findings = [finding for index in rollouts for finding in audited_rollouts[index]]
            findings += [finding for reached in candidate.reached or [] for finding in _findings(reached.findings)]
            count.candidates += 1 if rollouts or candidate.reached else 0
            if findings:
                count.reached += 1
                count.kinds.update({str(finding.kind) for finding in findings})
        return count
    if task.agent_retrieval and not pool:
        findings = [finding for found in task.agent_retrieval.values() for finding in found]
        return CandidateCount(True, 1, 1 if findings else 0, Counter({str(f.kind) for f in findings}))
    return CandidateCount()
