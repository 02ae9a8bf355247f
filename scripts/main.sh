#!/usr/bin/env bash
# The main job: set up (idempotent), build the local three-domain corpus, then sweep
# three data mixes, each on dp 1 and dp 2, through Hydra (conf/main.yaml): real
# TorchTitan training on CPU or GPU, everything logged to ./mlflow.db, and the
# comparison guard's table (or its refusal) at the end. Arguments are Hydra overrides.
# `bash scripts/main.sh --demo` runs the older digest-agreement demo (zephon-demo) instead;
# `bash scripts/main.sh --search` runs a mix search on the same corpus (conf/search.yaml);
# `bash scripts/main.sh --anneal` anneals candidate mixes from a base model (conf/anneal.yaml);
# `bash scripts/main.sh --curation` compares a domain raw and filtered (conf/curation.yaml).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
if [[ "${1:-}" == "--demo" ]]; then
    shift
    exec .venv/bin/zephon-demo "$@"
fi
if [[ "${1:-}" == "--anneal" ]]; then
    # Anneals (docs/anneals.md): the base model, trained once (named by the content of its
    # presets and resumed), then conf/anneal.yaml's sweep from its step-120 checkpoint (the
    # end of its stable phase: conf/anneal_base.yaml's checkpoint_interval, a full one), with
    # its optimizer state and its learning rate at that step as the anneals' peak.
    shift
    key="$(cat conf/anneal_base.yaml conf/config.yaml conf/model/mini.yaml conf/data/stdlib.yaml \
        conf/mix/equal.yaml conf/train/short.yaml conf/eval/default.yaml \
        conf/resources/auto.yaml conf/tracking/embedded.yaml \
        | sha256sum | cut -c1-12)"
    base="anneal-base-$key"
    .venv/bin/zephon-run --config-name anneal_base run_name="$base"
    exec .venv/bin/zephon-run --config-name anneal \
        train.init_from="$PWD/runs/$base/titan/checkpoint/step-120" train.init_optimizer=true \
        train.lr_from_init=true "$@"
fi
if [[ "${1:-}" == "--curation" ]]; then
    # Data curation (docs/curation.md): a domain raw against filtered on the fly.
    shift
    exec .venv/bin/zephon-run --config-name curation "$@"
fi
if [[ "${1:-}" == "--search" ]]; then
    shift
    exec .venv/bin/zephon-run --config-name search "$@"
fi
exec .venv/bin/zephon-run --config-name main "$@"
