"""How much `swepipe eval` adds to the tests themselves, on the bundled tasks, in one run.

Baseline: for every task, a bare `docker run` of the task image that applies the gold patch, restores the hidden
tests and runs run_script.sh, nothing else (the same code the scoring tests: a Go package the patch changes is
compiled again in both), without the network as scorings run (``--bare-network``: with Docker's default
bridge network, as a plain `docker run` has it), with the same number of workers (a first pass warms the page cache
and is not counted). Then the gold patches are scored as `swepipe eval --workers N` scores them (fresh
output directories), under each scoring profile (pipeline.evaluation.profiles). Prints the wall times
and their ratios to the bare runs. A round is the bare pass and then each profile's; with ``--rounds N`` each
ratio is taken against its own round's bare pass and the median over the rounds is printed last, since one
round on a busy 2-core machine moves by a quarter either way.

``--phases`` then scores each task once more, one at a time, with every Docker call the scoring makes timed, and
prints where a scoring's time goes beside the bare run of the same task: what the per-task fixed cost is spent on.
The container calls on the scoring's critical path are timed as they are made; those made on a thread of their own
(the parser's container made ready while the tests run, the tests' container read and removed while the parser
runs) are counted apart.

    python scripts/bench_eval.py [--workers 2] [--limit N] [--rounds 3] [--phases]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from docker.models.containers import Container, ContainerCollection

from pipeline.evaluation.batch import evaluate_predictions
from pipeline.evaluation.profiles import PROFILES
from pipeline.evaluation.runner import EvalSettings, evaluate
from pipeline.interop.predictions import PatchToScore
from pipeline.runtime import containers
from pipeline.runtime.images.names import image_name
from pipeline.runtime.limits import container_limits
from pipeline.tasks import load_tasks
from pipeline.tasks.datasets import BUNDLED, defaults_for


def bare_run(task, scripts: Path, network: bool = False) -> float:
    """The test script alone on the same code: same image, the gold patch applied, the same hidden tests; no
    grader, no parsing, no checks; without the network, as scoring runs (``network``: with Docker's default bridge
    network, whose set-up alone takes a few hundred milliseconds a container)."""
    started = time.monotonic()
    restore = task.before_repo_set_cmd.strip().split("\n")[-1]
    script = (scripts / task.instance_id / "run_script.sh").read_text()
    command = (f"cd /app && cat > /tmp/gold.diff <<'SWEPIPE_PATCH_EOF'\n{task.patch}SWEPIPE_PATCH_EOF\n"
               f"git apply /tmp/gold.diff && {restore} && "
               f"cat > /tmp/run_script.sh <<'SWEPIPE_EOF'\n{script}\nSWEPIPE_EOF\n"
               f"bash /tmp/run_script.sh {','.join(task.selected_test_files_to_run)} > /dev/null 2>&1; true")
    containers.client().containers.run(image_name(defaults_for(BUNDLED).image_template, task.to_row()),
                                       entrypoint=["/bin/bash", "-c"], command=[command], remove=True,
                                       network_disabled=not network)
    return time.monotonic() - started


TIMED = {Container: ("put_archive", "attach_socket", "start", "wait", "logs", "get_archive", "kill", "remove"),
         ContainerCollection: ("create",)}


def phases(tasks, defaults, bare_network: bool) -> None:
    """Each task scored once, alone, its Docker calls timed (on the scoring's own thread, and on others)."""
    spent: dict[tuple[bool, str], float] = defaultdict(float)
    main_thread = threading.get_ident()
    scoring_now = threading.Event()  # only the scoring's calls count, not the bare run's
    originals = {(owner, name): getattr(owner, name) for owner, names in TIMED.items() for name in names}

    def timed(original, name):
        @functools.wraps(original)
        def call(*args, **kwargs):
            started = time.monotonic()
            try:
                return original(*args, **kwargs)
            finally:
                if scoring_now.is_set():
                    spent[(threading.get_ident() == main_thread, name)] += time.monotonic() - started
        return call

    settings = EvalSettings(image_template=defaults.image_template, run_scripts=defaults.run_scripts,
                            run_id="bench-eval")
    bare = scoring = 0.0
    with tempfile.TemporaryDirectory() as out:
        for (owner, name), original in originals.items():
            setattr(owner, name, timed(original, name))
        try:
            for task in tasks:
                bare += bare_run(task, defaults.run_scripts, bare_network)
                started = time.monotonic()
                scoring_now.set()
                evaluate(task, task.patch, Path(out) / task.instance_id, settings)
                scoring_now.clear()
                scoring += time.monotonic() - started
        finally:
            for (owner, name), original in originals.items():
                setattr(owner, name, original)
    count = len(tasks)
    print(f"\nper scoring, one at a time, over {count} tasks: bare run {bare / count * 1000:.0f} ms, "
          f"scoring {scoring / count * 1000:.0f} ms ({(scoring - bare) / count * 1000:+.0f} ms)")
    on_path = sum(value for (main, _), value in spent.items() if main)
    for (main, name), value in sorted(spent.items(), key=lambda item: (not item[0][0], -item[1])):
        where = "on the scoring's path" if main else "alongside"
        print(f"  {name:<14} {value / count * 1000:7.0f} ms   {where}")
    print(f"  {'other':<14} {(scoring - on_path) / count * 1000:7.0f} ms   on the scoring's path (swepipe's own work)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--phases", action="store_true", help="then time each Docker call of one scoring a task")
    parser.add_argument("--bare-network", action="store_true", help="the bare runs with the network on")
    args = parser.parse_args()
    tasks = load_tasks(BUNDLED)[: args.limit]
    defaults = defaults_for(BUNDLED)

    def bare_pass() -> tuple[float, list[float]]:
        started = time.monotonic()
        with ThreadPoolExecutor(args.workers) as pool:
            each = list(pool.map(lambda t: bare_run(t, defaults.run_scripts, args.bare_network), tasks))
        return time.monotonic() - started, each

    def eval_pass(profile) -> tuple[float, float, int]:
        with tempfile.TemporaryDirectory() as out:
            settings = EvalSettings(image_template=defaults.image_template, run_scripts=defaults.run_scripts,
                                    run_id="bench-eval", profile=profile.name,
                                    limits=container_limits(concurrent=args.workers))  # as swepipe eval sizes them
            started = time.monotonic()
            summary = evaluate_predictions([PatchToScore(t.instance_id, t.patch) for t in tasks], tasks, Path(out),
                                           settings, workers=args.workers, show_progress=False)
            return time.monotonic() - started, settings.container_limits().cpus, summary.resolved

    bare_pass()  # warm-up
    print(f"{len(tasks)} bundled tasks, {args.workers} workers, {args.rounds} round(s)")
    ratios: dict[str, list[float]] = {name: [] for name in PROFILES}
    for round_number in range(1, args.rounds + 1):
        bare, bare_each = bare_pass()
        print(f"round {round_number}: bare test-script runs    {bare:7.1f} s wall ({sum(bare_each):.1f} s summed)"
              "   1.00x")
        for profile in PROFILES.values():
            full, cpus, resolved = eval_pass(profile)
            ratios[profile.name].append(full / bare)
            print(f"round {round_number}: swepipe eval, {profile.name:<9} {full:7.1f} s wall, {cpus:g} CPU(s) a "
                  f"container, gold resolved {resolved}/{len(tasks)}   {full / bare:5.2f}x")
    for name, values in ratios.items() if args.rounds else ():
        print(f"profile {name:<9}: median {statistics.median(values):.2f}x of the bare runs "
              f"(rounds: {', '.join(f'{v:.2f}' for v in values)})")
    if args.phases:
        phases(tasks, defaults, args.bare_network)

if __name__ == "__main__":
    main()
