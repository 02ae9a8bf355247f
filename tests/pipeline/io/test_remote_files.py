"""Remote Parquet shards read in place by byte range (``io_options["remote_read"] = "range"``)
from a real S3 endpoint on 127.0.0.1, counting the bytes it sends."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.object_store import ObjectStore, local_object_store
from pipeline import WorkSource
from pipeline.dataset import Dataset, ShardIdentity, record_keys
from pipeline.errors import DataError
from pipeline.io import remote_validators, remote_version_fingerprint
from pipeline.tokenizer import load_tokenizer
from tests.support.helpers import run_ranks
from tests.support.pipelines import make_pipeline

RANGE = {"remote_read": "range"}
ROWS, ROWS_PER_GROUP = 800, 100
# Each row also carries 2 KB of random bytes (say, a page's raw HTML): a reader of the text
# column by range never fetches them, a download fetches the whole file.
EXTRA_BYTES = 2048
# A Parquet reader fetches a file's last 64 KiB to find its footer: once per process (at
# indexing, or at the first open of a shard indexed by another); plus HTTP headers.
FOOTER_READS = 65_536 + 20_000


@pytest.fixture(scope="module")
def store() -> Iterator[ObjectStore]:
    with local_object_store() as store:
        yield store


def parquet_shard(tag: str, rows: int = ROWS) -> bytes:
    """A Parquet file with a text column and a larger column of incompressible bytes."""
    rng = np.random.default_rng(abs(hash(tag)) % 2**32)
    texts = [f"{tag} document {i} " * (1 + i % 9) for i in range(rows)]
    texts[5] = ""  # skipped as empty, as for a local file
    table = pa.table(
        {"text": texts, "html": [rng.bytes(EXTRA_BYTES) for _ in range(rows)]},
    )
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=ROWS_PER_GROUP)
    return out.getvalue()


def text_chunk_bytes(data: bytes, group: int) -> int:
    """Compressed size of the text column's chunk in row group ``group``."""
    return (
        pq.ParquetFile(io.BytesIO(data)).metadata.row_group(group).column(0).total_compressed_size
    )


