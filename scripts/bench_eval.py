"""How much `swepipe eval` adds to the tests themselves, on the bundled tasks, in one run.

Baseline: for every task, a bare `docker run` of the task image that restores the hidden tests and
runs run_script.sh, nothing else, with the same number of workers. Then `swepipe eval` scores the
gold patches (fresh output directory). Prints both wall times and their ratio.

    python scripts/bench_eval.py [--workers 2] [--limit N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pipeline.datasets import BUNDLED, defaults_for
from pipeline.evaluation.batch import evaluate_predictions
from pipeline.evaluation.predictions import Prediction
from pipeline.evaluation.runner import EvalSettings
from pipeline.runtime import containers
from pipeline.runtime.image_names import image_name
from pipeline.tasks import load_tasks


def bare_run(task, scripts: Path) -> float:
    """The test script alone: same image, same hidden tests, no patch handling, no parsing, no copying."""
    started = time.monotonic()
    restore = task.before_repo_set_cmd.strip().split("\n")[-1]
    script = (scripts / task.instance_id / "run_script.sh").read_text()
    command = (f"cd /app && {restore} && cat > /tmp/run_script.sh <<'SWEPIPE_EOF'\n{script}\nSWEPIPE_EOF\n"
               f"bash /tmp/run_script.sh {','.join(task.selected_test_files_to_run)} > /dev/null 2>&1; true")
    containers.client().containers.run(image_name(defaults_for(BUNDLED).image_template, task.to_row()),
                                       entrypoint=["/bin/bash", "-c"], command=[command], remove=True)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    tasks = load_tasks(BUNDLED)[: args.limit]
    defaults = defaults_for(BUNDLED)

    started = time.monotonic()
    with ThreadPoolExecutor(args.workers) as pool:
        bare_each = list(pool.map(lambda t: bare_run(t, defaults.run_scripts), tasks))
    bare = time.monotonic() - started

    with tempfile.TemporaryDirectory() as out:
        settings = EvalSettings(image_template=defaults.image_template, run_scripts=defaults.run_scripts,
                                run_id="bench-eval")
        started = time.monotonic()
        summary = evaluate_predictions([Prediction(t.instance_id, t.patch) for t in tasks], tasks, Path(out),
                                       settings, workers=args.workers, show_progress=False)
        full = time.monotonic() - started
    print(f"{len(tasks)} bundled tasks, {args.workers} workers; gold resolved {summary.resolved}/{len(tasks)}")
    print(f"bare test-script runs   {bare:7.1f} s wall ({sum(bare_each):.1f} s summed)   1.00x")
    print(f"swepipe eval            {full:7.1f} s wall                        {full / bare:5.2f}x")


if __name__ == "__main__":
    main()
