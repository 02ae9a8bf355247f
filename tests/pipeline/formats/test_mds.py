"""MDS folders, as Mosaic Streaming's MDSWriter wrote them (tests/data/mds/): read like
Parquet, fingerprinted by their stored bytes, and refused when damaged, naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import ConfigError, DataError
from pipeline.formats import MdsFormat
from tests.support.mds_shards import (
    MDS_FIXTURES,
    copy_fixture,
    fixture_texts,
    mds_shard_bytes,
    sha256,
    write_mds_folder,
)
from tests.support.shard_files import make_dataset

pytestmark = pytest.mark.filterwarnings("ignore:dataset .* skipped:UserWarning")


@pytest.mark.parametrize("folder", ["plain", "zstd", "gz"])
def test_a_folder_reads_the_texts_parquet_reads(folder: str, tmp_path: Path) -> None:
    pq.write_table(pa.table({"text": fixture_texts()}), tmp_path / "same.parquet")
    parquet = make_dataset(tmp_path, tmp_path / "same.parquet", name="p")
    mds = make_dataset(tmp_path, MDS_FIXTURES / folder)
    assert mds.num_shards == 3
    assert mds.read_texts(range(mds.num_records)) == parquet.read_texts(range(parquet.num_records))
    assert mds.record_bytes.tolist() == parquet.record_bytes.tolist()
    # MDS has no nulls: its two bad records are the empty texts, as in Parquet.
    assert mds.report()["skipped"] == parquet.report()["skipped"] == {"empty_document": 2}
    assert mds.report()["examples"]["empty_document"][0].endswith(
        "shard.00000.mds" + ("" if folder == "plain" else f".{folder}") + ":18"
    )


def test_the_folder_is_its_shards_in_index_order(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path, [MDS_FIXTURES / "zstd"])
    assert [p.name for p in ds.shards] == [f"shard.0000{i}.mds.zstd" for i in range(3)]
    ds = make_dataset(tmp_path, [str(MDS_FIXTURES / "plain" / "shard.*.mds")])
    assert ds.num_records == len(fixture_texts()) - 2


def test_the_test_writer_writes_what_mdswriter_writes() -> None:
    """The benchmark's and the tests' shards match the real writer's byte for byte."""
    index = json.loads((MDS_FIXTURES / "plain" / "index.json").read_bytes())["shards"][0]
    samples = [{"text": t, "id": i} for i, t in enumerate(fixture_texts()[: index["samples"]])]
    config = {"compression": None, "hashes": ["sha1"], "size_limit": 12_000}
    raw = mds_shard_bytes(samples, {"text": "str", "id": "int64"}, config)
    assert raw == (MDS_FIXTURES / "plain" / "shard.00000.mds").read_bytes()


def test_fingerprint_is_of_the_stored_bytes_and_changes_with_one(tmp_path: Path) -> None:
    folder = copy_fixture("zstd", tmp_path)
    first = folder / "shard.00000.mds.zstd"
    assert make_dataset(tmp_path, folder).shard_fingerprint(0) == sha256(first)
    texts = fixture_texts()
    plain = write_mds_folder(tmp_path / "m", texts, compression=None, samples_per_shard=150)
    before = make_dataset(tmp_path, plain)
    fp, text = before.shard_fingerprint(1), before.read_texts([200])[0]
    data = bytearray((plain / "shard.00001.mds").read_bytes())
    at = data.index(text.encode())
    data[at] = ord("R")  # 'record ...' -> 'Record ...': same size, still UTF-8
    (plain / "shard.00001.mds").write_bytes(bytes(data))
    after = make_dataset(tmp_path, plain)
    assert after.shard_fingerprint(1) != fp
    assert after.read_texts([200]) == ["R" + text[1:]]


def test_nothing_is_read_before_a_shard_is_reached(tmp_path: Path) -> None:
    folder = copy_fixture("plain", tmp_path)
    shard = folder / "shard.00002.mds"
    data = bytearray(shard.read_bytes())
    data[4:8] = b"\xff\xff\xff\xff"  # its first offset: the shard no longer parses
    shard.write_bytes(bytes(data))
    ds = make_dataset(tmp_path, folder)
    assert [m.size for m in ds.shard_metadata()] == [
        (folder / f"shard.0000{i}.mds").stat().st_size for i in range(3)
    ]
    assert ds.read_records([0]) == [fixture_texts()[0]]  # shard 0 alone is indexed
    assert (
        not (tmp_path / "cache" / "index").exists()
        or len(list((tmp_path / "cache" / "index").glob("*.npy"))) == 1
    )
    with pytest.raises(DataError, match=r"shard\.00002\.mds: not a valid MDS shard"):
        ds.shard_index(2)


