"""CLI: run every benchmark on one corpus in one run and write the report.

``python -m benchmarks.run [--quick] [--reps N] [--only FAMILY ...]`` prepares the
workload (corpus, indexes, token counts; untimed, cached in the work dir), then runs
``reps`` rounds; each round runs every variant once, each in a fresh process, in an
order rotated by one per round so no variant always runs first or last. Before each
measurement it waits for a quiet machine, and it repeats disturbed measurements, within
a time budget (:mod:`benchmarks.noise`). The restore benchmark runs last, in one
process (its repetitions interleave its three states).
Writes ``<results-dir>/latest.json`` and ``latest.md`` (``latest-quick.*`` with
``--quick``) and prints the markdown.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.child import REPO_ROOT, run_in_child
from benchmarks.machine import describe_machine
from benchmarks.noise import NoiseGuard
from benchmarks.plan import Family, Variant, families, variants_of
from benchmarks.publish import RESULTS
from benchmarks.report import build_report, to_markdown
from benchmarks.workload import SEQ_LEN, WORKLOAD_NAME, Workload, prepare_workload

FAMILY_NAMES = ("limit", "alternatives", "restore", "scaling", "determinism")
CHILD_TIMEOUT_S = 600


@dataclass(frozen=True)
class Mode:
    """Sizes of a run."""

    name: str
    max_bytes_per_domain: int
    """Corpus cap per domain (text bytes)."""
    reps: int
    early_step: int
    late_step: int
    """Restore states: after ``early_step`` and ``late_step`` steps."""
    noise_budget_s: float
    """Seconds the run may spend waiting for quiet and repeating disturbed measurements."""


FULL = Mode("full", 25_000_000, reps=3, early_step=10, late_step=10_000, noise_budget_s=360)
QUICK = Mode("quick", 1_000_000, reps=1, early_step=10, late_step=3_000, noise_budget_s=20)


def _set_offline_environment(work_dir: Path) -> None:
    """Keep HuggingFace caches in the work dir and forbid network access (children inherit)."""
    hf = work_dir / "hf"
    os.environ.update(
        HF_HOME=str(hf / "home"),
        HF_DATASETS_CACHE=str(hf / "datasets-cache"),
        HF_DATASETS_OFFLINE="1",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_DISABLE_PROGRESS_BARS="1",
        TOKENIZERS_PARALLELISM="false",
    )


def _build_report_meta(
    mode: Mode, reps: int, workload: Workload, load_before: tuple[float, ...]
) -> dict:
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "mode": mode.name,
        "reps": reps,
        "machine": describe_machine(("torch", "tiktoken", "torchtitan", "datasets")),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "corpus": {
            "records": workload.records,
            "text_bytes": workload.text_bytes,
            "tokens": workload.tokens,
        },
        "mixture": workload.mixture,
        "zephon_tokens": workload.total_tokens,
        "seq_len": SEQ_LEN,
        "restore_steps": [mode.early_step, mode.late_step],
    }


def _print_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _describe_output(output: dict[str, Any]) -> str:
    if not output.get("ok"):
        return f"error: {output.get('error', '?')[:200]}"
    result = output["result"]
    if "tokens_per_s" not in result:
        return "done"
    text = f"{result['tokens_per_s'] / 1e6:.2f} M tokens/s ({result['seconds']:.1f} s)"
    if result["other_load_percent"] is not None:
        text += f", other load {result['other_load_percent']:.0f}%"
    return text


def run_rounds(
    variants: list[Variant], reps: int, workload_path: Path, guard: NoiseGuard
) -> dict[str, list[dict[str, Any]]]:
    """``reps`` interleaved rounds of every variant; outputs per variant key, in round order."""
    outputs: dict[str, list[dict[str, Any]]] = {v.key: [] for v in variants}
    for rep in range(reps):
        shift = rep % max(1, len(variants))
        for variant in variants[shift:] + variants[:shift]:
            output = guard.measure(
                partial(run_in_child, variant.kind, variant.params, workload_path, CHILD_TIMEOUT_S)
            )
            outputs[variant.key].append({**output, "round": rep})
            retried = [f"{load:.0f}%" for load in output["discarded_loads"]]
            note = f" (repeated: other load {', '.join(retried)})" if retried else ""
            _print_progress(
                f"[round {rep + 1}/{reps}] {variant.label}: {_describe_output(output)}{note}"
            )
    return outputs


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; return 0 (failed variants are reported in the tables, not fatal)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="small corpus, 1 round, restore at step 3,000"
    )
    parser.add_argument("--reps", type=int, help="rounds (default: 3, or 1 with --quick)")
    parser.add_argument(
        "--noise-budget",
        type=float,
        help="seconds to spend waiting for a quiet machine and repeating disturbed "
        "measurements (default: 360, or 20 with --quick; 0: never)",
    )
    parser.add_argument(
        "--only", nargs="+", choices=FAMILY_NAMES, default=list(FAMILY_NAMES), metavar="FAMILY"
    )
    parser.add_argument("--work-dir", type=Path, default=REPO_ROOT / ".zephon" / "bench")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    mode = QUICK if args.quick else FULL
    reps = args.reps or mode.reps
    if reps < 1:
        parser.error("--reps must be >= 1")
    work_dir = (args.work_dir / mode.name).resolve()
    _set_offline_environment(work_dir)
    load_before = os.getloadavg()

    _print_progress(f"preparing the {mode.name} corpus in {work_dir} (untimed, cached)")
    workload = prepare_workload(work_dir, mode.max_bytes_per_domain)
    workload_path = work_dir / WORKLOAD_NAME
    selected: list[Family] = [f for f in families(workload.total_tokens) if f.name in args.only]
    variants = variants_of(selected)
    for kind in dict.fromkeys(v.prepare for v in variants if v.prepare):
        _print_progress(
            f"set-up {kind}: {_describe_output(run_in_child(kind, {}, workload_path, CHILD_TIMEOUT_S))}"
        )
    budget = mode.noise_budget_s if args.noise_budget is None else args.noise_budget
    guard = NoiseGuard(budget)
    outputs = run_rounds(variants, reps, workload_path, guard)
    restore = None
    if "restore" in args.only:
        params = {"early_step": mode.early_step, "late_step": mode.late_step, "reps": max(3, reps)}
        _print_progress(
            f"restore: iterating to step {mode.late_step:,}, then {params['reps']} x 3 restores"
        )
        restore = guard.measure(
            partial(run_in_child, "restore", params, workload_path, CHILD_TIMEOUT_S)
        )

    meta = _build_report_meta(mode, reps, workload, load_before)
    meta["noise_budget_s"] = budget
    meta["noise_spent_s"] = guard.spent_s
    report = build_report(meta, selected, outputs, restore)
    markdown = to_markdown(report)
    # A quick smoke run must not overwrite the latest full results.
    stem = "latest" if mode is FULL else f"latest-{mode.name}"
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.results_dir / f"{stem}.md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
