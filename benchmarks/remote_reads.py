"""Remote Parquet shards read by byte range against downloaded whole: bytes, disk and time.

``bash scripts/bench.sh --remote-reads`` (or ``python -m benchmarks.remote_reads``) puts
Parquet shards of real prose (the installed packages' docstrings, ``benchmarks.text_corpus``,
built once under ``.zephon/tokenizer_ratio``)
in a local S3 endpoint (``benchmarks.object_store``: moto's server behind a proxy that counts
the bytes it sends) in two layouts: ``text+metadata`` (FineWeb's columns: id, url, dump,
date, language, score, token count) and ``text+html`` (also the page's HTML, about three
times the text). For each layout, ``io_options["remote_read"]`` ``download`` (the baseline,
with the shared IO cache) and ``range`` build the lane pipeline and take its first batch:
cold (empty cache dir) and warm (the same cache dir, a new ``Dataset``), interleaved.
Reported: bytes fetched from the store, bytes left on local disk (copies and indexes) and
seconds to the first batch, with range over download as ratios.
Results: ``benchmarks/results/remote_reads.{json,md}``.

Design: docs/design/pipeline_datasets.md ("Parquet by byte range")
"""

from __future__ import annotations

import argparse
import datetime
import io
import itertools
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from benchmarks.corpus_scale.corpora import AHEAD_JOIN_S, AHEAD_THREAD
from benchmarks.lanes import PipelineSpec, build_pipeline
from benchmarks.machine import describe_machine
from benchmarks.object_store import ObjectStore, local_object_store
from benchmarks.publish import RESULTS, publish
from benchmarks.text_corpus import build_text_corpus
from benchmarks.tokenizer_ratio import DEFAULT_WORK_DIR
from orchestrator.machine.precision import cpu_model
from pipeline import Dataset, WorkSource, load_tokenizer
from pipeline.io import RemoteRead

TEXT_CORPUS_DIR = DEFAULT_WORK_DIR / "text_corpus"
LAYOUTS = ("text+metadata", "text+html")
ROWS_PER_GROUP = 64
FIRST_BATCH = PipelineSpec(max_length=512, global_batch_size=8, microbatch_size=8)
"""One 512-token sequence per lane: a first batch that reads little beyond its windows."""


