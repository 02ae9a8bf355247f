"""The command line: ``python -m benchmarks.mix_search`` (``bash scripts/bench.sh --mix-search``).

Default: 5 truths x 2 seeds, each strategy at 16, 32 and 64 runs (random also at 128),
Zephon's picks at 32 runs confirmed by the guard (and 50 times more with other seeds),
20 searches on the flat truth at 8 runs (likewise confirmed), and RegMix's runs at 32, 64
and 512 training runs; ~7 minutes on 2 cores. ``--quick``: 2 truths x 1 seed at 16 and 32
runs, 2 flat searches, RegMix at 64 runs (~1 minute),
written to ``mix_search-quick.{json,md}`` so a smoke run never replaces the full results.
Every number is deterministic for given options (whatever ``--workers``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from benchmarks.machine import describe_machine
from benchmarks.mix_search import regmix, report
from benchmarks.mix_search.strategies import STRATEGIES, ZEPHON
from benchmarks.mix_search.tasks import RegmixTask, SearchTask, run_task
from benchmarks.mix_search.truths import Truth, flat_truth, make_truth
from benchmarks.publish import RESULTS
from benchmarks.timing import Stopwatch

RANDOM_EXTRA_BUDGET = 128
"""Random sampling also runs this many: the search's goal compares against it."""
CONFIRMATION_BUDGET = 32
"""Budget of the non-flat searches whose picks are confirmed (the guard's power)."""
FLAT_BUDGET = 8
"""Runs per flat-truth search. Not 32: the mixing law fits pure noise slowly (10-20 CPU s a
search from 12 runs up, against ~2 s at 8 runs, where only the Gaussian process is
validated), and 20 such searches would cost 4 of the 15 minutes. What the flat truth
tests is the confirmation, which does not depend on how the pick was found."""
PACKAGES = ("numpy", "scipy", "scikit-learn", "lightgbm")

Task = SearchTask | RegmixTask


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.mix_search", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="the ~1-2 minute smoke run")
    parser.add_argument("--truths", type=int, help="non-flat truths (default 5; quick 2)")
    parser.add_argument("--repetitions", type=int, help="seeds per truth (default 2; quick 1)")
    parser.add_argument(
        "--budgets", type=int, nargs="+", help="runs per search (default 16 32 64; quick 16 32)"
    )
    parser.add_argument(
        "--confirmation-budget",
        type=int,
        help=f"budget whose picks are confirmed (default {CONFIRMATION_BUDGET}; quick 16)",
    )
    parser.add_argument(
        "--flat-searches", type=int, help="searches on the flat truth (default 20; quick 2)"
    )
    parser.add_argument(
        "--flat-budget", type=int, help="runs per flat-truth search (default and quick 8)"
    )
    parser.add_argument(
        "--reconfirmations",
        type=int,
        help="further confirmations of each confirmed search's picks (default 50; quick 10)",
    )
    parser.add_argument(
        "--regmix-runs",
        type=int,
        nargs="*",
        help="RegMix training runs to fit on (default 32 64 512; quick 64; none: skip)",
    )
    parser.add_argument("--data", type=Path, default=regmix.DATA, help="RegMix's CSV files")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    return parser