def test_range_reads_fetch_the_text_column_not_the_file(store: ObjectStore, tmp_path: Path) -> None:
    data = parquet_shard("range")
    store.put("range.parquet", data)
    local = tmp_path / "range.parquet"
    local.write_bytes(data)
    reference = Dataset("web", str(local), cache_dir=tmp_path / "local-cache")
    options = {**RANGE, "cache": {"enabled": True}}
    ds = Dataset(
        "web", store.url("range.parquet"), cache_dir=tmp_path / "cache", io_options=options
    )

    store.proxy.reset()
    keys = record_keys(0, np.arange(reference.shard_records(0)))
    assert ds.read_records(keys) == reference.read_records(keys)
    text_column = sum(text_chunk_bytes(data, g) for g in range(ROWS // ROWS_PER_GROUP))
    fetched = store.proxy.bytes_sent_to_clients
    assert fetched < text_column + FOOTER_READS
    assert fetched < len(data) / 8
    assert not (tmp_path / "cache" / "remote").exists()  # no local copy of the shard
    assert ds.report()["skipped"] == {"empty_document": 1}

    validators = remote_validators(store.url("range.parquet"))
    assert ds.shard_identity(0) is ShardIdentity.REMOTE_VERSION
    assert ds.shard_fingerprint(0) == remote_version_fingerprint("x", validators)
    assert reference.shard_identity(0) is ShardIdentity.CONTENT


def test_a_download_fetches_the_whole_file(store: ObjectStore, tmp_path: Path) -> None:
    """The default reads what it always did: the whole file, named by its content."""
    data = parquet_shard("download")
    store.put("download.parquet", data)
    ds = Dataset("web", store.url("download.parquet"), cache_dir=tmp_path / "cache")
    store.proxy.reset()
    ds.read_records([0])
    assert store.proxy.bytes_sent_to_clients >= len(data)
    assert ds.shard_fingerprint(0) == hashlib.sha256(data).hexdigest()
    assert ds.shard_identity(0) is ShardIdentity.CONTENT


def test_a_later_run_fetches_only_the_row_groups_it_reads(
    store: ObjectStore, tmp_path: Path
) -> None:
    """The index is cached under the shard's version: a new process maps it and fetches the
    footer and the one column chunk its record lives in."""
    data = parquet_shard("later")
    store.put("later.parquet", data)
    (tmp_path / "later.parquet").write_bytes(data)
    reference = Dataset("web", str(tmp_path / "later.parquet"), cache_dir=tmp_path / "local")
    cache = tmp_path / "cache"
    Dataset("web", store.url("later.parquet"), cache_dir=cache, io_options=RANGE).shard_index(0)
    again = Dataset("web", store.url("later.parquet"), cache_dir=cache, io_options=RANGE)
    store.proxy.reset()
    key = 3 * ROWS_PER_GROUP + 7  # a record of row group 3
    assert again.read_records([key]) == reference.read_records([key])
    assert store.proxy.bytes_sent_to_clients < text_chunk_bytes(data, 3) + FOOTER_READS


def test_a_shard_rewritten_between_the_plan_and_its_read_fails_naming_it(
    store: ObjectStore, tmp_path: Path
) -> None:
    store.put("planned.parquet", parquet_shard("planned"))
    ds = Dataset(
        "web", store.url("planned.parquet"), cache_dir=tmp_path / "cache", io_options=RANGE
    )
    ds.shard_metadata()  # the plan
    store.put("planned.parquet", parquet_shard("edited"))  # the same size, a new ETag
    with pytest.raises(DataError, match=r"planned\.parquet changed between the plan and its first"):
        ds.read_records([0])


def test_a_shard_rewritten_after_indexing_fails_when_opened(
    store: ObjectStore, tmp_path: Path
) -> None:
    store.put("indexed.parquet", parquet_shard("indexed"))
    ds = Dataset(
        "web", store.url("indexed.parquet"), cache_dir=tmp_path / "cache", io_options=RANGE
    )
    ds.shard_index(0)
    store.put("indexed.parquet", parquet_shard("rewritten"))
    with pytest.raises(DataError, match=r"indexed\.parquet changed since it was indexed"):
        ds.read_records([0])


def test_range_reads_give_the_batches_of_local_files(store: ObjectStore, tmp_path: Path) -> None:
    """Order v2 over the same bytes: the same lanes, and the same global batches at dp 2."""
    local_dir = tmp_path / "local"
    local_dir.mkdir()
    for s in range(4):
        data = parquet_shard(f"part{s}", rows=300)
        store.put(f"batches/part-{s}.parquet", data)
        (local_dir / f"part-{s}.parquet").write_bytes(data)
    sources = [
        Dataset("web", str(local_dir / "part-*.parquet"), cache_dir=tmp_path / "c1"),
        Dataset(
            "web",
            [store.url(f"batches/part-{s}.parquet") for s in range(4)],
            cache_dir=tmp_path / "c2",
            io_options=RANGE,
        ),
    ]
    runs = []
    for ds in sources:
        source = WorkSource(
            [ds], {"web": 1.0}, seed=3, chunk_tokens=48, holdout_bytes=500, shard_window=2
        )
        source.calibrate(load_tokenizer("gpt2"))
        runs.append(run_ranks(source, 2, 4))
    assert runs[0].digests == runs[1].digests


def test_a_server_without_etag_is_refused_for_range_reads() -> None:
    with pytest.raises(DataError, match=r"sends no ETag.*'remote_read'\] = 'download'"):
        remote_version_fingerprint("https://host/a.parquet", {"size": 10, "etag": None})


def test_the_run_record_marks_shards_identified_by_version(
    store: ObjectStore, tmp_path: Path
) -> None:
    store.put("record/part-0.parquet", parquet_shard("record"))
    ds = Dataset(
        "web", [store.url("record/part-0.parquet")], cache_dir=tmp_path / "c", io_options=RANGE
    )
    source = WorkSource([ds], {"web": 1.0}, seed=3, chunk_tokens=48, holdout_bytes=0)
    source.calibrate(load_tokenizer("gpt2"))
    pipeline = make_pipeline(source)
    next(iter(pipeline))
    entry = pipeline.shards_read()["web"]["0"]
    assert entry == {
        "file": "part-0.parquet",
        "sha256": ds.shard_fingerprint(0),
        "identity": "remote-version",
    }
    json.dumps(entry)  # recorded as JSON in the run