def test_the_index_is_cached_by_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = make_dataset(tmp_path, MDS_FIXTURES / "zstd")
    texts = first.read_texts(range(first.num_records))

    def no_build(*args: object) -> None:
        raise AssertionError("indexed again")

    monkeypatch.setattr(MdsFormat, "build_index", no_build)
    again = make_dataset(tmp_path, MDS_FIXTURES / "zstd")
    assert again.read_texts(range(again.num_records)) == texts


@pytest.mark.parametrize("damage", ["truncated", "missing", "samples", "corrupt_zstd", "cut_zstd"])
def test_a_damaged_folder_is_refused_naming_the_file(damage: str, tmp_path: Path) -> None:
    folder = copy_fixture("zstd", tmp_path)
    shard = folder / "shard.00001.mds.zstd"
    index_path = folder / "index.json"
    if damage == "truncated":  # refused from a stat, at construction
        shard.write_bytes(shard.read_bytes()[:-10])
        with pytest.raises(DataError, match=rf"{shard}: \d+ bytes where .*index.json says"):
            make_dataset(tmp_path, folder)
        return
    if damage == "missing":
        shard.unlink()
        with pytest.raises(ConfigError, match=r"index.json lists a shard that is missing: "):
            make_dataset(tmp_path, folder)
        return
    if damage == "samples":
        index = json.loads(index_path.read_bytes())
        index["shards"][1]["samples"] += 1
        index_path.write_text(json.dumps(index))
        match = rf"{shard}: \d+ samples in \d+ bytes where .*index.json says"
    elif damage == "cut_zstd":  # cut, and index.json edited to match: decompression fails
        index = json.loads(index_path.read_bytes())
        index["shards"][1]["zip_data"]["bytes"] -= 10
        index_path.write_text(json.dumps(index))
        shard.write_bytes(shard.read_bytes()[:-10])
        match = rf"{shard}: cannot decompress"
    else:
        data = bytearray(shard.read_bytes())
        data[len(data) // 2 : len(data) // 2 + 8] = b"\x00" * 8
        shard.write_bytes(bytes(data))
        match = rf"{shard}: its sha1 digest is not the one .*index.json gives"
    ds = make_dataset(tmp_path, folder)
    with pytest.raises(DataError, match=match):
        _ = ds.num_records


@pytest.mark.parametrize(
    ("field", "says"), [("text", r"'text' of encoding 'str'"), ("body", r"'body'")]
)
def test_no_str_text_column_is_a_config_error_listing_the_columns(
    field: str, says: str, tmp_path: Path
) -> None:
    with pytest.raises(
        ConfigError,
        match=rf"bytes_text: MDS shards need a text column {says}.*"
        r"the columns are id \(int64\), text \(bytes\)",
    ):
        _ = make_dataset(tmp_path, MDS_FIXTURES / "bytes_text", field=field).num_records


def test_an_unread_compression_is_refused_naming_it(tmp_path: Path) -> None:
    folder = write_mds_folder(tmp_path / "m", ["a", "b"], compression=None, samples_per_shard=2)
    (folder / "shard.00000.mds").rename(folder / "shard.00000.mds.bz2")
    with pytest.raises(
        ConfigError, match=r"shard.00000.mds.bz2: an MDS shard compressed with 'bz2'"
    ):
        make_dataset(tmp_path, folder / "shard.00000.mds.bz2")


def test_bad_records_fail_under_the_error_policy(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path, MDS_FIXTURES / "plain", on_bad_record="error")
    with pytest.raises(DataError, match=r"shard\.00000\.mds.*empty_document"):
        _ = ds.num_records


def test_invalid_utf8_is_a_bad_record(tmp_path: Path) -> None:
    folder = write_mds_folder(
        tmp_path / "m", ["good", "bad!", "fine"], compression=None, samples_per_shard=3
    )
    shard = folder / "shard.00000.mds"
    shard.write_bytes(shard.read_bytes().replace(b"bad!", b"ba\xff!"))
    ds = make_dataset(tmp_path, folder)
    assert ds.read_texts(range(ds.num_records)) == ["good", "fine"]
    assert ds.report()["skipped"] == {"invalid_utf8": 1}
    assert np.array_equal(ds.record_bytes, [4, 4])
