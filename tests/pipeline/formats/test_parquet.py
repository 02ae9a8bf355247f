"""Parquet shards: null and empty values skipped, a missing column counted."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import DataError
from tests.support.shard_files import (
    make_dataset,
)


def test_parquet_bad_rows_and_missing_column(tmp_path: Path) -> None:
    pq.write_table(
        pa.table({"text": ["a", None, "", "b"], "n": [1, 2, 3, 4]}),
        tmp_path / "a.parquet",
        row_group_size=3,
    )
    with pytest.warns(UserWarning):
        ds = make_dataset(tmp_path, tmp_path / "a.parquet")
        assert ds.read_texts([1, 0]) == ["b", "a"]
    assert ds.report()["skipped"] == {"missing_field": 1, "empty_document": 1}
    assert ds.report()["examples"]["missing_field"] == [f"{tmp_path / 'a.parquet'}:2"]
    with pytest.raises(
        DataError, match=r"no usable records \(1 files; skipped: \{'missing_field': 4\}\)"
    ):
        _ = make_dataset(tmp_path, tmp_path / "a.parquet", field="n").num_records
