"""What processing costs: the pipeline's throughput with each built-in step against none,
and decontamination's cost, as ratios measured in one run.

``python -m benchmarks.processing`` (``bash scripts/bench.sh --process``) runs the pipeline
(gpt2, 2 tokenize threads) over the local corpus's ``docs`` domain (help topics and
docstrings: prose, what these filters were made for) with no chain, then with each built-in
step, alternating them round after round in one process, and reports each one's delivered
tokens per second over the plain pipeline's of the same round (the median of the rounds).
Deduplication also as rank 0 of dp 4, against the plain pipeline's rank 0 of dp 4: there its
index reads the other ranks' records too. A
record a step drops was read and processed all the same, so its cost is in the figure.
Decontamination: the plain pipeline with 5,000 scored documents (an evaluation set) against
none scored, and with 13-gram overlaps counted too (``data.overlap_ngram``).
``benchmarks/results/processing.{json,md}``, with the command, commit, CPU and date.

Design: docs/design/pipeline_processing.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.machine import REPO_ROOT, provenance
from benchmarks.publish import RESULTS, publish
from demo.local_corpus import build_local_corpus
from pipeline import Dataset, Pipeline, WorkSource

WORK_DIR = REPO_ROOT / ".zephon" / "processing"
WARMUP_STEPS = 3
"""Steps not timed: start-up, and what the workers tokenized ahead before the clock started."""
MIN_SECONDS, MIN_STEPS = 3.0, 5
"""Each measurement times steps until both are reached."""
LANES, SEQ_LEN, GLOBAL_BATCH = 8, 512, 32
SCORED_DOCUMENTS = 5_000


@dataclass(frozen=True)
class Setting:
    """One pipeline measured: its chain, and the evaluation set scored (decontamination)."""

    name: str
    process: list[Any] = field(default_factory=list)
    scored: bool = False
    overlap_ngram: int = 0
    dp: int = 1
    """The data-parallel size; the pipeline measured is rank 0's."""
    baseline: str = "none"
    """The setting this one's ratio is taken against."""


SETTINGS = [
    Setting("none"),
    Setting("length", [{"step": "length", "min_chars": 200}]),
    Setting("gopher_quality", ["gopher_quality"]),
    Setting("gopher_repetition", ["gopher_repetition"]),
    Setting("c4_quality", ["c4_quality"]),
    Setting("fineweb_quality", ["fineweb_quality"]),
    Setting("dedup", ["dedup"]),
    Setting("minhash_dedup", ["minhash_dedup"]),
    Setting("none, rank 0 of dp 4", dp=4),
    Setting("dedup, rank 0 of dp 4", ["dedup"], dp=4, baseline="none, rank 0 of dp 4"),
    Setting("decontaminate 5,000 docs", scored=True),
    Setting("decontaminate 5,000 docs, count 13-gram overlaps", scored=True, overlap_ngram=13),
]


def scored_set(work: Path) -> Dataset:
    """An evaluation set of :data:`SCORED_DOCUMENTS` documents (none in the corpus)."""
    path = work / "scored.jsonl"
    if not path.exists():
        lines = [
            f'{{"text": "scored document {i}: a fixed evaluation text."}}\n'
            for i in range(SCORED_DOCUMENTS)
        ]
        path.write_text("".join(lines))
    return Dataset("scored", [str(path)], cache_dir=work / "cache")


def measure(setting: Setting, corpus: dict[str, list[Path]], work: Path) -> float:
    """Delivered tokens per second after :data:`WARMUP_STEPS` steps (one step is one
    micro-batch here), over at least :data:`MIN_SECONDS` and :data:`MIN_STEPS` steps."""
    docs = Dataset("docs", [str(p) for p in corpus["docs"]], cache_dir=work / "cache")
    source = WorkSource(
        [docs],
        {"docs": 1.0},
        seed=0,
        chunk_tokens=4096,
        eval_sets=[scored_set(work)] if setting.scored else [],
        holdout_bytes=1 if setting.scored else 0,
    )
    pipeline = (
        Pipeline(source)
        .options(
            lanes=LANES,
            dp_size=setting.dp,
            runner="threads",
            overlap_ngram=setting.overlap_ngram,
        )
        .process(*setting.process)
        .tokenize("gpt2", "text", parallelism=2)
        .pack_flat(max_length=SEQ_LEN)
        .shuffle(buffer_size=16, seed=0)
        .batch(microbatch_size=GLOBAL_BATCH // setting.dp, global_batch_size=GLOBAL_BATCH)
    )
    batches = iter(pipeline)
    for _ in range(WARMUP_STEPS):
        next(batches)
    began, steps = time.perf_counter(), 0
    while steps < MIN_STEPS or time.perf_counter() - began < MIN_SECONDS:
        next(batches)
        steps += 1
    seconds = time.perf_counter() - began
    batches.close()
    return steps * GLOBAL_BATCH // setting.dp * SEQ_LEN / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (median)")
    args = parser.parse_args(argv)
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    corpus = build_local_corpus(WORK_DIR / "corpus", max_bytes_per_domain=3_000_000)
    rounds: list[dict[str, float]] = []
    for _ in range(args.rounds):
        rounds.append({s.name: measure(s, corpus, WORK_DIR) for s in SETTINGS})
    rows = []
    for setting in SETTINGS:
        ratios = [r[setting.name] / r[setting.baseline] for r in rounds]
        rows.append(
            {
                "setting": setting.name,
                "baseline": setting.baseline,
                "tokens_per_s": statistics.median(r[setting.name] for r in rounds),
                "ratio": statistics.median(ratios),
                "ratios": ratios,
            }
        )
    report = {
        **provenance(
            "bash scripts/bench.sh --process " + " ".join(sys.argv[1:]), ["datatrove", "tiktoken"]
        ),
        "workload": f"the local corpus's docs domain, gpt2, L={LANES}, "
        f"T={SEQ_LEN}, G={GLOBAL_BATCH}, 2 tokenize threads, each measurement timing at least "
        f"{MIN_SECONDS:g} s and {MIN_STEPS} steps after {WARMUP_STEPS}, {args.rounds} "
        "alternating rounds",
        "rows": rows,
    }
    lines = [
        "# Processing on the fly: throughput against none",
        "",
        f"`{report['command'].strip()}` at commit {report['commit']}, {report['cpu']}, {report['date']}.",
        f"{report['workload']}.",
        "",
        "| setting | tokens/s (median) | against | ratio (median of rounds) |",
        "|---|---:|---|---:|",
        *(
            f"| {r['setting']} | {r['tokens_per_s']:,.0f} | {r['baseline']} | {r['ratio']:.2f}x |"
            for r in rows
        ),
        "",
        "Deduplication reads, on every rank, all lanes' records of the dataset (to keep the first "
        "copy in stream order whatever the dp size): at dp 4 a rank reads four times what it "
        "trains on.",
        "",
    ]
    publish(RESULTS, "processing", report, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
