#!/usr/bin/env bash
# Set up a development environment in .venv: dependencies, Zephon (editable) and
# the gpt2 tokenizer file, which is fetched here, at set-up, never at training time.
# Safe to re-run: the pip installs are skipped while .venv/.zephon-installed holds
# the sha256 of pyproject.toml, so a re-run takes seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

venv=.venv
stamp="$venv/.zephon-installed"

if [[ ! -x "$venv/bin/python" ]]; then
    echo "setup: creating $venv"
    python3 -m venv "$venv"
fi

want="$("$venv/bin/python" -c 'import hashlib; print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest())')"
if [[ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]]; then
    echo "setup: installing dependencies into $venv (the first time takes a few minutes)"
    "$venv/bin/python" -m pip install -qq --upgrade pip
    # torch first and pinned: on the CPU development machines pip takes a CPU wheel
    # from local disk, while an unpinned torch would pull a multi-GB CUDA build; on a
    # GPU machine PyPI's default torch 2.13.0 build (with CUDA) is the right one.
    "$venv/bin/python" -m pip install -qq torch==2.13.0
    "$venv/bin/python" -m pip install -qq -e ".[dev]"
    echo "$want" >"$stamp"
else
    echo "setup: dependencies up to date ($stamp matches pyproject.toml)"
fi

# A machine whose GPUs nvidia-smi lists needs a CUDA build of torch. Where a pip
# configuration sends torch to a local CPU wheel (the CPU development machines), torch is
# installed again with pip's configuration files ignored, from the index's default build.
has_cuda_torch() { "$venv/bin/python" -c 'import sys, torch; sys.exit(torch.version.cuda is None)'; }
if nvidia-smi -L >/dev/null 2>&1 && ! has_cuda_torch; then
    echo "setup: GPUs found but torch is a CPU build: installing torch==2.13.0 with CUDA"
    "$venv/bin/python" -m pip uninstall -qq -y torch
    PIP_CONFIG_FILE=/dev/null "$venv/bin/python" -m pip install -qq torch==2.13.0
    has_cuda_torch || {
        echo "setup: error: torch==2.13.0 is still a CPU build; install a CUDA build of" \
            "torch==2.13.0 into $venv from an index that serves one, then re-run" >&2
        exit 1
    }
fi

# Verifies an existing file without network access; downloads only when missing.
"$venv/bin/zephon-provision-tokenizer"
