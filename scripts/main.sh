#!/usr/bin/env bash
# The main job on the bundled benchmark, from a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/swepipe tasks
