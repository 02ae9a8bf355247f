"""Dataset: every format read by key, bad configuration, changed files, concurrent reads, bounded
resources."""

from __future__ import annotations

import functools
import gzip
import random
import threading
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.dataset import Dataset, shard_access
from pipeline.dataset import dataset as dataset_module
from pipeline.errors import ConfigError, DataError
from pipeline.formats import ParquetFormat
from tests.support.shard_files import (
    FORMATS,
    make_dataset,
    write_jsonl_lines,
    write_shards,
)


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_reads_right_texts_in_random_order(tmp_path: Path, fmt: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    expected = write_shards(data, fmt)
    ds = make_dataset(tmp_path, str(data / f"*.{fmt}"))
    assert ds.num_records == len(expected)
    assert ds.record_bytes.dtype == np.int64
    assert ds.record_bytes.tolist() == [len(t.encode()) for t in expected]
    order = list(range(len(expected))) * 2
    random.Random(0).shuffle(order)
    assert ds.read_texts(order) == [expected[i] for i in order]
    assert ds.read_texts([]) == []
    assert ds.report()["skipped"] == {}


def test_empty_files_are_empty_shards(tmp_path: Path) -> None:
    for name in ["a.jsonl", "b.txt", "c.jsonl.gz", "d.jsonl.zst"]:
        (tmp_path / name).write_bytes(b"")
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), tmp_path / "e.parquet")
    write_jsonl_lines(tmp_path / "z.jsonl", [{"text": "only"}])
    ds = make_dataset(tmp_path, str(tmp_path / "*"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ds.read_texts([0]) == ["only"]
    assert ds.report()["empty_shards"] == 5
    assert ds.pointer(int(ds.global_keys([0])[0])).shard == 5


def test_reads_survive_handle_and_row_group_cache_eviction(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(dataset_module, "_MAX_OPEN_SHARDS", 2)
    monkeypatch.setattr(
        shard_access, "ParquetFormat", functools.partial(ParquetFormat, cache_bytes=1)
    )
    (tmp_path / "t").mkdir()
    expected = write_shards(tmp_path, "parquet") + write_shards(tmp_path / "t", "txt", shards=6)
    ds = make_dataset(tmp_path, [str(tmp_path / "*.parquet"), str(tmp_path / "t" / "*.txt")])
    order = list(range(len(expected))) * 2
    random.Random(2).shuffle(order)
    assert ds.read_texts(order) == [expected[i] for i in order]


def test_construction_reads_nothing(tmp_path: Path) -> None:
    write_jsonl_lines(tmp_path / "a.jsonl", [{"text": "x"}])
    ds = make_dataset(tmp_path, tmp_path / "a.jsonl")
    assert "0 indexed" in repr(ds)
    assert ds.shards == [tmp_path / "a.jsonl"]
    assert ds.manifest_fingerprint  # the plan's metadata: a stat, no read
    assert not (tmp_path / "cache").exists()
    assert ds.num_records == 1
    assert "1 indexed" in repr(ds)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"paths": "notes.txt.gz"}, "only compressed JSONL"),
        ({"name": ""}, "name"),
        ({"name": "a b"}, "name"),
        ({"field": ""}, "field"),
        ({"exhausted": "loop"}, r"exhausted='loop' is invalid; use one of \['repeat', 'stop'\]"),
        ({"on_bad_record": "ignore"}, r"on_bad_record='ignore' .* \['skip', 'error'\]"),
    ],
)
def test_bad_configuration_raises_config_error(tmp_path: Path, monkeypatch, kwargs, match) -> None:
    monkeypatch.chdir(tmp_path)
    write_jsonl_lines(tmp_path / "ok.jsonl", [{"text": "x"}])
    (tmp_path / "notes.txt.gz").write_bytes(gzip.compress(b"hello"))
    args = {"name": "ds", "paths": "ok.jsonl", **kwargs}
    with pytest.raises(ConfigError, match=match):
        Dataset(args.pop("name"), args.pop("paths"), cache_dir=tmp_path / "cache", **args)


