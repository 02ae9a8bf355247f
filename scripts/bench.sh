#!/usr/bin/env bash
# Benchmarks: set up (idempotent), install the `bench` extra (psutil) into .venv, then
# run `python -m benchmarks.run` with the given arguments, e.g. `--quick` (~1 min smoke
# run). Full run: < 15 min on 2 cores; results go to benchmarks/results/latest.{json,md}
# (latest-quick.* with --quick). `--decisions [OPTIONS]` runs the decisions-against-noise
# benchmark (benchmarks/decisions.py), `--cores` start-up, the main job's CPU use and the
# pipeline's speed (benchmarks/cores.py), `--tokenizers [SPEC]` the pipeline with a Hugging
# Face tokenizer against raw `tokenizers`, `--corpus-scale [OPTIONS]` the first batch's cost
# as the corpus grows, order v1 against v2 (benchmarks/corpus_scale.py), `--order-quality`
# how well each order mixes shards and keeps the shares (benchmarks/order_quality.py),
# `--remote-reads` remote Parquet read by range against downloaded (benchmarks/remote_reads.py),
# `--source-formats` Arrow and MDS sources against Parquet (benchmarks/source_formats.py),
# `--process` each processing step and decontamination against none (benchmarks/processing.py),
# `--curation` the curation demo timed, with its decision (benchmarks/curation_demo.py). `--looks`
# the guard over an agent's repeated comparisons, simulated (benchmarks/sequential_looks.py).
# `--token-cache` the token cache: CPU per token cold, warm and without (benchmarks/token_cache.py).
# `--variant-noise` variants unequal in training noise, simulated (benchmarks/variant_noise.py). `--dp-spread
# [OPTIONS]` runs the dp-spread benchmark, `python -m benchmarks.dp_spread [OPTIONS]`,
# instead. See benchmarks/README.md.
# Safe to re-run: the install is skipped while .venv/.zephon-bench-installed holds the
# sha256 of pyproject.toml.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

venv=.venv
stamp="$venv/.zephon-bench-installed"
want="$("$venv/bin/python" -c 'import hashlib; print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest())')"
if [[ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]]; then
    echo "bench: installing .[bench] into $venv"
    # torch stays the pinned 2.13.0 that setup.sh installed (a CPU wheel on CPU machines).
    "$venv/bin/python" -m pip install -qq -e ".[dev,bench]"
    echo "$want" >"$stamp"
else
    echo "bench: .[bench] up to date ($stamp matches pyproject.toml)"
fi

if [[ "${1:-}" == "--training" ]]; then
    # Seconds per training step per precision, and with --main-job the main job's wall and
    # CPU time (benchmarks/training.py): benchmarks/results/training.{json,md}.
    shift
    exec "$venv/bin/python" -m benchmarks.training "$@"
fi
if [[ "${1:-}" == "--faults" ]]; then
    # The fault matrix: one run SIGKILLed at every failpoint of an 8-step training and
    # resumed after each, against an uninterrupted run (benchmarks/fault_matrix.py):
    # benchmarks/results/fault_matrix.{json,md}.
    shift
    exec "$venv/bin/python" -m benchmarks.fault_matrix "$@"
fi
if [[ "${1:-}" == "--token-cache" ]]; then
    # What the token cache saves: CPU per token with no cache, a cold and a warm one against
    # raw tiktoken, and a 12-job sweep's pipeline CPU with and without it
    # (benchmarks/token_cache.py; ~5 min on 2 cores): benchmarks/results/token_cache.{json,md}.
    shift
    exec "$venv/bin/python" -m benchmarks.token_cache "$@"
fi
if [[ "${1:-}" == "--appended-reads" ]]; then
    # A launch's watch of its run folder as the run grows: one tick's reads of steps.jsonl and
    # metrics.jsonl, whole against read on (benchmarks/appended_reads.py; ~1 min):
    # benchmarks/results/appended_reads.{json,md}.
    shift
    exec "$venv/bin/python" -m benchmarks.appended_reads "$@"
fi
if [[ "${1:-}" == "--test-suite" ]]; then
    # The test suite (bash scripts/test.sh, what CI runs) timed once; pytest's summary and
    # the script's wall time added to benchmarks/results/suite_time.{json,md} (~20 min).
    shift
    exec "$venv/bin/python" -m benchmarks.suite_time "$@"
fi
if [[ "${1:-}" == "--process" ]]; then
    # The pipeline with each built-in processing step (data.process) against none, and
    # decontamination against 5,000 scored documents, as ratios in one run
    # (benchmarks/processing.py; ~5 min on 2 cores): benchmarks/results/processing.{json,md}.
    shift
    exec "$venv/bin/python" -m benchmarks.processing "$@"
fi
if [[ "${1:-}" == "--curation" ]]; then
    # The curation demo (bash scripts/main.sh --curation) in a scratch folder, every run
    # trained: its wall and CPU time, the guard's table and decision
    # (benchmarks/curation_demo.py; ~5 min on 2 cores): benchmarks/results/curation_demo.{json,md}.
    shift
    exec "$venv/bin/python" -m benchmarks.curation_demo "$@"
