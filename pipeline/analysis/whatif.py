"""``swepipe whatif``: what other policies would have resolved and cost, recomputed from runs already paid for (no
model call, no container).

Per task it reads the rollouts, their candidates and the hidden tests' verdict on each candidate (``swepipe eval
--candidates RUN``), the prediction's verdict and every paid call (``whatif_data``). The policies:

- ``pass@k``: some candidate of k rollouts resolves (an oracle: nothing picks it). Exact over every k-subset of a
  task's rollouts: 1 - C(n-c, k) / C(n, k) with c rollouts whose candidate resolves; it costs the k rollouts.
- ``vote@k``: the most-voted candidate of k rollouts (ties: the earliest rollout, as the pool orders them) is
  submitted; no senior, no principal. Averaged over every k-subset (a seeded sample past ``max_subsets``).
- ``principal``: the run as recorded at K, every stage paid.
- skip rules (``principal.skip_when``): when the juniors agree (``pipeline.pool_rules.agrees`` on the task's
  pool) the top candidate is submitted and the senior and principal are not paid; otherwise as recorded. Exact.
- schedules (``juniors.schedule``): the schedule's own ``judge`` (``pipeline.pool_rules``) replayed on the
  rollouts in index order; it pays the rollouts it would have run. Then either the top candidate (``-> vote``,
  exact) or the senior and principal (``-> principal``): their verdict on a smaller pool is unknown, so the
  recorded one stands in for it and the policy is marked an estimate where the schedule stopped early.
- history: the recorded run with its agents' histories compacted and/or a prompt cache (``repricing``);
  the verdicts stay the recorded ones (an estimate of dollars and tokens only). ``vote@k, prompt cache`` is vote@k
  with each rollout priced as the cached principal's rollouts are (every rollout of the task replayed together).

Every policy is computed on the same tasks: those with a verdict, and, once any candidate was scored, only those
whose every candidate has a verdict (the others are named in the notes).
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import asdict, dataclass, field, replace

from pipeline.analysis.repricing import HistoryVariant, reprice_task
from pipeline.analysis.stats import file_editor
from pipeline.analysis.whatif_data import WhatIfRun, WhatIfTask, rollout_index
from pipeline.pool_rules import CandidatePool, agreement, agrees, judge, wave_sizes
from pipeline.records import Rollout
from pipeline.records.pool import ScheduleDecision
from pipeline.settings.config import ScheduleConfig

MAX_SUBSETS = 500
SKIP_GRID = ((0.5, 2), (0.6, 3), (0.8, 2), (0.8, 3), (1.0, 2), (1.0, 3))  # (top_share, min_submitted)
SCHEDULE_FIRSTS = (2, 4)
SCHEDULE_RULES = (("top share 0.6", {"top_share": 0.6, "no_new_files": False}),
                  ("top share 1.0", {"top_share": 1.0, "no_new_files": False}),
                  ("no new files", {"top_share": None, "no_new_files": True}))
COMPACT_AFTER = (None, 2, 4)


@dataclass
class Policy:
    name: str
    family: str  # pass@k, vote@k, vote@k, prompt cache, principal, skip, schedule, history
    k: float | None  # rollouts paid for (a mean over tasks for schedules)
    resolve_rate: float | None
    dollars_per_task: float | None
    tasks: int
    exact: bool = True  # False: a recorded verdict stands in for one that was never observed
    oracle: bool = False  # pass@k: no policy could pick the resolving candidate
    run: str = ""
    input_tokens_per_rollout: float | None = None  # history policies

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class WhatIf:
    run_id: str
    policies: list[Policy]
    tasks: int  # tasks the policies are computed on
    notes: list[str] = field(default_factory=list)
    editor: str = "n/a"  # whether the run's agents had the file editor (stats.file_editor), to compare runs by it


class Pricer:
    """Each ledger stage's Prices. Recorded calls keep the cost the ledger says was paid unless their stage was
    repriced (``repriced``: ``--price``); calls replayed from conversations are priced at ``prices``, with a
    prompt cache read and written only at the run's markers for the stages in ``at_markers_stages``."""

    def __init__(self, prices: dict, repriced: frozenset = frozenset(), at_markers_stages: frozenset = frozenset()):
        self.prices, self.repriced, self.at_markers_stages = prices, repriced, at_markers_stages

    @classmethod
    def for_run(cls, config: dict, overrides: dict[str, str]) -> Pricer:
        """Each role's prices: ``overrides`` (role -> a model of litellm's price map, e.g. from ``--price
        junior=anthropic/claude-haiku-4-5``) first, then the run's own config (its prices, else the map's, free
        and scripted models at 0). A role the config cannot price stays None."""
        from pydantic import ValidationError

        from pipeline.errors import SwepipeError
        from pipeline.models.pricing import resolve_prices
        from pipeline.models.prompt_cache import caches_at_markers
        from pipeline.settings.model_spec import ModelSpec, Prices

        configured = config.get("models")
        models = configured if isinstance(configured, dict) else {}
        prices: dict[str, Prices | None] = {}
        at_markers: set[str] = set()
        for role in sorted(set(models) | set(overrides)):
            if role in overrides:
                spec = ModelSpec(model=overrides[role])
                prices[role] = resolve_prices(spec, role)  # unknown: a clear error
            else:
                try:
                    spec = ModelSpec.model_validate(models[role])
                    prices[role] = None if spec.is_none else resolve_prices(spec, role)
                except (ValidationError, SwepipeError, TypeError):
                    prices[role] = None
                    continue
            if caches_at_markers(spec):
                at_markers.add(role)
        return cls(prices, frozenset(overrides), frozenset(at_markers))

    def at_markers(self, row) -> bool:
        """Whether the model of ``row``'s stage caches only at the markers the run sends."""
        return row.stage in self.at_markers_stages

    def __call__(self, row):
        return self.prices.get(row.stage)

    def row_cost(self, row) -> float:
        prices = self(row)
        if row.stage not in self.repriced or prices is None:
            return row.cost
        return prices.cost(row.input_tokens, row.cached_tokens, row.output_tokens, row.cache_write_tokens)


