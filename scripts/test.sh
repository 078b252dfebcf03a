#!/usr/bin/env bash
# The test command: prepare the machine (scripts/setup.sh), check the bundled tasks are sound
# (swepipe validate), then run every test, Docker ones included. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
COLUMNS=${COLUMNS:-160} .venv/bin/swepipe validate --output-dir "$(mktemp -d)"
exec .venv/bin/python -m pytest "$@"
