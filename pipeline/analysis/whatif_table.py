"""``swepipe whatif``'s table: one row per policy, the Pareto front marked."""

from __future__ import annotations

from pipeline.analysis.table import Table, count, money, percent
from pipeline.analysis.whatif import WhatIf, pareto_front


def whatif_table(result: WhatIf) -> Table:
    front = {id(p) for p in pareto_front(result.policies)}
    rows = []
    for policy in result.policies:
        marks = [mark for mark, on in (("front", id(policy) in front), ("oracle", policy.oracle),
                                       ("estimate", not policy.exact)) if on]
        rows.append([policy.name, "" if policy.k is None else f"{policy.k:g}", percent(policy.resolve_rate),
                     money(policy.dollars_per_task), count(policy.input_tokens_per_rollout) if
                     policy.input_tokens_per_rollout is not None else "", ", ".join(marks)])
    table = Table(f"What if: {result.run_id} ({result.tasks} tasks, file editor {result.editor})",
                  ["policy", "k", "resolved", "$/task", "input tokens/rollout", ""], rows)
    table.notes.append("front: on the Pareto front (no other policy is as cheap and better); oracle: pass@k counts a "
                       "task resolved when any candidate resolves, which no policy can pick; estimate: a recorded "
                       "verdict stands in for one never observed (a principal on a smaller pool, a model shown a "
                       "compacted history)")
    return table
