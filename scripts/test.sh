#!/usr/bin/env bash
# What CI runs: set-up (and Debian's chromium, slurm-wlm, munge and postgresql for the tests), lint,
# format check and the tests. Arguments go to pytest.
# pytest's exit code is the script's (5, "no tests collected", is a failure too).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

# Debian packages the tests use: chromium (tests/e2e/test_dashboard.py renders the MLflow UI
# in it) and slurm-wlm with munge (tests/e2e/test_slurm.py starts a real Slurm cluster; its
# fixture installs them too when run alone). Idempotent: nothing happens when all are
# there; apt-get update only if needed.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v slurmctld >/dev/null 2>&1 || missing+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || missing+=(munge)
# PostgreSQL's server programs, for the team tracking server's tests: Debian keeps them
# off PATH, in /usr/lib/postgresql/<version>/bin
postgres_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
command -v initdb >/dev/null 2>&1 || [[ -n "$(postgres_bin)" ]] || missing+=(postgresql)
if ((${#missing[@]})); then
    apt=(env DEBIAN_FRONTEND=noninteractive apt-get)
    if [[ "$(id -u)" != 0 ]] && command -v sudo >/dev/null 2>&1; then
        apt=(sudo "${apt[@]}")
    fi
    echo "test: installing ${missing[*]}"
    "${apt[@]}" install -y -q "${missing[@]}" || { "${apt[@]}" update -q && "${apt[@]}" install -y -q "${missing[@]}"; }
fi
command -v initdb >/dev/null 2>&1 || export PATH="$PATH:$(postgres_bin)"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# Three workers on two cores, each taking whole test files (module fixtures train once):
# much of the suite waits (a launch starting up, a Slurm or job-service poll, a server),
# which the other workers overlap; their times: benchmarks/results/suite_time.md
# (bash scripts/bench.sh --test-suite). Files go out in collection order, the training files first
# (tests/conftest.py), not xdist's default of the files with the most tests first, which
# left the longest for the end.
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n "${ZEPHON_TEST_WORKERS:-3}" \
    --dist loadfile --no-loadscope-reorder "$@"
