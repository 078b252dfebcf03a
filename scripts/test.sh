#!/usr/bin/env bash
# The test command: prepare the machine (scripts/setup.sh), then run every test, Docker ones included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
