"""The remote-reads benchmark on a tiny corpus: it measures both modes, and range reads of
shards with an HTML column fetch less and keep nothing on disk. No timing."""

from __future__ import annotations

from pathlib import Path

from benchmarks.object_store import local_object_store
from benchmarks.remote_reads import build_shards, measure, render


def test_range_reads_fetch_less_than_downloads_and_keep_no_copies(tmp_path: Path) -> None:
    texts = [f"document {i}: " + "words of prose about data " * (20 + i % 30) for i in range(512)]
    with local_object_store() as store:
        urls = []
        files = build_shards("text+html", texts, rows=128)
        for s, data in enumerate(files):
            store.put(f"bench/part-{s}.parquet", data)
            urls.append(store.url(f"bench/part-{s}.parquet"))
        entry = measure(store, "text+html", urls, tmp_path, reps=1)
    download, by_range = entry["modes"]["download"], entry["modes"]["range"]
    assert download["cold_fetched_bytes"] >= sum(len(data) for data in files)  # whole files
    assert by_range["cold_fetched_bytes"] < download["cold_fetched_bytes"]
    assert by_range["disk_bytes"] < download["disk_bytes"] / 10  # indexes only
    assert download["warm_fetched_bytes"] < download["cold_fetched_bytes"] / 10  # cached copies
    ratios = entry["range_over_download"]
    assert ratios["cold_fetched_bytes"] < 1
    entry["shard_mb"] = 0.1
    report = {"date": "d", "machine": "m", "shards": 4, "rows": 128, "reps": 1}
    report["layouts"] = {"text+metadata": entry, "text+html": entry}
    assert "| text+html | 0.1 | range |" in render(report)
