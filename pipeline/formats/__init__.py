"""Shard formats: how a shard's records are indexed once and read back by position.

One class per format (JSONL, plain text, Parquet, Arrow, MDS), each with ``build_index``,
``open`` and ``read``; the pre-tokenized formats (Megatron indexed datasets, OLMo-core token
files) ``read_tokens`` instead, their ids checked against the declared tokenizer
(``TokenFiles``). Formats are chosen by file name (``detect_format``); a dataset folder
(``datasets``' ``save_to_disk``, MDS) lists its shard files (``folder_shards``). Compressed JSONL and MDS are
not formats of their own: ``decompress`` writes a plain copy, because records cannot be read
by offset from a compressed stream.

Design: docs/design/pipeline_datasets.md
"""

from pipeline.formats.arrow import ArrowFormat
from pipeline.formats.compression import Compression, decompress
from pipeline.formats.detection import COMPRESSIONS, JSONL_SUFFIXES, detect_format
from pipeline.formats.folders import folder_shards
from pipeline.formats.jsonl import JsonlFormat
from pipeline.formats.mds import MdsFormat
from pipeline.formats.megatron import MegatronFormat
from pipeline.formats.parquet import REMOTE_READ_BYTES, ParquetFormat
from pipeline.formats.shard_format import (
    FormatName,
    ShardFormat,
    TokenFile,
    TokenFiles,
    TokenFormat,
    utf8_len,
)
from pipeline.formats.shard_index import MAX_EXAMPLES, ShardIndex, SkipReason
from pipeline.formats.text import TextFormat
from pipeline.formats.token_array import TokenArrayFormat

__all__ = [
    "COMPRESSIONS",
    "JSONL_SUFFIXES",
    "MAX_EXAMPLES",
    "REMOTE_READ_BYTES",
    "ArrowFormat",
    "Compression",
    "FormatName",
    "JsonlFormat",
    "MdsFormat",
    "MegatronFormat",
    "ParquetFormat",
    "ShardFormat",
    "ShardIndex",
    "SkipReason",
    "TextFormat",
    "TokenArrayFormat",
    "TokenFile",
    "TokenFiles",
    "TokenFormat",
    "decompress",
    "detect_format",
    "folder_shards",
    "utf8_len",
]
