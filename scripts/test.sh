#!/usr/bin/env bash
# The test command: prepare the machine (scripts/setup.sh), lint (ruff, the rules in pyproject.toml), type-check
# (mypy, its mode per package in pyproject.toml), check the bundled tasks are sound (swepipe validate), then run
# every test, Docker ones included.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check pipeline tests scripts examples
.venv/bin/mypy
validated="$(mktemp -d)"
COLUMNS=${COLUMNS:-160} .venv/bin/swepipe validate --output "$validated"
export SWEPIPE_VALIDATED="$validated"  # tests/test_forged_verdicts_docker.py checks this run's verdicts, not its own
exec .venv/bin/python -m pytest "$@"
