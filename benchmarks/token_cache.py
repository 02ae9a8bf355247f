"""What the token cache saves: CPU per token with no cache, a cold and a warm one, against raw
tiktoken, and a 12-job sweep's pipeline CPU with and without it.

``python -m benchmarks.token_cache`` (``bash scripts/bench.sh --token-cache``):

* **Per token.** The pipeline (gpt2, 1 tokenize thread) delivers the same steps over prose that
  never repeats within the run (:mod:`benchmarks.text_corpus`, more text than a run reads)
  with no cache, a cold one (filled as it goes) and the warm one the cold run left; raw
  tiktoken (``encode_ordinary_batch``, 1 thread) encodes the same records. Rounds alternate
  the four in one process; each reports CPU seconds of the whole process (every thread) per
  delivered token from the first step's end on (start-up, the same for all, left out) and over
  the whole run, and the ratios to no cache and to cold are the medians over rounds.
* **A sweep.** 12 jobs (6 mixtures of prose and code x 2 seeds, each reading every record at
  least once) run one after another, each a new pipeline, with no cache and with one cache
  shared by the 12; then the same sweep at 2 new seeds with the cache: the records it
  tokenized are counted (nothing it read had not been read before).

``benchmarks/results/token_cache.{json,md}``, with the command, commit, CPU and date.
Design: docs/design/pipeline_token_cache.md
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import REPO_ROOT, provenance
from benchmarks.publish import RESULTS, publish
from benchmarks.text_corpus import build_text_corpus
from pipeline import Dataset, Pipeline, WorkSource, load_tokenizer

WORK_DIR = REPO_ROOT / ".zephon" / "token_cache"
LANES, SEQ_LEN, GLOBAL_BATCH = 8, 512, 64
STEPS = 40
"""Steps each pipeline delivers (1.3M tokens)."""
SWEEP_BYTES = 400_000
"""Bytes of each kind of text in the sweep's corpus: every job reads all of it."""
MIXTURES = [0.2, 0.35, 0.5, 0.65, 0.8, 0.9]
"""Prose's share in each of the sweep's mixtures (code has the rest)."""


def source(shards: dict[str, list[Path]], shares: dict[str, float], seed: int) -> WorkSource:
    """A plan over ``shards`` (one dataset per kind)."""
    datasets = [
        Dataset(kind, [str(p) for p in paths], cache_dir=WORK_DIR / "index")
        for kind, paths in sorted(shards.items())
    ]
    return WorkSource(datasets, shares, seed=seed, chunk_tokens=4096)


def run(plan: WorkSource, cache: Path | None) -> dict[str, Any]:
    """CPU seconds (the whole process, every thread) to deliver :data:`STEPS` steps, and from
    the first step's end on (``steady_cpu_s``: start-up, the same with or without a cache,
    left out), the tokens delivered and the records tokenized."""
    pipeline = (
        Pipeline(plan)
        .options(lanes=LANES, token_cache_dir=None if cache is None else str(cache))
        .tokenize("gpt2", "text", parallelism=1)
        .pack_flat(max_length=SEQ_LEN)
        .shuffle(buffer_size=16, seed=0)
        .batch(microbatch_size=GLOBAL_BATCH, global_batch_size=GLOBAL_BATCH)
    )
    began = time.process_time()
    batches = iter(pipeline)
    next(batches)
    first = time.process_time()
    for _ in range(STEPS - 1):
        next(batches)
    stats = pipeline.stats()
    batches.close()  # closes the pipeline: the cache's last writes are counted too
    end = time.process_time()
    return {
        "cpu_s": end - began,
        "steady_cpu_s": end - first,
        "tokens": STEPS * GLOBAL_BATCH * SEQ_LEN,
        "steady_tokens": (STEPS - 1) * GLOBAL_BATCH * SEQ_LEN,
        "encoded": stats["tokenize"]["encoded"],
    }


def raw_tiktoken(plan: WorkSource, tokens: int) -> float:
    """CPU seconds tiktoken spends encoding records of ``plan`` until ``tokens`` tokens."""
    encoding = load_tokenizer("gpt2").encoding
    dataset = plan.datasets[0]
    began, done, start = time.process_time(), 0, 0
    while done < tokens:
        texts = dataset.read_texts(range(start, min(start + 256, dataset.num_records)))
        start = (start + 256) % dataset.num_records
        done += sum(len(ids) + 1 for ids in encoding.encode_ordinary_batch(texts, num_threads=1))
    return (time.process_time() - began) * tokens / done


