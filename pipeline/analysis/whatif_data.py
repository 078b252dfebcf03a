"""What ``swepipe whatif`` replays, read from one run directory: per task, its rollouts and their candidates, the
hidden tests' verdict on each candidate (``swepipe eval --candidates``) and on the prediction, every paid call of
the ledger, and the agents' recorded conversations. Nothing is recomputed or called here."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

from pipeline.analysis.load import RunData, TaskData, load_run
from pipeline.pool_rules import CandidateDraft
from pipeline.records import EvalResult, Rollout, Unreadable, read_trajectory
from pipeline.records.chat import ChatMessage, recorded_messages
from pipeline.records.evaluation import EvalCategory
from pipeline.records.ledger import LedgerRow, read_ledger
from pipeline.rundir.layout import RunLayout, is_candidate_key

_ROLLOUT_AGENT = re.compile(r"^rollout-(\d+)$")
_CANDIDATE_FIELDS = {f.name for f in fields(CandidateDraft)}


@dataclass
class WhatIfTask:
    instance_id: str
    resolved: bool | None  # the prediction's verdict (None: never scored)
    strategy: str  # the prediction's strategy: pipeline, solo, team, vote, ...
    exits: dict[int, str]  # rollout index -> how it ended
    candidates: list[CandidateDraft]  # the pool of all the task's rollouts (junior/pool.json)
    verdicts: dict[str, bool | None]  # candidate key -> resolved by the hidden tests (None: infra error)
    calls: list[LedgerRow]  # every paid call of the task's ledger
    conversations: dict[str, list[ChatMessage]] = field(default_factory=dict)  # agent -> its recorded messages
    _by_rollout: dict[str, list[LedgerRow]] | None = field(default=None, repr=False, compare=False)

    @property
    def rollouts(self) -> list[int]:
        return sorted(self.exits)

    @property
    def candidates_scored(self) -> bool:
        """Whether every candidate has a verdict (a task with no candidate trivially has)."""
        return all(self.verdicts.get(c.key) is not None for c in self.candidates)

    def rollout_calls(self, index: int) -> list[LedgerRow]:
        if self._by_rollout is None:
            self._by_rollout = {}
            for row in self.calls:
                if row.stage == "junior":
                    self._by_rollout.setdefault(row.agent, []).append(row)
        return self._by_rollout.get(f"rollout-{index:02d}", [])


@dataclass
class WhatIfRun:
    run_id: str
    config: dict
    tasks: list[WhatIfTask]
    unfinished: list[str]


def read_run(path: str | Path) -> WhatIfRun:
    run: RunData = load_run(path)
    layout = RunLayout(Path(path))
    tasks = [_task(layout, record) for record in run.tasks]
    return WhatIfRun(run.run_id, run.config, tasks, run.unfinished)


def _task(layout: RunLayout, record: TaskData) -> WhatIfTask:
    paths = layout.task(record.instance_id)
    pool = record.pool.candidates or [] if record.pool is not None else []
    candidates = [CandidateDraft(**{k: v for k, v in c.to_dict().items() if k in _CANDIDATE_FIELDS})
                  for c in pool if is_candidate_key(c.key)]
    exits = {int(r.index): r.exit_reason or "unknown" for r in record.rollouts}
    for candidate in candidates:  # a pool that names a rollout whose record is gone still counts its votes
        for index, reason in zip(candidate.rollouts, candidate.exit_reasons, strict=False):
            exits.setdefault(int(index), reason)
    verdicts = {c.key: _verdict(EvalResult.read(paths.candidate_result(c.key))) for c in candidates}
    conversations, calls = {}, _paid_calls(paths.ledger)
    for index in exits:
        agent, rollout = f"rollout-{index:02d}", Rollout.read(paths.junior_files.rollout(index))
        if isinstance(rollout, Unreadable):
            continue
        messages = _messages(rollout.trajectory)
        if messages:
            conversations[agent] = messages
        if rollout.reused_from and not any(r.agent == agent for r in calls):
            calls += _reused_calls(record.instance_id, agent, rollout, messages)
    senior = _messages(read_trajectory(paths.senior_files.trajectory).data)
    if senior:
        conversations["senior"] = senior
    return WhatIfTask(instance_id=record.instance_id, resolved=record.resolved,
                      strategy=str(record.prediction.strategy or "?"),
                      exits=exits, candidates=candidates, verdicts=verdicts, calls=calls,
                      conversations=conversations)


def _paid_calls(ledger: Path) -> list[LedgerRow]:
    """The task's calls, without ``swepipe coverage --senior-at``'s (stage analysis): no policy pays for those."""
    return [row for row in read_ledger(ledger) if row.stage != "analysis"]


def _reused_calls(instance_id: str, agent: str, rollout: Rollout, messages: list[ChatMessage]) -> list[LedgerRow]:
    """The calls of a rollout taken from another run (``reused_from``: paid there, so this run's ledger has no row
    of it), rebuilt from its record's totals: one per reply, input tokens in proportion to each prompt's length,
    output tokens and cost shared evenly, one after the other from time 0 (as rollouts start together)."""
    prompts = [len(json.dumps(messages[:i], default=str)) for i, m in enumerate(messages) if m.get("role") ==
               "assistant"] or [1]
    total_input, total_output = int(rollout.input_tokens or 0), int(rollout.output_tokens or 0)
    cost = float(rollout.cost or 0.0)
    return [LedgerRow(stage="junior", role="junior", model=str(rollout.model or "?"),
                      input_tokens=round(total_input * size / sum(prompts)),
                      output_tokens=round(total_output / len(prompts)), cost=cost / len(prompts), latency=0.5,
                      task=instance_id, agent=agent, time=step + 1.0, call=f"reused:{agent}:{step}")
            for step, size in enumerate(prompts)]


def rollout_index(agent: str) -> int | None:
    match = _ROLLOUT_AGENT.match(agent)
    return int(match.group(1)) if match else None


def _verdict(result: EvalResult | Unreadable) -> bool | None:
    if isinstance(result, Unreadable) or result.category == EvalCategory.INFRA_ERROR or result.resolved is None:
        return None
    return bool(result.resolved)


def _messages(trajectory) -> list[ChatMessage]:
    return recorded_messages(trajectory.get("messages") if isinstance(trajectory, dict) else None)
