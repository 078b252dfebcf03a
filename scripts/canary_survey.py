"""Where scoring can plant its canaries, task by task, before any container runs: the runner each run_script.sh runs
its selected tests with, and for each task either where the two planted tests go or why none can be
(pipeline.evaluation.canaries). Reads the official layout, DIR/<instance_id>/run_script.sh; with --dataset, the
task's selected and required tests too (without it, what the run script alone decides).

    python scripts/canary_survey.py --run-scripts run_scripts/ [--dataset ScaleAI/SWE-bench_Pro] [--each]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from pipeline.evaluation import canaries
from pipeline.evaluation.runners import read_run_script
from pipeline.text.printable import clean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-scripts", type=Path, required=True)
    parser.add_argument("--dataset", help="the tasks (a dataset swepipe loads); without it, the run scripts alone")
    parser.add_argument("--each", action="store_true", help="a line per task, not only the counts")
    args = parser.parse_args()
    tasks = {}
    if args.dataset:
        from pipeline.tasks import load_tasks

        tasks = {task.instance_id: task for task in load_tasks(args.dataset)}
    outcomes: Counter[tuple[str, str]] = Counter()
    for folder in sorted(path for path in args.run_scripts.iterdir() if (path / "run_script.sh").is_file()):
        text = (folder / "run_script.sh").read_text(encoding="utf-8", errors="replace")
        task = tasks.get(folder.name)
        if task is not None:
            plan = canaries.plan(task, text, "")
            runner = plan.runner.value if plan.runner else "unknown"
            outcome = f"can plant in {plan.target}" if plan.planned else plan.reason
            summary = "its summary required" if plan.summary else "no summary to require"
        else:
            script = read_run_script(text)
            runner = script.runner.value if script.runner else "unknown"
            outcome = script.unknown or ("picks tests by name" if script.name_filter else
                                         "stops at the first failure" if script.fail_fast else "can plant")
            summary = "its summary required" if script.runner and script.summary else "no summary to require"
        if args.each:
            print(clean(f"{folder.name}\t{runner}\t{outcome}\t{summary}"))
        general = "can plant" if outcome.startswith("can plant") else outcome
        outcomes[(runner, f"{general}; {summary}")] += 1
    for (runner, outcome), count in sorted(outcomes.items(), key=lambda item: (-item[1], item[0])):
        print(clean(f"{count:5d}  {runner:12}  {outcome}"))


if __name__ == "__main__":
    main()