def _resolve_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The options with the defaults of the chosen mode filled in."""
    full = {
        "truths": 5,
        "repetitions": 2,
        "budgets": [16, 32, 64],
        "confirmation_budget": CONFIRMATION_BUDGET,
        "flat_searches": 20,
        "flat_budget": FLAT_BUDGET,
        "reconfirmations": 50,
        "regmix_runs": [32, 64, 512],
    }
    quick = {
        "truths": 2,
        "repetitions": 1,
        "budgets": [16, 32],
        "confirmation_budget": 16,
        "flat_searches": 2,
        "flat_budget": FLAT_BUDGET,
        "reconfirmations": 10,
        "regmix_runs": [64],
    }
    defaults = quick if args.quick else full
    settings = {
        key: value if (value := getattr(args, key)) is not None else default
        for key, default in defaults.items()
    }
    return settings | {"quick": args.quick, "workers": max(1, args.workers)}


def plan(settings: dict[str, Any], data: Path) -> tuple[list[Truth], list[Task]]:
    """The truths (the flat one last) and every task, slowest first."""
    truths = [make_truth(seed) for seed in range(settings["truths"])]
    flat = flat_truth()
    for truth in [*truths, flat]:
        _ = truth.optimum  # computed once here, then shipped to the workers with the truth
    budgets = settings["budgets"]
    confirmed = settings["confirmation_budget"]
    reconfirmations = settings["reconfirmations"]
    tasks: list[Task] = [
        SearchTask(
            strategy,
            truth,
            budget,
            seed,
            confirm=strategy == ZEPHON and budget == confirmed,
            reconfirmations=reconfirmations,
        )
        for truth in truths
        for seed in range(settings["repetitions"])
        for strategy in STRATEGIES
        for budget in budgets
    ]
    tasks += [
        SearchTask("random", truth, RANDOM_EXTRA_BUDGET, seed)
        for truth in truths
        for seed in range(settings["repetitions"])
        if RANDOM_EXTRA_BUDGET not in budgets
    ]
    tasks += [
        SearchTask(
            ZEPHON,
            flat,
            settings["flat_budget"],
            seed,
            confirm=True,
            reconfirmations=reconfirmations,
        )
        for seed in range(settings["flat_searches"])
    ]
    tasks += [RegmixTask(runs, data) for runs in settings["regmix_runs"]]
    return [*truths, flat], sorted(tasks, key=lambda task: -task.cost)


def execute(
    tasks: Sequence[Task], workers: int, progress: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Every task's record, in the order of ``tasks``; in ``workers`` processes (spawned:
    a fork of a process with BLAS and OpenMP thread pools can hang) or, with one worker,
    in this one."""
    records: list[dict[str, Any] | None] = [None] * len(tasks)
    if workers == 1:
        for index, task in enumerate(tasks):
            records[index] = run_task(task)
            progress(_describe_finished_task(index + 1, len(tasks), records[index]))
        return [r for r in records if r is not None]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        futures = {pool.submit(run_task, task): index for index, task in enumerate(tasks)}
        for done, future in enumerate(as_completed(futures), start=1):
            records[futures[future]] = future.result()
            progress(_describe_finished_task(done, len(tasks), records[futures[future]]))
    return [r for r in records if r is not None]


def _describe_finished_task(done: int, total: int, record: dict[str, Any]) -> str:
    if record["kind"] == "regmix":
        return f"{done}/{total} RegMix's runs, {record['runs']} training runs"
    return (
        f"{done}/{total} {record['strategy']} on {record['truth']}, {record['budget']} runs, "
        f"seed {record['seed']}: regret {record['regret']:.4f}"
    )


def build_report(
    settings: dict[str, Any],
    truths: list[Truth],
    records: list[dict[str, Any]],
    watch: Stopwatch,
    command: str,
) -> dict[str, Any]:
    """The JSON report: settings, truths, every search, the summaries and the goals."""
    searches = [r for r in records if r["kind"] == "search"]
    confirmed = settings["confirmation_budget"]
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": describe_machine(PACKAGES, "cores"),
        "command": command,
        "wall_s": round(watch.seconds, 1),
        "cpu_s": round(watch.cpu_s, 1),
        "other_load_percent": watch.other_load_percent,
        "task_cpu_s": report.cpu_rows(records),
        "settings": settings,
        "truths": [truth.describe() for truth in truths],
        "strategies": report.strategy_rows(searches),
        "stops": report.stop_rows(searches),
        "flat_confirmation": report.confirmation_rows(searches, flat=True),
        "power": report.confirmation_rows(
            [r for r in searches if r["budget"] == confirmed], flat=False
        ),
        "regmix": sorted((r for r in records if r["kind"] == "regmix"), key=lambda r: r["runs"]),
        "searches": searches,
    }
    result["goals"] = report.goals(result)
    return result


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, write ``mix_search[-quick].{json,md}``, print the page."""
    args = _build_parser().parse_args(argv)
    settings = _resolve_settings(args)
    start = time.monotonic()

    def progress(message: str) -> None:
        elapsed = time.monotonic() - start
        print(f"[mix-search {elapsed:5.0f} s] {message}", file=sys.stderr, flush=True)

    truths, tasks = plan(settings, args.data)
    progress(f"{len(tasks)} tasks on {settings['workers']} workers")
    with Stopwatch() as watch:
        records = execute(tasks, settings["workers"], progress)
    command = "python -m benchmarks.mix_search " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    result = build_report(settings, truths, records, watch, command.strip())
    stem = "mix_search-quick" if settings["quick"] else "mix_search"
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    markdown = report.to_markdown(result)
    (args.results_dir / f"{stem}.md").write_text(markdown)
    print(markdown)
    return 0
