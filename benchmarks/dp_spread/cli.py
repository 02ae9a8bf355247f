"""The command line: ``python -m benchmarks.dp_spread`` (or ``bash scripts/bench.sh --dp-spread``)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import dp_spread
from benchmarks.dp_spread.analysis import analyse, collect
from benchmarks.dp_spread.design import GLOBAL_BATCH, LANES, LOADERS, MODELS, SEQ_LEN
from benchmarks.dp_spread.launch import OMP_THREADS, seed_checkpoint, train
from benchmarks.dp_spread.prepare import Prepared, prepare
from benchmarks.dp_spread.report import render
from benchmarks.machine import REPO_ROOT, describe_machine, package_version
from benchmarks.publish import RESULTS

STEPS = 40
DPS = (1, 2, 4)
CORPUS_BYTES = 300_000
"""Text bytes per domain of the corpus (~400k gpt2 tokens in all; a run trains on ~41k)."""
HOLDOUT_BYTES = 12_288
"""Held-out bytes per domain (the evaluation text)."""
RESULT_FILE = "dp_spread.json"
PACKAGES = ("torch", "torchtitan", "datasets")
"""Packages whose versions the report records."""


def _print_progress(message: str) -> None:
    print(f"[dp-spread] {message}", file=sys.stderr, flush=True)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.dp_spread", description=(dp_spread.__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--dp", type=int, nargs="+", default=list(DPS), metavar="N")
    parser.add_argument(
        "--model",
        choices=sorted(MODELS),
        default="debug",
        help="the model both loaders train: debug (zephon_debug, the benchmark's) or mini "
        "(zephon_mini: dim 64, 2 layers; for smoke runs) (default: debug)",
    )
    parser.add_argument("--corpus-bytes", type=int, default=CORPUS_BYTES)
    parser.add_argument("--holdout-bytes", type=int, default=HOLDOUT_BYTES)
    parser.add_argument(
        "--work-dir", type=Path, default=REPO_ROOT / ".zephon" / "bench" / "dp_spread"
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument("--docs-dir", type=Path, default=REPO_ROOT / "docs")
    parser.add_argument(
        "--no-seed-checkpoint",
        action="store_true",
        help="initialise each run from --debug.seed alone instead of one shared seed "
        "checkpoint (on CPU the initial weights then differ between dp sizes)",
    )
    parser.add_argument(
        "--render-only",
        action="store_true",
        help=f"rewrite the markdown and the figure from <results-dir>/{RESULT_FILE}, no runs",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (design doc) and write its JSON, markdown and figure; 0 on
    success (a failed training raises ``LaunchError``)."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.render_only:
        render(json.loads((args.results_dir / RESULT_FILE).read_text()), args.docs_dir)
        return 0
    if any(GLOBAL_BATCH % dp or LANES % dp for dp in args.dp) or args.steps < 1:
        parser.error(f"--dp values must divide {LANES} (the lanes) and --steps must be >= 1")
    dps = sorted(set(args.dp))
    work_dir = args.work_dir.resolve()
    started = time.monotonic()
    load_before = os.getloadavg()
    _print_progress(f"preparing the corpus in {work_dir}")
    prepared = prepare(work_dir, args.corpus_bytes, args.holdout_bytes)
    seed = None
    if not args.no_seed_checkpoint:
        _print_progress(
            f"creating the seed checkpoint of {MODELS[args.model].base} (dp 1, model only)"
        )
        seed = seed_checkpoint(work_dir, prepared, args.model)
    runs: dict[str, list[dict[str, Any]]] = {loader: [] for loader in LOADERS}
    for dp in dps:
        for loader in LOADERS:
            _print_progress(f"{loader} dp {dp}: {args.steps} steps ...")
            run = train(work_dir, prepared, args.model, loader, dp, args.steps, seed)
            result = collect(run, loader, dp, args.steps)
            runs[loader].append(result)
            _print_progress(
                f"{loader} dp {dp}: aggregate bpb {result['aggregate_bpb']:.5f} "
                f"({run['seconds']:.0f} s)"
            )
    meta = _build_report_meta(args, argv if argv is not None else sys.argv[1:], dps, prepared, runs)
    meta.update(
        seed_checkpoint=seed is not None,
        load_average_before=load_before,
        load_average_after=os.getloadavg(),
        wall_minutes=(time.monotonic() - started) / 60,
    )
    report = {
        "meta": meta,
        "summary": analyse(runs, args.steps),
        # "_" keys are the analysis's working data (every sequence hash), not results.
        "runs": [
            {k: v for k, v in r.items() if not k.startswith("_")}
            for loader in LOADERS
            for r in runs[loader]
        ],
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / RESULT_FILE).write_text(json.dumps(report, indent=2) + "\n")
    print(render(report, args.docs_dir))
    return 0


def _build_report_meta(
    args: argparse.Namespace,
    argv: list[str],
    dps: list[int],
    prepared: Prepared,
    runs: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    """The report's ``meta``: how it was made and what the corpus held."""
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "bash scripts/bench.sh --dp-spread" + (f" {shlex.join(argv)}" if argv else ""),
        "machine": describe_machine(PACKAGES, cpus="CPUs (gloo)"),
        "versions": {p: package_version(p) for p in PACKAGES},
        "model": args.model,
        "model_config": MODELS[args.model].base,
        "steps": args.steps,
        "dps": dps,
        "global_batch": GLOBAL_BATCH,
        "seq_len": SEQ_LEN,
        "corpus_bytes_per_domain": args.corpus_bytes,
        "holdout_bytes": args.holdout_bytes,
        "records": prepared.records,
        "tokens": prepared.tokens,
        "heldout_bytes": prepared.heldout_bytes_actual,
        "mixture": prepared.mixture,
        "relooped": [
            f"{r['loader']} dp {r['dp']}"
            for rs in runs.values()
            for r in rs
            if r["stock_data_relooped"]
        ],
        "omp_threads": OMP_THREADS,
        "run_seconds_relative": {
            f"{r['loader']}-dp{r['dp']}": r["seconds"] / runs["zephon"][0]["seconds"]
            for loader in LOADERS
            for r in runs[loader]
        },
    }
