#!/usr/bin/env bash
# What CI runs: set-up, lint, format check and the tests. Arguments go to pytest.
# pytest's exit code is the script's (5, "no tests collected", is a failure too).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
