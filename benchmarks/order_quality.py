"""The record order's quality, v2 beside v1: shards mixed per lane window, token shares per step.

``bash scripts/bench.sh --order-quality`` (or ``python -m benchmarks.order_quality``) builds
three synthetic datasets of many small JSONL shards and measures, for both orders: distinct
shards in every window of 1,000 consecutive training records of a lane (goal: at least 64,
or every shard where there are fewer) and each dataset's share of a step's label tokens
against the mixture, step by step. Results: ``benchmarks/results/order_quality.{json,md}``.

Design: docs/design/pipeline_order.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.machine import describe_machine
from benchmarks.publish import RESULTS, publish
from orchestrator.machine.precision import cpu_model
from pipeline import Dataset, OrderVersion, Pipeline, WorkSource, load_tokenizer
from pipeline.dataset import split_record_keys

WINDOW_RECORDS = 1000
DISTINCT_GOAL = 64
LANES = 8
MIXTURE = {"web": 0.6, "code": 0.3, "books": 0.1}
CORPUS = {"web": (1200, 200, 40), "code": (100, 400, 90), "books": (12, 500, 600)}
"""Dataset -> (shards, records per shard, mean text bytes)."""
_WORDS = np.array(
    [
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "was",
        "for",
        "on",
        "that",
        "with",
        "as",
        "by",
        "at",
        "from",
        "his",
        "her",
        "which",
        "or",
        "data",
        "model",
        "train",
        "token",
        "shard",
        "lane",
        "mix",
    ]
)


def write_corpus(root: Path, seed: int = 0) -> dict[str, list[Path]]:
    """The synthetic datasets of :data:`CORPUS`, one JSONL file per shard (seeded)."""
    rng = np.random.default_rng(seed)
    paths: dict[str, list[Path]] = {}
    for name, (shards, records, mean_bytes) in CORPUS.items():
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        paths[name] = []
        for s in range(shards):
            words = rng.integers(1, 2 * mean_bytes // 5, size=records)
            lines = [
                json.dumps({"text": " ".join(_WORDS[rng.integers(0, len(_WORDS), n)])})
                for n in words.tolist()
            ]
            path = folder / f"part-{s:05d}.jsonl"
            path.write_text("\n".join(lines) + "\n")
            paths[name].append(path)
    return paths


def shard_mixing(source: WorkSource, dataset: int, records: int) -> dict[str, Any]:
    """Distinct shards in every window of ``WINDOW_RECORDS`` consecutive records of lane 0."""
    order = source.orders[dataset]
    keys = [order.key_at(k * LANES) for k in range(records)]
    shards = split_record_keys(keys)[0]
    distinct = [
        len(set(shards[i : i + WINDOW_RECORDS].tolist()))
        for i in range(0, records - WINDOW_RECORDS + 1, WINDOW_RECORDS // 4)
    ]
    goal = min(DISTINCT_GOAL, order.dataset.num_shards)
    return {
        "shards": order.dataset.num_shards,
        "min": min(distinct),
        "median": statistics.median(distinct),
        "goal": goal,
        "met": min(distinct) >= goal,
    }


def step_shares(source: WorkSource, steps: int) -> dict[str, Any]:
    """Each dataset's share of every step's label tokens (dp 1, 8 lanes, G 64, T 256)."""
    pipeline = (
        Pipeline(source)
        .options(lanes=LANES, dp_rank=0, dp_size=1, prefetch_steps=0)  # counts per step
        .tokenize(tokenizer_id="gpt2", field="text")
        .pack_flat(max_length=256)
        .shuffle(buffer_size=8, seed=0)
        .batch(microbatch_size=64, global_batch_size=64)
    )
    before = dict.fromkeys(MIXTURE, 0)
    errors: dict[str, list[float]] = {name: [] for name in MIXTURE}
    batches = iter(pipeline)
    try:
        for _ in range(steps):
            next(batches)
            now = pipeline.stats()["label_tokens"]
            step = {n: now[n] - before[n] for n in MIXTURE}
            total = sum(step.values())
            for name, share in MIXTURE.items():
                errors[name].append(step[name] / total - share)
            before = now
    finally:
        batches.close()
    return {
        name: {
            "mean_share_error": statistics.fmean(errs),
            "max_abs_share_error": max(abs(e) for e in errs),
        }
        for name, errs in errors.items()
    }


def measure(order: OrderVersion, paths: dict[str, list[Path]], cache: Path, steps: int) -> dict:
    """Both measures for one order."""
    datasets = [Dataset(n, [str(p) for p in ps], cache_dir=cache) for n, ps in paths.items()]
    source = WorkSource(datasets, MIXTURE, seed=0, order=order, holdout_bytes=16384)
    source.calibrate(load_tokenizer("gpt2"))
    mixing = {
        ds.name: shard_mixing(source, d, 20_000 if ds.name == "web" else 5_000)
        for d, ds in enumerate(datasets)
    }
    return {"mixing": mixing, "shares": step_shares(source, steps)}


def render(report: dict[str, Any]) -> str:
    """The Markdown tables of ``report``."""
    lines = [
        "# Record order quality: v2 beside v1",
        "",
        f"{report['date']}, {report['machine']}; lane 0 of {LANES}, windows of "
        f"{WINDOW_RECORDS} consecutive training records; {report['steps']} steps of 64 x 256 "
        "tokens for the shares.",
        "",
        "| dataset | shards | v1 distinct shards min / median | v2 min / median | goal | v2 met |",
        "|---|---|---|---|---|---|",
    ]
    for name in MIXTURE:
        v1, v2 = report["v1"]["mixing"][name], report["v2"]["mixing"][name]
        lines.append(
            f"| {name} | {v2['shards']} | {v1['min']} / {v1['median']} | {v2['min']} / "
            f"{v2['median']} | >= {v2['goal']} | {'met' if v2['met'] else 'missed'} |"
        )
    lines += [
        "",
        "| dataset | share | v1 mean / max abs share error per step | v2 mean / max abs |",
        "|---|---|---|---|",
    ]
    for name, share in MIXTURE.items():
        v1, v2 = report["v1"]["shares"][name], report["v2"]["shares"][name]
        lines.append(
            f"| {name} | {share:.2f} | {v1['mean_share_error']:+.4f} / "
            f"{v1['max_abs_share_error']:.4f} | {v2['mean_share_error']:+.4f} / "
            f"{v2['max_abs_share_error']:.4f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Run both orders on one corpus and publish the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="steps measured for the shares")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="zephon-order-quality-") as tmp:
        paths = write_corpus(Path(tmp) / "corpus")
        report: dict[str, Any] = {
            "date": datetime.date.today().isoformat(),
            "machine": f"{cpu_model()}, " + describe_machine(["numpy"]),
            "steps": args.steps,
        }
        for order in OrderVersion:
            report[str(order)] = measure(order, paths, Path(tmp) / f"cache-{order}", args.steps)
    publish(RESULTS, "order_quality", report, render(report))


if __name__ == "__main__":
    main()