fi
if [[ "${1:-}" == "--tokenizers" ]]; then
    # The pipeline with a Hugging Face tokenizer (default: the GPT-NeoX tokenizer.json of
    # tests/data) against raw `tokenizers` encode_batch_fast on the same threads, prose
    # and code (~3 min on 2 cores): benchmarks/results/tokenizer_ratio_huggingface.{json,md}.
    shift
    exec "$venv/bin/python" -m benchmarks.tokenizer_ratio --runners threads \
        --tokenizer "${1:-tests/data/tokenizers/gpt-neox}"
fi
if [[ "${1:-}" == "--cores" ]]; then
    # Every core busy: a run's start-up and teardown cold vs warm, the main job now vs
    # before (wall, CPU / wall), the pipeline vs raw tiktoken on prose and code
    # (benchmarks/cores.py; ~8 min on 2 cores): benchmarks/results/cores.{json,md}.
    shift
    exec "$venv/bin/python" -m benchmarks.cores "$@"
fi
if [[ "${1:-}" == "--corpus-scale" ]]; then
    # Time, memory and reads to the first batch of a lane pipeline over synthetic corpora of
    # 1M to 100M records (16 to 100,000 shards), order v1 against v2, cold and warm
    # (benchmarks/corpus_scale.py; --quick ~1 min): benchmarks/results/corpus_scale.{json,md}.
    shift
    exec "$venv/bin/python" -m benchmarks.corpus_scale "$@"
fi
if [[ "${1:-}" == "--remote-reads" ]]; then
    # Remote Parquet shards in a local S3 endpoint, read by range against downloaded whole:
    # bytes fetched, bytes on disk, seconds to the first batch (benchmarks/remote_reads.py;
    # ~2 min on 2 cores once the prose corpus is built): benchmarks/results/remote_reads.{json,md}.
    shift
    exec "$venv/bin/python" -m benchmarks.remote_reads "$@"
fi
if [[ "${1:-}" == "--source-formats" ]]; then
    # The same records as Parquet, an Arrow folder and MDS (plain and zstd): cold first batch
    # and throughput against Parquet (benchmarks/source_formats.py; ~2 min on 2 cores):
    # benchmarks/results/source_formats.{json,md}.
    shift
    exec "$venv/bin/python" -m benchmarks.source_formats "$@"
fi
if [[ "${1:-}" == "--order-quality" ]]; then
    # The record order's quality, v2 beside v1: distinct shards in every 1,000 records of a
    # lane and each dataset's share of every step's tokens (benchmarks/order_quality.py;
    # ~20 s): benchmarks/results/order_quality.{json,md}.
    shift
    exec "$venv/bin/python" -m benchmarks.order_quality "$@"
fi
if [[ "${1:-}" == "--decisions" ]]; then
    # A/A and planted A/B sweeps (balanced and skewed mixes) under several seeds: how often a
    # decision is noise (benchmarks/decisions.py; ~25 min on 2 shared cores):
    # benchmarks/results/decisions.{json,md}.
    shift
    exec "$venv/bin/python" -m benchmarks.decisions "$@"
fi
if [[ "${1:-}" == "--variant-noise" ]]; then
    # Variants unequal in training noise, simulated: an equal noisy pair among quiet variants,
    # power at equal noise and by seed count, each pair's own seed term against the pooled one
    # (benchmarks/variant_noise.py; ~15 min on 2 cores): benchmarks/results/variant_noise.*.
    shift
    exec "$venv/bin/python" -m benchmarks.variant_noise "$@"
fi
if [[ "${1:-}" == "--looks" ]]; then
    # An agent adding a seed and comparing again, simulated under three noise balances: the
    # guard's error over the whole sequence, its power and its next-step advice
    # (benchmarks/sequential_looks.py; ~5 min on 2 cores): benchmarks/results/sequential_looks.*.
    shift
    exec "$venv/bin/python" -m benchmarks.sequential_looks "$@"
fi
if [[ "${1:-}" == "--mix-search" ]]; then
    # Zephon's mix search against random, grid and RegMix on synthetic truths, the guard's
    # confirmation on a flat truth, and the models on RegMix's published runs
    # (benchmarks/mix_search/; ~7 min on 2 cores, --quick ~1 min):
    # benchmarks/results/mix_search.{json,md}.
    shift
    exec "$venv/bin/python" -m benchmarks.mix_search "$@"
fi
if [[ "${1:-}" == "--dp-spread" ]]; then
    # Score spread across dp sizes, stock loader vs lanes (benchmarks/dp_spread/;
    # 8-20 min on 2 cores): docs/dp_spread.{md,png}, benchmarks/results/dp_spread.json.
    shift
    exec "$venv/bin/python" -m benchmarks.dp_spread "$@"
fi
exec "$venv/bin/python" -m benchmarks.run "$@"