def what_if(run: WhatIfRun, pricer: Pricer, *, max_subsets: int = MAX_SUBSETS, seed: int = 0) -> WhatIf:
    notes: list[str] = []
    tasks = [t for t in run.tasks if t.resolved is not None]
    if len(tasks) < len(run.tasks):
        notes.append(f"{len(run.tasks) - len(tasks)} finished task(s) have no verdict (run swepipe eval on the "
                     "run's predictions) and are left out")
    if run.unfinished:
        notes.append(f"{len(run.unfinished)} task(s) never finished and are left out")
    candidates_scored = any(t.verdicts and any(v is not None for v in t.verdicts.values()) for t in tasks)
    if candidates_scored:
        lacking = [t.instance_id for t in tasks if not t.candidates_scored]
        if lacking:
            notes.append(f"{len(lacking)} task(s) lack a verdict on some candidate and are left out (swepipe eval "
                         f"--candidates {run.run_id} scores the rest): {', '.join(lacking[:5])}"
                         + (" ..." if len(lacking) > 5 else ""))
        tasks = [t for t in tasks if t.candidates_scored]
    elif any(t.candidates for t in tasks):
        notes.append(f"no candidate has a verdict: pass@k, vote@k, skip rules and schedules need "
                     f"`swepipe eval --candidates {run.run_id}` first")
    policies: list[Policy] = []
    if tasks:
        policies.append(_recorded(tasks, pricer))
        if candidates_scored:
            k_max = max((len(t.rollouts) for t in tasks), default=0)
            recorded = [{i: _rollout_cost(t, i, pricer) for i in t.rollouts} for t in tasks]
            for k in range(1, k_max + 1):
                policies.append(_pass_at(tasks, k, pricer))
                policies.append(_vote_at(tasks, k, recorded, max_subsets, seed))
            policies += [_skip(tasks, share, least, pricer) for share, least in SKIP_GRID]
            policies += _schedules(tasks, pricer, k_max)
        histories, cached_rollouts = _histories(tasks, pricer, run.config, notes)
        policies += histories
        if candidates_scored and cached_rollouts is not None:  # vote@k priced as the cached principal is
            policies += [_vote_at(tasks, k, cached_rollouts, max_subsets, seed, name="vote@k, prompt cache")
                         for k in range(1, k_max + 1)]
    for policy in policies:
        policy.run = run.run_id
    return WhatIf(run.run_id, policies, len(tasks), notes, editor=file_editor(run.config))


def sub_pool(task: WhatIfTask, indices) -> CandidatePool:
    """The pool the rollouts ``indices`` alone would have made: the task's candidates restricted to them, votes
    counted again, ordered as the pool orders them (most votes, then the earliest rollout)."""
    chosen = set(indices)
    kept = []
    for candidate in task.candidates:
        pairs = [(r, e) for r, e in zip(candidate.rollouts, candidate.exit_reasons, strict=False) if r in chosen]
        if pairs:
            kept.append(replace(candidate, votes=len(pairs), rollouts=[r for r, _ in pairs],
                                exit_reasons=[e for _, e in pairs]))
    kept.sort(key=lambda c: (-c.votes, c.rollouts[0]))
    voting = {r for c in kept for r in c.rollouts}
    return CandidatePool(task.instance_id, kept, len(chosen), empty=sorted(chosen - voting), unparsable=[])


