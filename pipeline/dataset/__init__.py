"""Datasets: named sets of shards whose records are read by key, each shard indexed lazily.

A ``Dataset`` resolves its file patterns at construction and reads nothing else until first
used. A shard is indexed when it is first reached, not before: its content is hashed and its
index built (or mapped from the cache under ``cache_dir``, keyed by that hash, every cache
file written by atomic rename so later runs and concurrent processes share it). The plan
itself needs only each shard's metadata (size and stat, or a remote file's validators, whose
ETag enters the manifest fingerprint).
Records are addressed by key, ``shard << 32 | row``. Remote shards are read from verified
local copies (:mod:`pipeline.io`), with the same fingerprint as the same bytes read locally;
remote Parquet shards, with ``io_options["remote_read"] = "range"``, in place by byte range,
identified by their server's ETag and size (``ShardIdentity.REMOTE_VERSION``). Megatron
indexed datasets and OLMo-core token files are pre-tokenized: their tokenizer is declared
(``TokenDeclaration``) and their records are read as token ids.

Design: docs/design/pipeline_datasets.md
"""

from pipeline.dataset.bad_records import BadRecordPolicy
from pipeline.dataset.dataset import Dataset, ExhaustedPolicy
from pipeline.dataset.pretokenized import TokenDeclaration, TokenDtype
from pipeline.dataset.record_key import (
    RECORD_KEY_SHIFT,
    RecordPointer,
    record_keys,
    split_record_keys,
)
from pipeline.dataset.shard import ShardIdentity, ShardMetadata

__all__ = [
    "RECORD_KEY_SHIFT",
    "BadRecordPolicy",
    "Dataset",
    "ExhaustedPolicy",
    "RecordPointer",
    "ShardIdentity",
    "ShardMetadata",
    "TokenDeclaration",
    "TokenDtype",
    "record_keys",
    "split_record_keys",
]
