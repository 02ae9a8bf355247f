"""``python -m benchmarks.corpus_scale``: the command."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.corpus_scale.children import in_child, measure_order
from benchmarks.corpus_scale.corpora import (
    DATA_DIR,
    KEEP_FREE_BYTES,
    KINDS,
    PROBE_RECORDS_PER_SHARD,
    RESULTS,
    SHARD_WINDOW,
    estimated_disk,
    parse_count,
    plan_corpora,
)
from benchmarks.corpus_scale.goals import evaluate_goals, extrapolate, run_ok
from benchmarks.corpus_scale.report import machine_line, run_status, to_markdown
from benchmarks.noise import NoiseGuard
from benchmarks.publish import publish


def main(argv: list[str] | None = None) -> int:
    """The ``benchmarks.corpus_scale`` command (module docstring)."""
    parser = argparse.ArgumentParser(
        prog="benchmarks.corpus_scale", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="100k and 1M records only")
    parser.add_argument("--scales", help="records per scale, e.g. 1M,10M,100M (the default)")
    parser.add_argument("--orders", default="v1,v2", help="orders to measure (default v1,v2)")
    parser.add_argument(
        "--v1-max-records",
        default="10M",
        help="skip v1 above this many records (it indexes every shard; default 10M)",
    )
    parser.add_argument(
        "--probe-shards",
        type=int,
        help=f"shards of the many-shard probe ({PROBE_RECORDS_PER_SHARD} records each; v2 only; "
        "default 100000, quick 10000; 0 skips it)",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per child")
    parser.add_argument("--warm-reps", type=int, default=3, help="warm children per order")
    parser.add_argument(
        "--noise-budget",
        type=float,
        help="seconds a run may spend waiting for a quiet machine and repeating disturbed "
        "children (default 600, quick 60)",
    )
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    began = time.perf_counter()
    default_scales = "100k,1M" if args.quick else "1M,10M,100M"
    scales = [parse_count(s) for s in (args.scales or default_scales).split(",") if s.strip()]
    orders = [o.strip() for o in args.orders.split(",") if o.strip()]
    v1_max = parse_count(args.v1_max_records)
    probe_shards = args.probe_shards
    if probe_shards is None:
        probe_shards = 10_000 if args.quick else 100_000
    budget = args.noise_budget if args.noise_budget is not None else (60 if args.quick else 600)
    root = args.data_dir.resolve()
    root.mkdir(parents=True, exist_ok=True)
    command = " ".join(
        ["python -m benchmarks.corpus_scale", *(sys.argv[1:] if argv is None else argv)]
    )
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine_line(),
        "cores": os.cpu_count(),
        "command": command,
        "settings": {
            "scales": scales,
            "orders": orders,
            "v1_max_records": v1_max,
            "probe_shards": probe_shards,
            "timeout_s": args.timeout,
            "warm_reps": args.warm_reps,
            "noise_budget_s": budget,
            "data_dir": str(root),
            "shard_window": SHARD_WINDOW,
            "kinds": {k: asdict(v) for k, v in KINDS.items()},
        },
        "warm_reps": args.warm_reps,
        "corpora": [],
    }
    quiet = NoiseGuard(budget, load_of=lambda out: out.get("other_load_percent"))
    metadata: list[dict[str, Any]] = []
    for corpus in plan_corpora(scales, args.quick, probe_shards):
        mine = [o for o in orders if not (corpus.role == "probe" and o == "v1")]
        not_run = {}
        if "v1" in mine and corpus.records > v1_max:
            mine.remove("v1")
            not_run["v1"] = (
                f"{corpus.records:,} records is above --v1-max-records {v1_max:,} (v1 indexes "
                "every shard and holds O(records) arrays: see the extrapolation)"
            )
        if corpus.role == "probe" and "v1" in orders:
            not_run["v1"] = "the probe measures v2's per-shard costs (v1 indexes every shard)"
        entry: dict[str, Any] = {
            "corpus": corpus.name,
            "role": corpus.role,
            "kind": corpus.kind,
            "records": corpus.records,
            "shards": corpus.shards,
            "not_run": not_run,
        }
        report["corpora"].append(entry)
        need = estimated_disk(corpus, mine)
        manifest = root / corpus.name / "manifest.json"
        if manifest.is_file():
            need -= corpus.estimated_bytes()
        free = shutil.disk_usage(root).free
        if free - need < KEEP_FREE_BYTES:
            entry["skipped"] = (
                f"needs ~{need / 2**30:.1f} GiB of disk, {free / 2**30:.1f} GiB free "
                f"(keeping {KEEP_FREE_BYTES / 2**30:.0f} GiB free)"
            )
            print(f"corpus_scale: {corpus.name}: skipped: {entry['skipped']}", flush=True)
            continue
        print(f"corpus_scale: {corpus.name}: generating (or reusing)", flush=True)
        entry["generation"] = in_child("generate_child", corpus, root, args.timeout * 4)
        if not entry["generation"]["ok"]:
            entry["skipped"] = f"generating it {run_status(entry['generation'])}"
            print(f"corpus_scale: {corpus.name}: {entry['skipped']}", flush=True)
            continue
        entry["bytes"] = entry["generation"]["bytes"]
        if entry["generation"]["generated"]:
            # A file modified in the last 2 s is not put in Zephon's stat cache (it might
            # change again unseen): wait, so the warm runs find every shard's hash.
            time.sleep(2.5)
        entry["orders"] = {}
        for order in mine:
            print(f"corpus_scale: {corpus.name}: {order} cold + {args.warm_reps} warm", flush=True)
            entry["orders"][order] = measure_order(
                corpus, order, root, args.timeout, args.warm_reps, quiet
            )
            for mode in ("cold", "warm"):
                run = entry["orders"][order][mode]
                shown = run["time_to_first_batch_s"] if run_ok(run) else run_status(run)[:200]
                print(f"corpus_scale:   {order} {mode}: {shown}", flush=True)
        if corpus.role == "probe" or corpus.shards >= 1000:
            timed = in_child("metadata_child", corpus, root, args.timeout)
            if timed["ok"]:
                metadata.append(timed)
    report["goals"] = evaluate_goals(report["corpora"])
    report["extrapolation"] = extrapolate(report["corpora"], metadata)
    report["wall_s"] = round(time.perf_counter() - began, 1)
    report["noise"] = {"budget_s": budget, "spent_s": round(quiet.spent_s, 1)}
    stem = "corpus_scale-quick" if args.quick else "corpus_scale"
    publish(args.results_dir, stem, report, to_markdown(report))
    return 0
