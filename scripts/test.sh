#!/usr/bin/env bash
# What CI runs: set-up (and Chromium, for the dashboard test), lint, format check and
# the tests. Arguments go to pytest.
# pytest's exit code is the script's (5, "no tests collected", is a failure too).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

# tests/e2e/test_dashboard.py renders the MLflow UI in headless Chromium and fails without it.
# Idempotent: nothing happens when chromium is on PATH; apt-get update only if needed.
if ! command -v chromium >/dev/null 2>&1; then
    apt=(env DEBIAN_FRONTEND=noninteractive apt-get)
    if [[ "$(id -u)" != 0 ]] && command -v sudo >/dev/null 2>&1; then
        apt=(sudo "${apt[@]}")
    fi
    echo "test: installing chromium (for tests/e2e/test_dashboard.py)"
    "${apt[@]}" install -y -q chromium || { "${apt[@]}" update -q && "${apt[@]}" install -y -q chromium; }
    chromium --version
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# Two workers, each taking whole test files (module fixtures train once): a training
# launch spends much of its time starting up, which the other worker overlaps.
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n "${ZEPHON_TEST_WORKERS:-2}" \
    --dist loadfile "$@"
