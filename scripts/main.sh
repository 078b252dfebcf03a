#!/usr/bin/env bash
# The main job, from a fresh machine: set up, run the pipeline on a few bundled tasks with the local
# model (no API key needed), score every prediction with the hidden tests, then print the report.
set -euo pipefail
cd "$(dirname "$0")/.."
tasks="${SWEPIPE_MAIN_TASKS:-3}"
bash scripts/setup.sh --limit "$tasks"  # only the images this run needs: `swepipe images build` makes the rest
echo "main: set up in $SECONDS s; the run starts now"
run_id="main-$(date +%Y%m%d-%H%M%S)"
.venv/bin/swepipe run --limit "$tasks" --config scripts/local-demo.yaml --run-id "$run_id" --evaluate
.venv/bin/swepipe report "runs/$run_id"
echo "main: done in $SECONDS s (runs/$run_id)"
