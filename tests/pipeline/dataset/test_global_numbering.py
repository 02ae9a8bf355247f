"""Global record numbers across shards, and the dataset fingerprint over their content."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pipeline.dataset import RecordPointer
from pipeline.errors import DataError
from tests.support.shard_files import (
    make_dataset,
    write_jsonl_lines,
)


def test_pointer_maps_global_index_across_empty_shards(tmp_path: Path) -> None:
    write_jsonl_lines(tmp_path / "a.jsonl", [{"text": "a0"}, {"text": "a1"}])
    (tmp_path / "b.jsonl").write_bytes(b"")
    write_jsonl_lines(tmp_path / "c.jsonl", [{"text": "c0"}])
    ds = make_dataset(tmp_path, str(tmp_path / "*.jsonl"), name="mix.v1")
    assert [ds.pointer(key).as_tuple() for key in ds.global_keys(range(3))] == [
        ("mix.v1", 0, 0),
        ("mix.v1", 0, 1),
        ("mix.v1", 2, 0),
    ]
    assert ds.pointer(2 << 32) == RecordPointer("mix.v1", 2, 0)
    with pytest.raises(IndexError):
        ds.global_keys([3])
    with pytest.raises(IndexError):
        ds.read_texts([0, -1])
    with pytest.raises(IndexError):
        ds.read_records([(2 << 32) | 1])  # shard 2 has one record
    assert ds.report()["empty_shards"] == 1


def test_zero_usable_records_is_a_data_error(tmp_path: Path) -> None:
    write_jsonl_lines(tmp_path / "a.jsonl", [{"content": "x"}, {"content": "y"}])
    with pytest.raises(DataError, match=r"dataset 'ds' has no usable records .*check `field=`"):
        _ = make_dataset(tmp_path, tmp_path / "a.jsonl").num_records


def test_fingerprint_follows_content_not_paths(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_jsonl_lines(a, [{"text": "one", "body": "1"}, {"text": "two", "body": "2"}])
    write_jsonl_lines(b, [{"text": "three", "body": "3"}])
    first = make_dataset(tmp_path, [a, b])
    assert first.shard_fingerprints == [hashlib.sha256(p.read_bytes()).hexdigest() for p in (a, b)]

    moved = tmp_path / "moved"
    moved.mkdir()
    a.rename(moved / "a2.jsonl")
    b.rename(moved / "b2.jsonl")
    second = make_dataset(tmp_path, str(moved / "*.jsonl"))
    assert second.fingerprint == first.fingerprint
    assert (
        make_dataset(tmp_path, [a.parent / "moved" / "a2.jsonl"]).fingerprint != first.fingerprint
    )
    assert (
        make_dataset(tmp_path, str(moved / "*.jsonl"), field="body").fingerprint
        != first.fingerprint
    )

    raw = bytearray((moved / "b2.jsonl").read_bytes())
    raw[raw.index(b"three")] = ord("T")  # same size
    (moved / "b2.jsonl").write_bytes(raw)
    changed = make_dataset(tmp_path, str(moved / "*.jsonl"))
    assert changed.fingerprint != first.fingerprint
    assert changed.read_texts([2]) == ["Three"]