def _records(task: WhatIfTask, indices) -> list[Rollout]:
    return [Rollout(index=i, exit_reason=str(task.exits.get(i, "unknown"))) for i in sorted(indices)]


def _top_verdict(task: WhatIfTask, pool: CandidatePool) -> bool:
    return bool(pool.candidates) and bool(task.verdicts.get(pool.candidates[0].key))


def _rollout_cost(task: WhatIfTask, index: int, pricer: Pricer) -> float:
    return sum(pricer.row_cost(row) for row in task.rollout_calls(index))


def _total_cost(task: WhatIfTask, pricer: Pricer) -> float:
    return sum(pricer.row_cost(row) for row in task.calls)


def _after_juniors_cost(task: WhatIfTask, pricer: Pricer) -> float:
    return sum(pricer.row_cost(row) for row in task.calls if row.stage != "junior")


def _policy(name: str, family: str, k, outcomes: list[tuple[float, float]], **extra) -> Policy:
    """``outcomes``: (resolved, dollars) per task, resolved possibly fractional (an expectation)."""
    count = len(outcomes)
    return Policy(name=name, family=family, k=k, tasks=count,
                  resolve_rate=sum(r for r, _ in outcomes) / count if count else None,
                  dollars_per_task=sum(d for _, d in outcomes) / count if count else None, **extra)


def _recorded(tasks: list[WhatIfTask], pricer: Pricer) -> Policy:
    strategies = sorted({t.strategy for t in tasks})
    name = "principal" if strategies == ["pipeline"] else "recorded (" + ", ".join(strategies) + ")"
    k = sum(len(t.rollouts) for t in tasks) / len(tasks)
    return _policy(name, "principal", k, [(float(bool(t.resolved)), _total_cost(t, pricer)) for t in tasks])


def _pass_at(tasks: list[WhatIfTask], k: int, pricer: Pricer) -> Policy:
    outcomes = []
    for task in tasks:
        n = len(task.rollouts)
        if n == 0:
            outcomes.append((0.0, 0.0))
            continue
        size = min(k, n)
        good = sum(1 for c in task.candidates if task.verdicts.get(c.key) for _ in c.rollouts)
        chance = 1.0 - math.comb(n - good, size) / math.comb(n, size)
        mean_rollout = sum(_rollout_cost(task, i, pricer) for i in task.rollouts) / n
        outcomes.append((chance, size * mean_rollout))
    return _policy("pass@k", "pass@k", k, outcomes, oracle=True)


def _subsets(indices: list[int], k: int, max_subsets: int, rng: random.Random):
    if math.comb(len(indices), k) <= max_subsets:
        return list(itertools.combinations(indices, k))
    return [tuple(sorted(rng.sample(indices, k))) for _ in range(max_subsets)]


def _vote_at(tasks: list[WhatIfTask], k: int, rollout_costs: list[dict[int, float]], max_subsets: int, seed: int,
             name: str = "vote@k") -> Policy:
    """``rollout_costs``: per task, what each of its rollouts cost (as recorded, or replayed with a prompt cache)."""
    rng = random.Random(seed * 1_000_003 + k)
    outcomes = []
    for task, costs in zip(tasks, rollout_costs, strict=True):
        indices = task.rollouts
        if not indices:
            outcomes.append((0.0, 0.0))
            continue
        subsets = _subsets(indices, min(k, len(indices)), max_subsets, rng)
        resolved = sum(_top_verdict(task, sub_pool(task, s)) for s in subsets) / len(subsets)
        dollars = sum(sum(costs[i] for i in s) for s in subsets) / len(subsets)
        outcomes.append((resolved, dollars))
    return _policy(name, name, k, outcomes)


def _skip(tasks: list[WhatIfTask], share: float, least: int, pricer: Pricer) -> Policy:
    outcomes = []
    for task in tasks:
        pool = sub_pool(task, task.rollouts)
        holds, _ = agrees(agreement(pool, _records(task, task.rollouts)), share, least)
        if holds:
            juniors = sum(_rollout_cost(task, i, pricer) for i in task.rollouts)
            outcomes.append((float(_top_verdict(task, pool)), juniors))
        else:
            outcomes.append((float(bool(task.resolved)), _total_cost(task, pricer)))
    k = sum(len(t.rollouts) for t in tasks) / len(tasks)
    return _policy(f"skip when top >= {share:g} of >= {least} submitted", "skip", k, outcomes)


