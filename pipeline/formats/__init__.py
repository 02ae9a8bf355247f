"""Shard formats: how a shard's records are indexed once and read back by position.

One class per format (JSONL, plain text, Parquet), each with ``build_index``, ``open`` and
``read``, chosen by file name (``detect_format``). Compressed JSONL is not a format of its
own: ``decompress`` writes a plain copy, because records cannot be read by offset from a
compressed stream.

Design: docs/design/pipeline_datasets.md
"""

from pipeline.formats.compression import Compression, decompress
from pipeline.formats.detection import COMPRESSIONS, JSONL_SUFFIXES, detect_format
from pipeline.formats.jsonl import JsonlFormat
from pipeline.formats.parquet import REMOTE_READ_BYTES, ParquetFormat
from pipeline.formats.shard_format import FormatName, ShardFormat, utf8_len
from pipeline.formats.shard_index import MAX_EXAMPLES, ShardIndex, SkipReason
from pipeline.formats.text import TextFormat

__all__ = [
    "COMPRESSIONS",
    "JSONL_SUFFIXES",
    "MAX_EXAMPLES",
    "REMOTE_READ_BYTES",
    "Compression",
    "FormatName",
    "JsonlFormat",
    "ParquetFormat",
    "ShardFormat",
    "ShardIndex",
    "SkipReason",
    "TextFormat",
    "decompress",
    "detect_format",
    "utf8_len",
]
