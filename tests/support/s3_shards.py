"""Shards in a local S3 endpoint (:mod:`benchmarks.object_store`) for the tests of S3 datasets:
small Parquet and JSONL.zst objects, and runs' pipelines before and after an object is replaced."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from benchmarks.object_store import ObjectStore
from pipeline import Pipeline, WorkSource
from pipeline.dataset import Dataset
from pipeline.tokenizer import load_tokenizer
from tests.support.pipelines import make_pipeline

CACHE_ON = {"cache": {"enabled": True}}
REPLACED_KEY = "replaced/part-0.parquet"


def parquet_bytes(tag: str, rows: int = 120) -> bytes:
    """A Parquet shard of ``rows`` short documents (as many bytes for tags of one length)."""
    out = io.BytesIO()
    texts = [f"{tag} parquet document {i} " * (1 + i % 5) for i in range(rows)]
    pq.write_table(pa.table({"text": texts}), out)
    return out.getvalue()


def jsonl_zst_bytes(tag: str, rows: int = 120) -> bytes:
    """A zstd-compressed JSONL shard of ``rows`` short documents."""
    lines = b"".join(
        orjson.dumps({"text": f"{tag} jsonl document {i} " * (1 + i % 5)}) + b"\n"
        for i in range(rows)
    )
    return zstandard.ZstdCompressor().compress(lines)


def one_shard_pipeline(store: ObjectStore, cache: Path) -> Pipeline:
    """A run's pipeline over the objects matching ``replaced/*.parquet`` (one shard)."""
    ds = Dataset("web", store.url("replaced/*.parquet"), cache_dir=cache, io_options=CACHE_ON)
    return make_pipeline(WorkSource([ds], {"web": 1.0}, seed=3, chunk_tokens=48, holdout_bytes=0))


def runs_around_a_replacement(store: ObjectStore, tmp_path: Path) -> tuple[Pipeline, Pipeline]:
    """Two runs' pipelines, each planned and past its first batch: one before and one after
    :data:`REPLACED_KEY` was replaced by an object of the same size and other text."""
    tokenizer = load_tokenizer("gpt2")
    runs = []
    for tag in ("before", "after_"):  # tags of one length: objects of one size
        store.put(REPLACED_KEY, parquet_bytes(tag))
        pipeline = one_shard_pipeline(store, tmp_path / tag)
        pipeline.contract()  # the plan
        pipeline.source.calibrate(tokenizer)
        next(iter(pipeline))
        runs.append(pipeline)
    return runs[0], runs[1]
