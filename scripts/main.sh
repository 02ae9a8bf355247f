#!/usr/bin/env bash
# The main job: set up (idempotent), then stream a real local corpus on several
# data-parallel layouts and show that every step's global batch digest agrees.
# Arguments go to zephon-demo (see `zephon-demo --help`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
exec .venv/bin/zephon-demo "$@"
