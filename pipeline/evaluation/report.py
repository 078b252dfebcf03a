"""The summary `swepipe eval` prints."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from pipeline.evaluation.batch import EvalSummary
from pipeline.records.evaluation import EvalCategory, canary_coverage, infrastructure_words
from pipeline.text.terminal import literal
from pipeline.text.terminal_table import TerminalTable


def print_summary(summary: EvalSummary, output_dir: Path, console: Console) -> None:
    if summary.unknown:
        shown = ", ".join(summary.unknown[:5]) + (" ..." if len(summary.unknown) > 5 else "")
        console.print(f"skipped {len(summary.unknown)} prediction(s) for instances not in the dataset: {shown}",
                      style="yellow")
    if summary.changed:
        shown = ", ".join(summary.changed[:5]) + (" ..." if len(summary.changed) > 5 else "")
        console.print(literal(f"scored again {len(summary.changed)} instance(s) whose patch is not the one scored "
                              f"before: {shown}"), style="yellow")
    if summary.skipped:
        console.print(f"{len(summary.skipped)} instance(s) already had a result (use --redo to score them again)")
    console.print(TerminalTable(f"evaluation: {output_dir}", ["category", "instances"],
                                [[category, str(summary.counts.get(category, 0))] for category in EvalCategory],
                                right=["instances"]))
    data = summary.as_dict()
    changed = summary.infrastructure
    if data["resolve_rate_scored"] is not None:
        infrastructure = infrastructure_words(list(changed.values()))
        console.print(literal(f"resolved {summary.resolved} of {summary.scored} scored predictions "
                              f"({data['resolve_rate_scored']:.1%}" + (f"; {infrastructure}" if infrastructure else "")
                              + f"); {summary.resolved} of the dataset's {summary.dataset_size} tasks "
                              f"({data['resolve_rate_dataset']:.1%})"))
    planted = canary_coverage([r for r in summary.results.values() if r.category != EvalCategory.INFRA_ERROR])
    if planted:
        console.print(literal(planted))
    for instance_id, findings in summary.flagged.items():
        console.print(literal(f"integrity findings in {instance_id} (not resolved): "
                              + "; ".join(f"{f.kind}: {f.detail}" for f in findings), style="yellow"))
    for instance_id in changed:
        notes = summary.results[instance_id].test_infrastructure or []
        console.print(literal(f"test infrastructure changed by {instance_id} (resolved; read its verdict with care): "
                              + "; ".join(map(str, notes)), style="yellow"))
    flaky = {i: r.flaky_tests for i, r in summary.results.items() if r.flaky_tests}
    for instance_id, names in flaky.items():
        console.print(f"flaky in {instance_id}: {', '.join(names[:5])}", style="yellow")