@pytest.mark.parametrize("name", ["a.jsonl.gz", "a.jsonl.zst", "a.parquet"])
def test_corrupt_files_raise_data_error_naming_the_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    if name == "a.parquet":
        path.write_bytes(b"PAR1 definitely not parquet")
    else:
        write_jsonl_lines(path, [{"text": "x" * 5000 + str(i)} for i in range(50)])
        path.write_bytes(path.read_bytes()[:-20])  # truncated
    with pytest.raises(DataError, match=str(path)):
        _ = make_dataset(tmp_path, path, on_bad_record="skip").num_records
    assert not list((tmp_path / "cache").rglob("*.jsonl"))  # no partial copy left behind


def test_file_changed_before_first_read_raises(tmp_path: Path) -> None:
    path = write_jsonl_lines(tmp_path / "a.jsonl", [{"text": "one"}, {"text": "two"}])
    ds = make_dataset(tmp_path, path)
    assert ds.num_records == 2
    write_jsonl_lines(path, [{"text": "uno"}, {"text": "dos, longer"}])
    with pytest.raises(DataError, match="changed since it was indexed"):
        ds.read_texts([1])


@pytest.mark.parametrize("fmt", ["jsonl", "txt", "parquet"])
def test_file_changed_while_open_raises_naming_the_record(tmp_path: Path, fmt: str) -> None:
    write_shards(tmp_path, fmt, shards=1)
    path = tmp_path / f"part-00.{fmt}"
    ds = make_dataset(tmp_path, path)
    last = ds.num_records - 1
    ds.read_texts([0])  # opens the shard
    if fmt == "jsonl":
        write_jsonl_lines(path, [{"body": "x" * 200}] * (last + 1))
    elif fmt == "txt":
        path.write_bytes(b"\xff" * path.stat().st_size)
    else:
        pq.write_table(pa.table({"text": ["short"] * 3}), path)
    with pytest.raises(
        DataError, match=rf"record \('ds', 0, {last}\).*changed since it was indexed"
    ):
        ds.read_texts([last])


def test_concurrent_reads_match_serial(tmp_path: Path) -> None:
    for fmt in ["jsonl", "jsonl.gz", "parquet", "txt"]:
        (tmp_path / fmt).mkdir()
        write_shards(tmp_path / fmt, fmt, shards=4, per_shard=60)
    ds = make_dataset(tmp_path, str(tmp_path / "**" / "part-*"))
    n = ds.num_records
    rng = random.Random(1)
    batches = [[rng.randrange(n) for _ in range(rng.randint(1, 20))] for _ in range(400)]
    reference = make_dataset(tmp_path, str(tmp_path / "**" / "part-*"))
    serial = [reference.read_texts(b) for b in batches]
    results: dict[int, list[str]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def worker(w: int) -> None:
        try:
            start.wait()
            for i in range(w, len(batches), 4):
                results[i] = ds.read_texts(batches[i])
        except BaseException as e:  # surfaced by the assert below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [results[i] for i in range(len(batches))] == serial


def test_a_bounded_number_of_indexes_stays_mapped(tmp_path: Path, monkeypatch) -> None:
    """A run that reads 100,000 shards must not hold 100,000 memory maps (the kernel's
    limit is ~65,000): the least recently used indexes are unmapped and mapped again."""
    monkeypatch.setattr(dataset_module, "_MAX_MAPPED_INDEXES", 3)
    for s in range(8):
        write_jsonl_lines(
            tmp_path / f"s{s}.jsonl", [{"text": f"shard {s} record {i}"} for i in range(5)]
        )
    ds = make_dataset(tmp_path, str(tmp_path / "s*.jsonl"))
    keys = [(s << 32) | 2 for s in range(8)] * 2
    assert ds.read_records(keys) == [f"shard {s} record 2" for s in range(8)] * 2
    assert len(ds._mapped) == 3 and ds.report()["shards_indexed"] == 8
    assert [ds.shard_records(s) for s in range(8)] == [5] * 8
    assert ds.record_text_bytes([(7 << 32) | 4, 4]).tolist() == [len("shard 7 record 4")] * 2
