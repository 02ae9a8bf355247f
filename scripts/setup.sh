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

# Verifies an existing file without network access; downloads only when missing.
"$venv/bin/zephon-provision-tokenizer"
