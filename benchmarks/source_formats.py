"""Source formats against Parquet: the same records as Parquet, an Arrow folder (``datasets``'
``save_to_disk``), MDS (uncompressed and zstd), and tokenized with gpt2 as a Megatron indexed
dataset (``IndexedDatasetBuilder``) and an OLMo-core token file, each read by the lane
pipeline (the token files' ids are read, not tokenized).

``bash scripts/bench.sh --source-formats`` (or ``python -m benchmarks.source_formats``)
writes ``--records`` synthetic prose records of about 1 KB each in every format (4 shards
each), then, in alternating rounds, for each format: a cold first batch (a new cache dir, so
every shard reached is hashed and indexed, and the plan calibrated) and the pipeline's
throughput in label tokens per second after it. Reported: seconds and tokens/s, and each as a
ratio against Parquet in the same round (median over rounds).
Results: ``benchmarks/results/source_formats.{json,md}``.

Design: docs/design/pipeline_datasets.md ("Arrow and MDS shards")
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.machine import provenance
from benchmarks.publish import RESULTS, publish
from pipeline import Dataset, Pipeline, WorkSource, load_tokenizer
from pipeline.dataset import TokenDeclaration
from tests.support.mds_shards import write_mds_folder
from tests.support.token_files import gpt2_documents, write_megatron, write_token_array

FORMATS = ("parquet", "arrow folder", "mds", "mds zstd", "megatron", "olmo-core npy")
FOLDERS = ("parquet", "arrow", "mds", "mds-zstd", "megatron", "npy")
"""Each format's folder under the work directory, in :data:`FORMATS`' order."""
TOKEN_FORMATS = {"megatron", "olmo-core npy"}
"""The formats whose datasets declare their tokenizer (gpt2)."""
SHARDS = 4
LANES, SEQ_LEN, GLOBAL_BATCH = 8, 512, 16
MIN_SECONDS = 3.0
"""Each throughput measurement times at least this long after the first batch."""
WORDS = [
    "the",
    "of",
    "and",
    "data",
    "model",
    "training",
    "token",
    "shard",
    "record",
    "pipeline",
    "lane",
    "batch",
    "text",
    "corpus",
    "format",
    "arrow",
    "parquet",
    "stream",
    "index",
    "cache",
    "read",
    "write",
    "naïve",
    "café",
    "über",
    "日本",
    "✓",
]


def synthetic_texts(count: int, seed: int = 0) -> list[str]:
    """``count`` records of about 1 KB of words (a few non-ASCII), the same for a seed."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, int(rng.integers(120, 200))).tolist()) for _ in range(count)]


def write_formats(root: Path, texts: list[str]) -> dict[str, Path | list[Path]]:
    """``texts`` in every format under ``root``: what to give ``Dataset`` for each."""
    per_shard = -(-len(texts) // SHARDS)
    parquet = []
    for s in range(SHARDS):
        parquet.append(root / "parquet" / f"part-{s}.parquet")
        parquet[-1].parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"text": texts[s * per_shard : (s + 1) * per_shard]}), parquet[-1])
    datasets.disable_progress_bars()
    datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(root / "arrow"), num_shards=SHARDS)
    return {
        "parquet": parquet,
        "arrow folder": root / "arrow",
        "mds": write_mds_folder(root / "mds", texts, compression=None, samples_per_shard=per_shard),
        "mds zstd": write_mds_folder(
            root / "mds-zstd", texts, compression="zstd", samples_per_shard=per_shard
        ),
        **write_token_files(root, texts, per_shard),
    }


