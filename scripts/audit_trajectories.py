"""Run the retrieval audit (pipeline.audit) over a folder of trajectories, in any format swepipe reads
(mini-swe-agent 1.x and 2.x, SWE-agent, swepipe's export), and print the counts per kind and every finding.

    .venv/bin/python scripts/audit_trajectories.py runs-of-mini/ other.traj.json [--dataset bundled]

Each trajectory is audited on what it holds itself: its instance id (which names the project, for SWE-bench's and
SWE-Bench Pro's ids), the task as its agent was given it, where its repository was. ``--dataset`` adds each task's
repository, base commit and problem statement from the dataset, for trajectories of its tasks. A file swepipe
cannot read (another format, SWE-agent's windowed tools) is counted and named, not audited. Exit status 0 whatever
was found: this is a report, not a check.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.audit import KINDS, audit  # noqa: E402
from pipeline.interop.recorded import NotReplayable, recorded_actions, recorded_subject  # noqa: E402
from pipeline.interop.trajectory_formats import find_trajectories, read_trajectory_file  # noqa: E402
from pipeline.text.printable import clean  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="trajectory files or folders of them")
    parser.add_argument("--dataset", help="a dataset whose tasks the trajectories worked on (bundled, a file, a "
                                          "Hugging Face name)")
    parser.add_argument("--quiet", action="store_true", help="counts only, no finding")
    options = parser.parse_args()
    tasks = {}
    if options.dataset:
        from pipeline.tasks import load_tasks

        tasks = {task.instance_id: task for task in load_tasks(options.dataset)}
    files = find_trajectories(options.paths)
    read, flagged, unreadable = 0, 0, []
    by_kind: Counter[str] = Counter()
    flagged_by_kind: Counter[str] = Counter()
    steps = 0
    for path in files:
        try:
            recorded = read_trajectory_file(path)
        except NotReplayable as error:
            unreadable.append(str(error))
            continue
        read += 1
        task = tasks.get(recorded.instance_id)
        subject = recorded_subject(recorded, repo=task.repo if task else None,
                                   base_commit=task.base_commit if task else None,
                                   task_text=task.problem_statement if task else "")
        actions = recorded_actions(recorded)
        steps += len(actions)
        findings = audit(actions, subject)
        if findings:
            flagged += 1
            flagged_by_kind.update({finding.kind for finding in findings})
        for finding in findings:
            by_kind[finding.kind] += 1
            if not options.quiet:
                print(f"{path}: step {finding.step} [{finding.kind}] {clean(finding.reason)}")
                print(f"    command: {clean(finding.command[:600])}")
    print(f"\n{len(files)} file(s); {read} trajectories read ({steps} actions), {len(unreadable)} not readable; "
          f"{flagged} flagged")
    for kind, meaning in KINDS.items():
        print(f"  {kind:<8} {by_kind[kind]:>4} finding(s) in {flagged_by_kind[kind]:>4} trajectories ({meaning})")
    for problem in unreadable[:20]:
        print(f"  not read: {clean(problem)[:300]}")
    if len(unreadable) > 20:
        print(f"  ... and {len(unreadable) - 20} more not read")
    return 0


if __name__ == "__main__":
    sys.exit(main())