def per_token(rounds: int) -> dict[str, Any]:
    """The four settings, alternated for ``rounds`` rounds after one untimed run (indexes
    built, files in the page cache)."""
    prose = build_text_corpus(WORK_DIR / "text", "prose")
    run(source({"prose": prose}, {"prose": 1.0}, seed=0), None)
    measured: list[dict[str, float]] = []
    for r in range(rounds):
        cache = WORK_DIR / f"per-token-{r}"
        shutil.rmtree(cache, ignore_errors=True)
        row = {}
        for name, folder in (("no cache", None), ("cold", cache), ("warm", cache)):
            got = run(source({"prose": prose}, {"prose": 1.0}, seed=r), folder)
            row[name] = got["steady_cpu_s"] / got["steady_tokens"] * 1e9
            row[f"{name}, whole run"] = got["cpu_s"] / got["tokens"] * 1e9
        tokens = STEPS * GLOBAL_BATCH * SEQ_LEN
        plan = source({"prose": prose}, {"prose": 1.0}, seed=r)
        row["raw tiktoken"] = row["raw tiktoken, whole run"] = (
            raw_tiktoken(plan, tokens) / tokens * 1e9
        )
        shutil.rmtree(cache, ignore_errors=True)
        measured.append(row)
    names = [n for n in measured[0] if n != "raw tiktoken, whole run"]
    return {
        name: {
            "cpu_ns_per_token": statistics.median(m[name] for m in measured),
            "tokens_per_cpu_s": 1e9 / statistics.median(m[name] for m in measured),
            "ratio_to_no_cache": statistics.median(
                m[name] / m[_same_span("no cache", name)] for m in measured
            ),
            "ratio_to_cold": statistics.median(
                m[name] / m[_same_span("cold", name)] for m in measured
            ),
            "rounds_ns": [m[name] for m in measured],
        }
        for name in names
    }


def _same_span(setting: str, name: str) -> str:
    """``setting``'s row measured over the same span as row ``name`` (``, whole run`` or not)."""
    return setting + name[name.find(",") :] if "," in name else setting


def sweep() -> dict[str, Any]:
    """The 12-job sweep with and without the cache, then again at new seeds, warm."""
    shards = {
        kind: build_text_corpus(WORK_DIR / "sweep", kind, SWEEP_BYTES) for kind in ("prose", "code")
    }
    cache = WORK_DIR / "sweep-cache"
    shutil.rmtree(cache, ignore_errors=True)

    def jobs(seeds: tuple[int, ...], folder: Path | None) -> dict[str, float]:
        runs = [
            run(source(shards, {"prose": p, "code": round(1 - p, 6)}, seed), folder)
            for p in MIXTURES
            for seed in seeds
        ]
        return {
            "jobs": len(runs),
            "cpu_s": sum(r["cpu_s"] for r in runs),
            "encoded": sum(r["encoded"] for r in runs),
        }

    without = jobs((0, 1), None)
    with_cache = jobs((0, 1), cache)
    again = jobs((2, 3), cache)
    shutil.rmtree(cache, ignore_errors=True)
    return {
        "without": without,
        "with": with_cache,
        "ratio": with_cache["cpu_s"] / without["cpu_s"],
        "new_seeds": again,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (median)")
    args = parser.parse_args(argv)
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    token = per_token(args.rounds)
    swept = sweep()
    report = {
        **provenance("bash scripts/bench.sh --token-cache " + " ".join(sys.argv[1:]), ["tiktoken"]),
        "workload": f"gpt2, 1 tokenize thread, L={LANES}, T={SEQ_LEN}, G={GLOBAL_BATCH}, "
        f"{STEPS} steps per pipeline; {args.rounds} alternating rounds",
        "per_token": token,
        "sweep": swept,
    }
    lines = [
        "# Token cache",
        "",
        f"Command: `{report['command']}` at commit {report['commit']} on {report['cpu']}, "
        f"{report['date']}. {report['workload']}.",
        "",
        "Per token: from the first step's end on (start-up left out), and over the whole run.",
        "",
        "| pipeline | CPU ns per token | tokens per CPU second | ratio to no cache | "
        "ratio to cold |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {name} | {row['cpu_ns_per_token']:.0f} | {row['tokens_per_cpu_s']:,.0f} | "
            f"{row['ratio_to_no_cache']:.3f} | {row['ratio_to_cold']:.3f} |"
            for name, row in token.items()
        ),
        "",
        "| 12-job sweep | pipeline CPU s | records tokenized |",
        "|---|---:|---:|",
        f"| no cache | {swept['without']['cpu_s']:.1f} | {swept['without']['encoded']:,} |",
        f"| one cache for the 12 | {swept['with']['cpu_s']:.1f} | {swept['with']['encoded']:,} |",
        f"| again at 2 new seeds, warm | {swept['new_seeds']['cpu_s']:.1f} | "
        f"{swept['new_seeds']['encoded']:,} |",
        "",
        f"The sweep's CPU with the cache over without: {swept['ratio']:.3f}.",
    ]
    publish(RESULTS, "token_cache", report, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