def write_token_files(root: Path, texts: list[str], per_shard: int) -> dict[str, list[Path]]:
    """``texts`` tokenized with gpt2, as Megatron and OLMo-core shards."""
    documents = gpt2_documents(texts)
    eos = load_tokenizer("gpt2").eos_id
    for folder in ("megatron", "npy"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    parts = [documents[s * per_shard : (s + 1) * per_shard] for s in range(SHARDS)]
    return {
        "megatron": [
            write_megatron(root / "megatron" / f"part-{s}", p) for s, p in enumerate(parts)
        ],
        "olmo-core npy": [
            write_token_array(root / "npy" / f"part-{s}.npy", p, eos_id=eos)
            for s, p in enumerate(parts)
        ],
    }


def measure(paths: Path | list[Path], cache: Path, *, tokens: bool) -> tuple[float, float]:
    """Seconds to the first batch from a cold cache, then label tokens per second (``tokens``:
    the files hold gpt2 ids)."""
    began = time.perf_counter()
    declared = TokenDeclaration("gpt2") if tokens else None
    ds = Dataset("d", paths, cache_dir=cache, tokens=declared)
    source = WorkSource([ds], {"d": 1.0}, seed=0, chunk_tokens=4096)
    pipeline = (
        Pipeline(source)
        .options(lanes=LANES, runner="threads")
        .tokenize("gpt2", "text", parallelism=2)
        .pack_flat(max_length=SEQ_LEN)
        .shuffle(buffer_size=16, seed=0)
        .batch(microbatch_size=GLOBAL_BATCH, global_batch_size=GLOBAL_BATCH)
    )
    batches = iter(pipeline)
    next(batches)
    first = time.perf_counter() - began
    began, steps = time.perf_counter(), 0
    while time.perf_counter() - began < MIN_SECONDS:
        next(batches)
        steps += 1
    seconds = time.perf_counter() - began
    batches.close()
    return first, steps * GLOBAL_BATCH * (SEQ_LEN - 1) / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (median)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="source_formats.") as work:
        root = Path(work)
        texts = synthetic_texts(args.records)
        paths = write_formats(root, texts)
        rounds: list[dict[str, tuple[float, float]]] = []
        for r in range(args.rounds):
            rounds.append(
                {
                    f: measure(paths[f], root / f"cache-{r}-{f}", tokens=f in TOKEN_FORMATS)
                    for f in FORMATS
                }
            )
        sizes = {
            f: sum(p.stat().st_size for p in (root / d).rglob("*") if p.is_file())
            for f, d in zip(FORMATS, FOLDERS, strict=True)
        }
    rows = []
    for f in FORMATS:
        rows.append(
            {
                "format": f,
                "bytes": sizes[f],
                "first_batch_s": statistics.median(r[f][0] for r in rounds),
                "tokens_per_s": statistics.median(r[f][1] for r in rounds),
                "first_batch_ratio": statistics.median(r[f][0] / r["parquet"][0] for r in rounds),
                "throughput_ratio": statistics.median(r[f][1] / r["parquet"][1] for r in rounds),
            }
        )
    report = {
        **provenance(
            "bash scripts/bench.sh --source-formats " + " ".join(sys.argv[1:]), ["pyarrow"]
        ),
        "workload": f"{args.records:,} synthetic records of about 1 KB in {SHARDS} shards per "
        f"format, gpt2, L={LANES}, T={SEQ_LEN}, G={GLOBAL_BATCH}, 2 tokenize threads; first "
        f"batch from a cold cache dir, then throughput over at least {MIN_SECONDS:g} s; "
        f"{args.rounds} alternating rounds",
        "rows": rows,
    }
    lines = [
        "# Source formats against Parquet: first batch and throughput",
        "",
        f"`{report['command'].strip()}` at commit {report['commit']}, {report['cpu']}, "
        f"{report['date']}.",
        f"{report['workload']}.",
        "",
        "| format | MB on disk | cold first batch s | against Parquet | tokens/s | against Parquet |",
        "|---|---:|---:|---:|---:|---:|",
        *(
            f"| {r['format']} | {r['bytes'] / 1e6:.1f} | {r['first_batch_s']:.2f} | "
            f"{r['first_batch_ratio']:.2f}x | {r['tokens_per_s']:,.0f} | "
            f"{r['throughput_ratio']:.2f}x |"
            for r in rows
        ),
        "",
        "Ratios are medians of each round's ratio. For the text formats tokenizing dominates "
        "throughput, so they differ mostly in the cold first batch: hashing and indexing the "
        "shards reached (and decompressing a zstd MDS shard to a copy). The token files "
        "(Megatron, OLMo-core) are not tokenized: their ids are read.",
        "",
    ]
    publish(RESULTS, "source_formats", report, "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
