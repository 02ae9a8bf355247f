"""Zephon's lane pipeline against the raw tokenizer library on one kind of text.

``python -m benchmarks.tokenizer_ratio [--tokenizer SPEC]`` runs both on the same text
(prose or code of :mod:`benchmarks.text_corpus`, more than a run consumes), alternating them in one process, and reports
the pipeline's tokens/s over the raw library's (tiktoken's ``encode_ordinary_batch``, or
``tokenizers``' ``encode_batch_fast`` on the same number of threads), over the whole run
(``ratio``) and after the first micro-batch (``ratio_steady``):
``benchmarks/results/tokenizer_ratio[_<kind>].{json,md}``.

Design: docs/design/benchmarks_throughput.md
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import tokenizers

from benchmarks.lanes import PipelineSpec, build_pipeline, consume
from benchmarks.machine import REPO_ROOT, describe_machine
from benchmarks.publish import RESULTS, publish
from benchmarks.text_corpus import DEFAULT_MAX_BYTES, build_text_corpus
from benchmarks.timing import Stopwatch, Throughput, time_batches
from benchmarks.workload import COUNT_BATCH, SEED, TOKENIZER_ID
from pipeline import Dataset, WorkSource, load_tokenizer
from pipeline.tokenizer import HuggingFaceTokenizer, TiktokenTokenizer, TokenizerSpec

DEFAULT_WORK_DIR = REPO_ROOT / ".zephon" / "tokenizer_ratio"
TEXT_KINDS = ("prose", "code")
"""The kinds of text measured (:mod:`benchmarks.text_corpus`)."""
SPEC = PipelineSpec(lanes=8, max_length=512, global_batch_size=64, microbatch_size=64)
"""The pipeline measured (parallelism and runner vary)."""
REPS = 3
CONSUMER_THREADS = ("MainThread", "zephon-steps")
WORKER_THREAD_PREFIX = "zephon-tokenize"


def open_text(
    text_kind: str, work_dir: Path, max_bytes_per_domain: int | None, tokenizer: str
) -> WorkSource:
    """The plan over one kind of text (:mod:`benchmarks.text_corpus`, built once under
    ``work_dir``), calibrated."""
    shards = build_text_corpus(
        work_dir / "text_corpus", text_kind, max_bytes_per_domain or DEFAULT_MAX_BYTES
    )
    dataset = Dataset(text_kind, [str(p) for p in shards], cache_dir=work_dir / "cache")
    source = WorkSource([dataset], {text_kind: 1.0}, seed=SEED)
    source.calibrate(load_tokenizer(tokenizer))
    return source


def raw_batch_encoder(
    tokenizer: str, parallelism: int, pool: ThreadPoolExecutor
) -> Callable[[list[str]], int]:
    """Tokens of a batch of texts, encoded by the raw library on ``parallelism`` threads
    (``pool``'s, for a Hugging Face tokenizer; tiktoken brings its own)."""
    loaded = load_tokenizer(tokenizer)
    if isinstance(loaded, TiktokenTokenizer):
        encoding = loaded.encoding

        def tiktoken_tokens(batch: list[str]) -> int:
            encoded = encoding.encode_ordinary_batch(batch, num_threads=parallelism)
            return sum(len(ids) for ids in encoded)

        return tiktoken_tokens
    assert isinstance(loaded, HuggingFaceTokenizer), f"no raw library for {loaded!r}"
    # Loading it set TOKENIZERS_PARALLELISM=false, as in the pipeline: both use p threads.
    raw = tokenizers.Tokenizer.from_file(str(TokenizerSpec.parse(tokenizer).path))
    encode = functools.partial(raw.encode_batch_fast, add_special_tokens=False)

    def huggingface_tokens(batch: list[str]) -> int:
        size = -(-len(batch) // parallelism)
        parts = [batch[i : i + size] for i in range(0, len(batch), size)]
        return sum(len(e.ids) for encoded in pool.map(encode, parts) for e in encoded)

    return huggingface_tokens


def measure_raw(texts: list[str], parallelism: int, tokens: int, tokenizer: str) -> Throughput:
    """Encode ``texts`` with the raw library, pass after pass, until ``tokens``."""
    done = 0
    with ThreadPoolExecutor(parallelism) as pool:
        encode = raw_batch_encoder(tokenizer, parallelism, pool)  # loading is not timed
        with Stopwatch() as watch:
            while done < tokens:
                for start in range(0, len(texts), COUNT_BATCH):
                    done += encode(texts[start : start + COUNT_BATCH])
                    if done >= tokens:
                        break
    return watch.result(done)


def thread_cpu_seconds() -> dict[str, float]:
    """CPU seconds of each live thread of this process, by name (``/proc``; empty elsewhere)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for thread in threading.enumerate():
        try:
            with open(f"/proc/self/task/{thread.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[thread.name] = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
    return out


def measure_pipeline(
    source: WorkSource, parallelism: int, runner: str, steps: int, tokenizer: str
) -> Throughput:
    """Run the pipeline for ``steps`` steps; the CPU split is taken before the workers stop."""
    spec = PipelineSpec(
        **{**asdict(SPEC), "parallelism": parallelism, "runner": runner, "tokenizer": tokenizer}
    )
    pipeline = build_pipeline(source, spec)
    split: dict[str, float] = {}
    main_cpu0 = time.thread_time()
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)

    def enough(batch: Any, tokens: int) -> bool:
        done = bool(batch.is_last and batch.step + 1 >= steps)
        if done:
            threads = thread_cpu_seconds()
            threads["MainThread"] = time.thread_time() - main_cpu0
            split["consumer_cpu_s"] = sum(threads.get(name, 0.0) for name in CONSUMER_THREADS)
            split["worker_cpu_s"] = sum(
                cpu for name, cpu in threads.items() if name.startswith(WORKER_THREAD_PREFIX)
            )
        return done

    result = time_batches(pipeline, consume, enough)
    if runner == "processes":  # reaped at shutdown: only then is their CPU time known
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        split["worker_cpu_s"] = (
            children.ru_utime + children.ru_stime - children0.ru_utime - children0.ru_stime
        )
    result.extra.update(split)
    return result


def measure_pipeline_ratio(
    text_kind: str,
    parallelism: int,
    runner: str = "threads",
    steps: int = 400,
    *,
    reps: int = REPS,
    work_dir: Path = DEFAULT_WORK_DIR,
    max_bytes_per_domain: int | None = None,
    tokenizer: str = TOKENIZER_ID,
) -> dict[str, Any]:
    """The raw library and the pipeline on the same ``text_kind`` text, ``reps`` times
    alternately.

    Returns medians (tokens/s of both, ratios, CPU nanoseconds per token of the raw
    library, the whole pipeline, its consumer and its workers) and every run.
    ``max_bytes_per_domain`` caps the corpus (tests use a tiny one).
    """
    source = open_text(text_kind, work_dir, max_bytes_per_domain, tokenizer)
    dataset = source.datasets[0]
    texts = dataset.read_records(source.training_records(0))
    tokens = steps * SPEC.global_batch_size * SPEC.max_length
    raw_runs: list[Throughput] = []
    pipeline_runs: list[Throughput] = []
    for rep in range(reps):
        # Alternate which goes first, so that neither always runs on a warmer machine.
        for which in ("raw", "pipeline") if rep % 2 == 0 else ("pipeline", "raw"):
            if which == "raw":
                raw_runs.append(measure_raw(texts, parallelism, tokens, tokenizer))
            else:
                pipeline_runs.append(
                    measure_pipeline(source, parallelism, runner, steps, tokenizer)
                )

    def median(values: list[float]) -> float:
        return statistics.median(values)

    def ns_per_token(run: Throughput, cpu_s: float) -> float:
        return 1e9 * cpu_s / run.tokens

    pairs = list(zip(raw_runs, pipeline_runs, strict=True))
    return {
        "text_kind": text_kind,
        "tokenizer": load_tokenizer(tokenizer).name,
        "domain": dataset.name,
        "parallelism": parallelism,
        "runner": runner,
        "steps": steps,
        "reps": reps,
        "text": {"records": len(texts), "bytes": int(dataset.record_bytes.sum())},
        "raw_tokens_per_s": median([r.tokens_per_s for r in raw_runs]),
        "pipeline_tokens_per_s": median([p.tokens_per_s for p in pipeline_runs]),
        "pipeline_steady_tokens_per_s": median(
            [p.steady_tokens_per_s or 0.0 for p in pipeline_runs]
        ),
        "ratio": median([p.tokens_per_s / r.tokens_per_s for r, p in pairs]),
        "ratio_steady": median([(p.steady_tokens_per_s or 0.0) / r.tokens_per_s for r, p in pairs]),
        "first_batch_s": median([p.first_batch_s or 0.0 for p in pipeline_runs]),
        "cpu_ns_per_token": {
            "raw": median([ns_per_token(r, r.cpu_s) for r in raw_runs]),
            "pipeline": median([ns_per_token(p, p.cpu_s) for p in pipeline_runs]),
            "consumer": median([ns_per_token(p, p.extra["consumer_cpu_s"]) for p in pipeline_runs]),
            "workers": median([ns_per_token(p, p.extra["worker_cpu_s"]) for p in pipeline_runs]),
        },
        "other_load_percent": max(
            (run.other_load_percent or 0.0 for run in raw_runs + pipeline_runs), default=0.0
        ),
        "raw_runs": [asdict(r) for r in raw_runs],
        "pipeline_runs": [asdict(p) for p in pipeline_runs],
    }


RAW_CALLS = {
    "gpt2": "`encode_ordinary_batch(num_threads=p)`",
    "tiktoken": "`encode_ordinary_batch(num_threads=p)`",
    "huggingface": "`encode_batch_fast` of `tokenizers` on p threads (its own thread pool off, "
    "`TOKENIZERS_PARALLELISM=false`, as the pipeline sets it)",
}


def render_markdown(
    results: list[dict[str, Any]], machine: str, date: str, seconds: float, kind: str
) -> str:
    """The results as a markdown page."""
    library = "raw tiktoken" if kind in ("gpt2", "tiktoken") else f"raw {kind} `tokenizers`"
    lines = [
        f"# Zephon pipeline ÷ {library}, prose and code",
        "",
        f"{date} · {machine} · {seconds:.0f} s · `python -m benchmarks.tokenizer_ratio`",
        "",
        "Pipeline: 8 lanes, sequence length 512, micro-batch 64 (one step), shuffle buffer 64. "
        f"Raw: {RAW_CALLS[kind]} on the same text. Medians of the "
        "repetitions; `ratio` counts the whole run (start-up and shutdown included), "
        "`steady` the run after the first micro-batch. CPU: nanoseconds per token, the "
        "pipeline's split into its consumer (packing, shuffle, batching, digests) and "
        "its tokenize workers. See benchmarks/tokenizer_ratio.py.",
        "",
        "| text | p | runner | raw M tok/s | pipeline M tok/s | ratio | steady M tok/s "
        "| ratio steady | 1st batch s | CPU ns/token raw | pipeline | consumer | workers "
        "| other load % |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        cpu = r["cpu_ns_per_token"]
        lines.append(
            f"| {r['text_kind']} ({r['text']['bytes'] / 1e6:.1f} MB) | {r['parallelism']} "
            f"| {r['runner']} | {r['raw_tokens_per_s'] / 1e6:.2f} "
            f"| {r['pipeline_tokens_per_s'] / 1e6:.2f} | {r['ratio']:.2f} "
            f"| {r['pipeline_steady_tokens_per_s'] / 1e6:.2f} | {r['ratio_steady']:.2f} "
            f"| {r['first_batch_s']:.2f} | {cpu['raw']:.0f} | {cpu['pipeline']:.0f} "
            f"| {cpu['consumer']:.0f} | {cpu['workers']:.0f} | {r['other_load_percent']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """CLI: measure every combination, print the table, write the JSON and markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps",
        type=int,
        default=200,
        help="pipeline steps per run (200 x 64 x 512 tokens: less than either text holds)",
    )
    parser.add_argument("--reps", type=int, default=REPS)
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument(
        "--tokenizer",
        default=TOKENIZER_ID,
        help="tokenizer spec (default gpt2; docs/tokenizers.md)",
    )
    parser.add_argument(
        "--runners", default="threads,processes", help="tokenize runners measured, comma-separated"
    )
    args = parser.parse_args(argv)
    began = time.perf_counter()
    results = [
        measure_pipeline_ratio(
            text_kind,
            parallelism,
            runner,
            args.steps,
            reps=args.reps,
            work_dir=args.work_dir,
            tokenizer=args.tokenizer,
        )
        for text_kind in TEXT_KINDS
        for parallelism in (1, 2)
        for runner in args.runners.split(",")
    ]
    seconds = time.perf_counter() - began
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    kind = load_tokenizer(args.tokenizer).name
    machine = describe_machine(["numpy", "tiktoken", "tokenizers"])
    markdown = render_markdown(results, machine, date, seconds, kind)
    report = {"date": date, "machine": machine, "seconds": seconds, "results": results}
    name = "tokenizer_ratio" if kind == "gpt2" else f"tokenizer_ratio_{kind}"
    publish(args.results_dir, name, report, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
