"""Arrow shards: ``datasets`` save_to_disk folders and bare .arrow files, read like Parquet,
fingerprinted by their bytes, and refused when damaged, naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.errors import ConfigError, DataError
from pipeline.formats import ArrowFormat, ParquetFormat
from tests.support.shard_files import make_dataset, texts_for

pytestmark = pytest.mark.filterwarnings("ignore:dataset .* skipped:UserWarning")
ROWS = [*texts_for(0, 40), None, "", *texts_for(1, 30)]


def save_to_disk(folder: Path, texts: list[str | None], shards: int = 3) -> Path:
    """A folder as ``datasets`` saves it (``texts`` and an ``id`` column)."""
    ds = datasets.Dataset.from_dict({"text": texts, "id": list(range(len(texts)))})
    ds.save_to_disk(str(folder), num_shards=shards)
    return folder


def write_stream(path: Path, table: pa.Table, *, max_chunksize: int = 7) -> Path:
    """A bare Arrow IPC stream of ``table`` in batches of ``max_chunksize`` rows."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=max_chunksize)
    return path


def test_a_save_to_disk_folder_reads_the_texts_parquet_reads(tmp_path: Path) -> None:
    pq.write_table(pa.table({"text": ROWS}), tmp_path / "same.parquet", row_group_size=9)
    parquet = make_dataset(tmp_path, tmp_path / "same.parquet", name="p")
    arrow = make_dataset(tmp_path, save_to_disk(tmp_path / "hf", ROWS))
    assert [p.name for p in arrow.shards] == [f"data-0000{i}-of-00003.arrow" for i in range(3)]
    assert arrow.read_texts(range(arrow.num_records)) == parquet.read_texts(
        range(parquet.num_records)
    )
    assert arrow.report()["skipped"] == parquet.report()["skipped"]
    assert arrow.report()["skipped"] == {"missing_field": 1, "empty_document": 1}


def test_the_folder_resolves_in_state_json_order(tmp_path: Path) -> None:
    folder = save_to_disk(tmp_path / "hf", [f"doc {i}" for i in range(6)], shards=2)
    state = json.loads((folder / "state.json").read_bytes())
    state["_data_files"].reverse()
    (folder / "state.json").write_text(json.dumps(state))
    ds = make_dataset(tmp_path, [folder, tmp_path / "hf" / "data-00000-of-00002.arrow"])
    assert [p.name for p in ds.shards] == ["data-00001-of-00002.arrow", "data-00000-of-00002.arrow"]
    assert ds.read_texts(range(6)) == ["doc 3", "doc 4", "doc 5", "doc 0", "doc 1", "doc 2"]


def test_a_dataset_dict_folder_asks_for_a_split(tmp_path: Path) -> None:
    d = datasets.Dataset.from_dict({"text": ["a", "b"]})
    datasets.DatasetDict({"train": d, "test": d}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(ConfigError, match=r"DatasetDict folder \(splits: test, train\); name"):
        make_dataset(tmp_path, tmp_path / "dd")
    assert make_dataset(tmp_path, tmp_path / "dd" / "train").num_records == 2


def test_a_missing_data_file_is_refused_naming_it(tmp_path: Path) -> None:
    folder = save_to_disk(tmp_path / "hf", ["a", "b", "c"], shards=2)
    (folder / "data-00001-of-00002.arrow").unlink()
    with pytest.raises(ConfigError, match=r"missing: .*data-00001-of-00002.arrow"):
        make_dataset(tmp_path, folder)


@pytest.mark.parametrize("cut", [8, 100])
def test_a_truncated_file_is_refused_when_reached_naming_it(cut: int, tmp_path: Path) -> None:
    """Cut by its end marker (8 bytes: at a message boundary) or inside a message."""
    folder = save_to_disk(tmp_path / "hf", texts_for(0, 50), shards=2)
    shard = folder / "data-00001-of-00002.arrow"
    shard.write_bytes(shard.read_bytes()[:-cut])
    ds = make_dataset(tmp_path, folder)
    assert ds.read_records([0]) == [texts_for(0, 50)[0]]  # nothing else read until reached
    with pytest.raises(DataError, match=rf"{shard}: (the Arrow stream has no end|cannot read)"):
        ds.shard_index(1)


def test_ipc_file_format_and_a_non_string_column(tmp_path: Path) -> None:
    table = pa.table({"text": pa.array(ROWS, pa.large_string()), "n": list(range(len(ROWS)))})
    with pa.ipc.new_file(str(tmp_path / "t.arrow"), table.schema) as writer:
        writer.write_table(table, max_chunksize=10)
    ds = make_dataset(tmp_path, tmp_path / "t.arrow")
    assert ds.read_texts(range(ds.num_records)) == [t for t in ROWS if t]
    by_n = make_dataset(tmp_path, tmp_path / "t.arrow", field="n", name="n")
    with pytest.raises(DataError, match=r"no usable records .*'missing_field': 72"):
        _ = by_n.num_records
    strict = make_dataset(tmp_path, tmp_path / "t.arrow", on_bad_record="error", name="s")
    with pytest.raises(DataError, match=r"t\.arrow.*missing_field"):
        _ = strict.num_records


def test_fingerprint_changes_with_one_byte(tmp_path: Path) -> None:
    path = write_stream(tmp_path / "a.arrow", pa.table({"text": ["alpha", "beta"]}))
    fp = make_dataset(tmp_path, path).shard_fingerprint(0)
    path.write_bytes(path.read_bytes().replace(b"beta", b"Beta"))
    changed = make_dataset(tmp_path, path)
    assert changed.shard_fingerprint(0) != fp
    assert changed.read_texts([1]) == ["Beta"]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    texts=st.lists(st.one_of(st.none(), st.text(max_size=12)), max_size=30),
    chunk=st.integers(1, 8),
)
def test_arrow_indexes_and_reads_as_parquet_does(
    tmp_path: Path, texts: list[str | None], chunk: int
) -> None:
    table = pa.table({"text": pa.array(texts, pa.string())})
    arrow_path = write_stream(tmp_path / "p.arrow", table, max_chunksize=chunk)
    pq.write_table(table, tmp_path / "p.parquet", row_group_size=chunk)
    arrow, parquet = ArrowFormat(), ParquetFormat()
    a = arrow.build_index(arrow_path, "text")
    p = parquet.build_index(tmp_path / "p.parquet", "text")
    assert (a.skipped, a.examples) == (p.skipped, p.examples)
    assert a.text_bytes.tolist() == p.text_bytes.tolist()
    rows = list(range(len(a)))[::-1]
    a_texts = arrow.read(arrow.open(arrow_path), a, rows, "text")
    assert a_texts == parquet.read(parquet.open(tmp_path / "p.parquet"), p, rows, "text")
