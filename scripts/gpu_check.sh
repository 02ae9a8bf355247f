#!/usr/bin/env bash
# One prepared check of every CUDA path (scripts/gpu_check.py, docs/gpu_check.md): devices,
# precision, dp N -> 1 -> N resumes, a two-mix sweep with replicate_dp, the guard, and the
# GPU's held-out scores against a CPU run. `--cpu`: CPU processes stand in for GPUs (the
# test suite runs it). `--out DIR` (default runs/gpu_check): the runs, gpu_check.json and
# gpu_check.md. At most 10 minutes on one GPU. Set up first (a CUDA torch where nvidia-smi
# works).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
exec .venv/bin/python scripts/gpu_check.py "$@"