def prose_texts(count: int) -> list[str]:
    """The first ``count`` records of the prose corpus (built once, shared with
    ``benchmarks.tokenizer_ratio``)."""
    texts: list[str] = []
    for shard in build_text_corpus(TEXT_CORPUS_DIR, "prose"):
        with open(shard, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as reader:
            lines = io.TextIOWrapper(reader, encoding="utf-8")
            texts += (json.loads(line)["text"] for line in itertools.islice(lines, count))
        if len(texts) >= count:
            return texts[:count]
    raise SystemExit(f"the prose corpus has {len(texts)} records, fewer than {count}")


def build_shards(layout: str, texts: list[str], *, rows: int, seed: int = 0) -> list[bytes]:
    """Parquet files of ``rows`` records each of ``texts``, in ``layout``."""
    rng = np.random.default_rng(seed)
    files = []
    for start in range(0, len(texts), rows):
        batch = texts[start : start + rows]
        columns: dict[str, Any] = {
            "text": batch,
            "id": [f"<urn:uuid:{rng.integers(1 << 62):016x}>" for _ in batch],
            "url": [f"https://site{rng.integers(10_000)}.example/page/{i}" for i in range(rows)],
            "dump": ["CC-MAIN-2024-10"] * rows,
            "date": [f"2024-02-{1 + i % 28:02d}T10:00:00Z" for i in range(rows)],
            "language": ["en"] * rows,
            "language_score": rng.random(rows),
            "token_count": [len(t) // 4 for t in batch],
        }
        if layout == "text+html":
            columns["html"] = [_page_html(text, rng) for text in batch]
        out = io.BytesIO()
        pq.write_table(pa.table(columns), out, row_group_size=ROWS_PER_GROUP)
        files.append(out.getvalue())
    return files


def _page_html(text: str, rng: np.random.Generator) -> str:
    """A page around ``text``: boilerplate, scripts with random ids, the text in paragraphs."""
    ids = " ".join(f"{rng.integers(1 << 40):x}" for _ in range(24))
    paragraphs = "".join(f"<p class='c{i % 7}'>{p}</p>\n" for i, p in enumerate(text.split("\n")))
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>page</title>"
        f"<script>window.ids = '{ids}';</script><link rel='stylesheet' href='/s.css'>"
        f"</head><body><nav>{'<a href=/x>link</a> ' * 20}</nav><main>{paragraphs}</main>"
        f"<footer>{'&copy; site ' * 10}</footer></body></html>"
    )


def first_batch(urls: list[str], cache_dir: Path, mode: RemoteRead) -> dict[str, float]:
    """Seconds to the lane pipeline's first batch over ``urls``, read in ``mode``."""
    started = time.perf_counter()
    options = {"remote_read": str(mode), "cache": {"enabled": True}}
    ds = Dataset("web", urls, cache_dir=cache_dir, io_options=options)
    source = WorkSource([ds], {"web": 1.0}, seed=0, holdout_bytes=16384)
    batches = iter(build_pipeline(source, FIRST_BATCH))
    next(batches)
    seconds = time.perf_counter() - started
    shards = ds.report()["shards_indexed"]
    for thread in threading.enumerate():  # what the look-ahead fetches counts too
        if thread.name == AHEAD_THREAD:
            thread.join(timeout=AHEAD_JOIN_S)
    batches.close()
    return {"seconds": seconds, "shards_indexed": shards}


def disk_bytes(folder: Path) -> int:
    """Bytes of the files under ``folder``."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def measure(
    store: ObjectStore, layout: str, urls: list[str], work: Path, reps: int
) -> dict[str, Any]:
    """Cold and warm first batches per mode, interleaved ``reps`` times; medians."""
    samples: dict[str, dict[str, list[float]]] = {str(m): {} for m in RemoteRead}
    for rep in range(reps):
        for mode in RemoteRead:
            cache = work / f"{layout}-{mode}-{rep}"
            for phase in ("cold", "warm"):
                store.proxy.reset()
                result = first_batch(urls, cache, mode)
                got = samples[str(mode)]
                got.setdefault(f"{phase}_seconds", []).append(result["seconds"])
                got.setdefault(f"{phase}_fetched_bytes", []).append(
                    store.proxy.bytes_sent_to_clients
                )
                got.setdefault("shards_indexed", []).append(result["shards_indexed"])
            got.setdefault("disk_bytes", []).append(disk_bytes(cache))
    medians = {
        mode: {key: statistics.median(values) for key, values in got.items()}
        for mode, got in samples.items()
    }
    range_, download = medians[str(RemoteRead.RANGE)], medians[str(RemoteRead.DOWNLOAD)]
    ratios = {
        key: range_[key] / download[key] if download[key] else None
        for key in ("cold_fetched_bytes", "cold_seconds", "warm_fetched_bytes", "disk_bytes")
    }
    return {"modes": medians, "samples": samples, "range_over_download": ratios}


def render(report: dict[str, Any]) -> str:
    """The report as Markdown tables."""
    lines = [
        "# Remote Parquet shards: read by range against downloaded whole",
        "",
        f"{report['date']}, {report['machine']}. {report['shards']} shards of "
        f"{report['rows']} prose records in a local S3 endpoint (moto), lane pipeline's first "
        f"batch (order v2), medians of {report['reps']} interleaved repetitions.",
        "",
        "| layout | shard MB | mode | cold: MB fetched | cold: s | warm: MB fetched | "
        "warm: s | MB on disk | shards indexed |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for layout in LAYOUTS:
        entry = report["layouts"][layout]
        for mode, m in entry["modes"].items():
            lines.append(
                f"| {layout} | {entry['shard_mb']:.1f} | {mode} | "
                f"{m['cold_fetched_bytes'] / 1e6:.1f} | {m['cold_seconds']:.2f} | "
                f"{m['warm_fetched_bytes'] / 1e6:.2f} | {m['warm_seconds']:.2f} | "
                f"{m['disk_bytes'] / 1e6:.1f} | {m['shards_indexed']:.0f} |"
            )
    lines += ["", "Range over download:", "", "| layout | cold bytes | cold s | disk |"]
    lines.append("|---|---:|---:|---:|")
    for layout in LAYOUTS:
        r = report["layouts"][layout]["range_over_download"]
        lines.append(
            f"| {layout} | {r['cold_fetched_bytes']:.2f} | {r['cold_seconds']:.2f} | "
            f"{r['disk_bytes']:.2f} |"
        )
    lines += [
        "",
        "Warm, a download is served from its cached copy (a HEAD per shard) while range reads "
        "fetch the footers and the row groups read again: the trade of disk for bytes.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Build both layouts, measure both modes and publish the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=8, help="shards per layout")
    parser.add_argument("--rows", type=int, default=1024, help="records per shard")
    parser.add_argument("--reps", type=int, default=2, help="interleaved repetitions")
    args = parser.parse_args(argv)
    load_tokenizer("gpt2")  # provisioned before anything is timed
    report: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{cpu_model()}, " + describe_machine(["pyarrow", "s3fs", "moto"]),
        "shards": args.shards,
        "rows": args.rows,
        "reps": args.reps,
        "layouts": {},
    }
    texts = prose_texts(args.shards * args.rows)
    with local_object_store() as store, tempfile.TemporaryDirectory(prefix="zephon-rr-") as tmp:
        for layout in LAYOUTS:
            files = build_shards(layout, texts, rows=args.rows)
            urls = []
            for s, data in enumerate(files):
                store.put(f"{layout}/part-{s:03d}.parquet", data)
                urls.append(store.url(f"{layout}/part-{s:03d}.parquet"))
            entry = measure(store, layout, urls, Path(tmp), args.reps)
            entry["shard_mb"] = statistics.mean(len(f) for f in files) / 1e6
            report["layouts"][layout] = entry
    publish(RESULTS, "remote_reads", report, render(report))


if __name__ == "__main__":
    main()
