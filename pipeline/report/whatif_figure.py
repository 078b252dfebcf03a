"""``swepipe whatif``'s figure: resolve rate against dollars per task, one point per policy, the Pareto front
marked (pass@k is an oracle: drawn, never on the front)."""

from __future__ import annotations

from pipeline.analysis.whatif import Policy, WhatIf, pareto_front
from pipeline.report.plotting import dollars_axis, new_figure, png_bytes

_STYLE = {  # family -> (marker, colour, label)
    "pass@k": ("^", "#b0b0b0", "pass@k (oracle)"),
    "vote@k": ("o", "#8fb3d9", "vote@k"),
    "vote@k, prompt cache": ("o", "#3f6fa3", "vote@k, prompt cache"),
    "principal": ("*", "#c9545d", "principal (recorded)"),
    "skip": ("s", "#7aa874", "skip rules"),
    "schedule": ("D", "#f2b36f", "schedules"),
    "history": ("P", "#9b7bb8", "compaction / prompt cache"),
}


def _point(policy: Policy) -> tuple[float, float]:
    """(dollars per task, resolve rate) of a policy the figure draws: it draws only those with both."""
    assert policy.dollars_per_task is not None and policy.resolve_rate is not None, policy.name
    return policy.dollars_per_task, policy.resolve_rate


def _rollouts(policy: Policy) -> float:
    """k of a pass@k or vote@k policy (always set for these families)."""
    assert policy.k is not None, policy.name
    return policy.k


def whatif_figure(results: list[WhatIf]) -> bytes | None:
    policies = [p for r in results for p in r.policies if p.resolve_rate is not None and p.dollars_per_task is not None]
    if not policies:
        return None
    several = len(results) > 1
    figure = new_figure(8.5, 5.6)
    axes = figure.add_subplot()
    for family, (marker, colour, label) in _STYLE.items():
        members = [p for p in policies if p.family == family]
        if not members:
            continue
        axes.scatter([p.dollars_per_task for p in members], [p.resolve_rate for p in members], marker=marker,
                     color=colour, s=90 if family == "principal" else 36, label=label, zorder=3,
                     edgecolors="#333333" if family == "principal" else "none")
        if family in ("pass@k", "vote@k", "vote@k, prompt cache"):
            for run in {p.run for p in members}:
                line = sorted((p for p in members if p.run == run), key=_rollouts)
                axes.plot([p.dollars_per_task for p in line], [p.resolve_rate for p in line], "-", color=colour,
                          alpha=0.6, zorder=2)
                for p in (line[0], line[-1]):
                    axes.annotate(f"k={p.k:g}", (p.dollars_per_task, p.resolve_rate), textcoords="offset points",
                                  xytext=(4, -11), fontsize=7, color="#555555")
    costs = [_point(p)[0] for p in policies]
    span = max(costs) - min(costs)
    labelled: list[tuple[float, float]] = []
    for result in results:
        front = pareto_front(result.policies)
        if front:
            axes.step([p.dollars_per_task for p in front], [p.resolve_rate for p in front], where="post",
                      linestyle=":", color="#2e8b57", zorder=1,
                      label="Pareto front" if result is results[0] else None)
            for p in front:  # a label only where it does not run into the last one (the table names them all)
                dollars, rate = _point(p)
                if any(abs(dollars - x) < 0.12 * (span or 1) and abs(rate - y) < 0.05 for x, y in labelled):
                    continue
                labelled.append((dollars, rate))
                axes.annotate(_label(p, several), (p.dollars_per_task, p.resolve_rate), textcoords="offset points",
                              xytext=(6, 5), fontsize=7, color="#2e5e3e")
    dollars_axis(axes, costs, 0.08, 0.3)
    axes.set_ylim(-0.03, 1.05)
    axes.set_xlabel("dollars per task (mean)")
    axes.set_ylabel("resolve rate")
    tasks = ", ".join(f"{r.run_id}: {r.tasks} tasks" for r in results)
    axes.set_title(f"what-if: resolve rate against dollars per task\n{tasks}", fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="lower right")
    return png_bytes(figure)


def _label(policy: Policy, several: bool) -> str:
    name = policy.name.replace("@k", f"@{policy.k:g}") if policy.name.startswith(("pass@k", "vote@k")) else policy.name
    return f"{policy.run}: {name}" if several else name