def _stop_point(task: WhatIfTask, settings: ScheduleConfig) -> int:
    """How many rollouts (in index order) the schedule would have run on this task."""
    indices = task.rollouts
    before = None
    for wave, size in enumerate(wave_sizes(settings, len(indices)), start=1):
        pool = sub_pool(task, indices[:size])
        decision = judge(settings, len(indices), wave, _records(task, indices[:size]), pool, before)
        if decision.decision == ScheduleDecision.STOP:
            return size
        before = pool
    return len(indices)


def _schedules(tasks: list[WhatIfTask], pricer: Pricer, k_max: int) -> list[Policy]:
    policies = []
    for first in SCHEDULE_FIRSTS:
        if first >= k_max:
            continue
        for label, rule in SCHEDULE_RULES:
            settings = ScheduleConfig(enabled=True, first=first, wave=2, min_submitted=2, **rule)
            to_vote, to_principal, ran = [], [], []
            early = False
            for task in tasks:
                size = _stop_point(task, settings)
                early = early or size < len(task.rollouts)
                ran.append(size)
                chosen = task.rollouts[:size]
                juniors = sum(_rollout_cost(task, i, pricer) for i in chosen)
                to_vote.append((float(_top_verdict(task, sub_pool(task, chosen))), juniors))
                to_principal.append((float(bool(task.resolved)), juniors + _after_juniors_cost(task, pricer)))
            k = sum(ran) / len(ran)
            name = f"schedule {first}+2, {label}"
            policies.append(_policy(f"{name} -> vote", "schedule", k, to_vote))
            policies.append(_policy(f"{name} -> principal", "schedule", k, to_principal, exact=not early))
    return policies


def _histories(tasks: list[WhatIfTask], pricer: Pricer, config: dict,
               notes: list[str]) -> tuple[list[Policy], list[dict[int, float]] | None]:
    """The principal with each history variant, and per task each rollout's cost with the whole history and a
    prompt cache (None when nothing could be replayed)."""
    if not any(t.conversations for t in tasks):
        notes.append("no agent conversation is on record: history compaction and caching cannot be replayed")
        return [], None
    configured = config.get("limits")
    limits = configured if isinstance(configured, dict) else {}
    chars = int(limits.get("compact_chars") or 1000)
    sent = HistoryVariant(compact_after=limits.get("compact_after"), compact_chars=chars)
    replayed = {"senior" if agent == "senior" else "junior" for t in tasks for agent in t.conversations}
    unpriced = sorted(stage for stage in replayed if pricer.prices.get(stage) is None)
    if unpriced:
        notes.append(f"history policies need the {' and '.join(unpriced)} model's prices (config or --price)")
        return [], None
    policies, cached_rollouts = [], None
    for after, cache in itertools.product(COMPACT_AFTER, (False, True)):
        variant = HistoryVariant(cache=cache, compact_after=after, compact_chars=chars)
        outcomes, rollout_inputs = [], []
        spends = [reprice_task(task, variant, pricer, sent) for task in tasks]
        for task, spend in zip(tasks, spends, strict=True):
            outcomes.append((float(bool(task.resolved)), sum(s.dollars for s in spend.values())))
            rollout_inputs += [s.input_tokens for agent, s in spend.items() if rollout_index(agent) is not None]
        if cache and after is None:
            cached_rollouts = [{i: spend[f"rollout-{i:02d}"].dollars if f"rollout-{i:02d}" in spend else 0.0
                                for i in task.rollouts} for task, spend in zip(tasks, spends, strict=True)]
        per_rollout = sum(rollout_inputs) / len(rollout_inputs) if rollout_inputs else None
        same_prompts = after == sent.compact_after  # a cache changes the price, never what the model sees
        policies.append(_policy(f"principal, {variant.label}", "history", None, outcomes, exact=same_prompts,
                                input_tokens_per_rollout=per_rollout))
    return policies, cached_rollouts


def pareto_front(policies: list[Policy]) -> list[Policy]:
    """The policies no other (non-oracle) policy beats: none both cheaper-or-equal and better, cheapest first."""
    shown = [(p.dollars_per_task, p.resolve_rate, p) for p in policies
             if not p.oracle and p.resolve_rate is not None and p.dollars_per_task is not None]
    front, best = [], -1.0
    for _, rate, policy in sorted(shown, key=lambda shown_policy: (shown_policy[0], -shown_policy[1])):
        if rate > best + 1e-12:
            front.append(policy)
            best = rate
    return front
