#!/usr/bin/env bash
# The team's MLflow tracking server on PostgreSQL (docs/team.md, "Tracking server"):
#   bash scripts/tracking_server.sh --backend-store-uri postgresql://USER@HOST/DB --artifacts s3://BUCKET/mlflow
#   bash scripts/tracking_server.sh --init-cluster /srv/zephon/pg --artifacts /srv/zephon/artifacts --host 0.0.0.0
# --help lists the options; the logic is orchestrator/tracking/team_server.py. Runs point at
# the server with tracking=team (ZEPHON_TEAM_TRACKING_URI=http://HOST:PORT).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$repo/.venv/bin/python"  # scripts/setup.sh's environment, else the python on PATH
[[ -x "$python" ]] || python="$(command -v python3)"
PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" exec "$python" -m orchestrator.tracking.team_server "$@"
