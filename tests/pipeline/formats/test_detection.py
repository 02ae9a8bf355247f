"""A shard's format from its file name: what is read, and what is refused rather than misread."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.formats.compression import Compression
from pipeline.formats.detection import detect_format
from pipeline.formats.shard_format import FormatName


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a.jsonl", (FormatName.JSONL, None)),
        ("s3://b/p/a.json.zst", (FormatName.JSONL, Compression.ZST)),
        ("A.NDJSON.GZ", (FormatName.JSONL, Compression.GZ)),
        ("a.parquet", (FormatName.PARQUET, None)),
        ("data-00000-of-00002.arrow", (FormatName.ARROW, None)),
        ("shard.00000.mds", (FormatName.MDS, None)),
        ("s3://b/shard.00000.mds.zstd", (FormatName.MDS, Compression.ZST)),
        ("shard.00000.mds.gz", (FormatName.MDS, Compression.GZ)),
        ("notes.txt", (FormatName.TEXT, None)),
        ("README", (FormatName.TEXT, None)),
    ],
)
def test_formats_by_name(name: str, expected: tuple[FormatName, Compression | None]) -> None:
    assert detect_format(name) == expected


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("rows.csv", ".csv files are not read"),
        ("rows.TSV", ".tsv files are not read"),
        ("table.feather", ".feather files are not read"),
        ("shard.00000.mds.snappy", "an MDS shard compressed with 'snappy'"),
        ("doc.txt.gz", "only compressed JSONL is supported"),
    ],
)
def test_a_table_or_a_compressed_text_is_refused_not_read_as_one_document(
    name: str, says: str
) -> None:
    with pytest.raises(ConfigError, match=says):
        detect_format(f"/data/{name}")
