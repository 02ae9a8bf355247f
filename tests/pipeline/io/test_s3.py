"""Datasets of shards in S3 (``s3://bucket/prefix/*.parquet``, ``.jsonl.zst``) read through
s3fs from a real S3 endpoint on 127.0.0.1 (moto's server behind a proxy that logs every
request): the bucket listed by a glob, one download per shard for every run of the machine,
contracts told apart by ETag without a download, and no credentials in URLs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.object_store import ObjectStore, local_object_store
from pipeline import Pipeline, WorkSource
from pipeline.dataset import Dataset
from pipeline.errors import ConfigError
from pipeline.tokenizer import load_tokenizer
from tests.support.pipelines import make_pipeline
from tests.support.s3_shards import (
    CACHE_ON,
    REPLACED_KEY,
    jsonl_zst_bytes,
    one_shard_pipeline,
    parquet_bytes,
    runs_around_a_replacement,
)


@pytest.fixture(scope="module")
def store() -> Iterator[ObjectStore]:
    with local_object_store() as store:
        yield store


def put_corpus(store: ObjectStore, prefix: str) -> dict[str, bytes]:
    """Two Parquet shards and a JSONL.zst one under ``prefix``; returns key -> bytes."""
    objects = {
        f"{prefix}/part-0.parquet": parquet_bytes(f"{prefix}0"),
        f"{prefix}/part-1.parquet": parquet_bytes(f"{prefix}1"),
        f"{prefix}/part-2.jsonl.zst": jsonl_zst_bytes(f"{prefix}2"),
    }
    for key, data in objects.items():
        store.put(key, data)
    return objects


def s3_pipeline(store: ObjectStore, prefix: str, cache: Path) -> Pipeline:
    """A run's pipeline over every shard under ``prefix`` (a glob), the IO cache shared."""
    datasets = [
        Dataset("web", store.url(f"{prefix}/*.parquet"), cache_dir=cache, io_options=CACHE_ON),
        Dataset("code", store.url(f"{prefix}/*.jsonl.zst"), cache_dir=cache, io_options=CACHE_ON),
    ]
    source = WorkSource(
        datasets, {"web": 1.0, "code": 1.0}, seed=3, chunk_tokens=48, holdout_bytes=0
    )
    return make_pipeline(source)


def test_a_glob_lists_the_bucket(store: ObjectStore, tmp_path: Path) -> None:
    put_corpus(store, "glob")
    store.put("glob/deeper/part-9.parquet", parquet_bytes("deeper"))
    parquet = Dataset("web", store.url("glob/*.parquet"), cache_dir=tmp_path)
    assert parquet.shards == [store.url("glob/part-0.parquet"), store.url("glob/part-1.parquet")]
    everything = Dataset("all", store.url("glob/**"), cache_dir=tmp_path)
    assert len(everything.shards) == 4
    assert Dataset("code", store.url("glob/*.jsonl.zst"), cache_dir=tmp_path).shards == [
        store.url("glob/part-2.jsonl.zst")
    ]
    with pytest.raises(ConfigError, match=r"glob/\*\.jsonl' matches no files"):
        Dataset("none", store.url("glob/*.jsonl"), cache_dir=tmp_path)


def test_two_runs_download_each_shard_once(store: ObjectStore, tmp_path: Path) -> None:
    """The plan asks for each object's metadata only; the first run downloads each shard it
    reads once, and a second run on the machine reads them from the shared cache."""
    objects = put_corpus(store, "shared")
    tokenizer = load_tokenizer("gpt2")
    store.proxy.reset()
    first = s3_pipeline(store, "shared", tmp_path / "cache")
    first.contract()  # the plan: a listing and a HEAD per shard
    assert all(store.object_gets(key) == 0 for key in objects)
    assert store.proxy.bytes_sent_to_clients < sum(map(len, objects.values()))
    first.source.calibrate(tokenizer)
    batches = [batch.lane_digests for _, batch in zip(range(3), first, strict=False)]
    assert all(store.object_gets(key) == 1 for key in objects)  # every shard read, once

    store.proxy.reset()
    second = s3_pipeline(store, "shared", tmp_path / "cache")
    assert second.contract_fingerprint() == first.contract_fingerprint()
    second.source.calibrate(tokenizer)
    again = [batch.lane_digests for _, batch in zip(range(3), second, strict=False)]
    assert all(store.object_gets(key) == 0 for key in objects)  # no download: validated copies
    assert again == batches
    assert second.shards_read() == first.shards_read()


def test_a_replaced_object_changes_the_contract_without_a_download(
    store: ObjectStore, tmp_path: Path
) -> None:
    """An object replaced by one of the same size: its ETag changes the plan's manifest, so
    the two runs' contracts differ, and the shard each read records other content."""
    store.put(REPLACED_KEY, parquet_bytes("before"))
    contract = one_shard_pipeline(store, tmp_path / "plan").contract_fingerprint()
    assert len(parquet_bytes("after_")) == len(parquet_bytes("before"))  # sizes cannot tell
    store.put(REPLACED_KEY, parquet_bytes("after_"))
    store.proxy.reset()
    assert one_shard_pipeline(store, tmp_path / "plan").contract_fingerprint() != contract
    assert store.object_gets(REPLACED_KEY) == 0  # told apart by the ETag, without a download

    before, after = runs_around_a_replacement(store, tmp_path)
    assert before.contract_fingerprint() != after.contract_fingerprint()
    read_before, read_after = before.shards_read()["web"]["0"], after.shards_read()["web"]["0"]
    assert read_before["file"] == read_after["file"] == "part-0.parquet"
    assert read_before["sha256"] != read_after["sha256"]


@pytest.mark.parametrize(
    "url", ["s3://AKIAEXAMPLE:s3cr3t-sentinel@bucket/a.parquet", "s3://AKIAEXAMPLE@bucket/x/*"]
)
def test_credentials_in_a_url_are_refused_unshown(url: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"credentials in a URL are refused") as refused:
        Dataset("web", url, cache_dir=tmp_path)
    message = str(refused.value)
    assert "s3cr3t-sentinel" not in message and "AKIAEXAMPLE" not in message
    assert "s3://***@bucket/" in message and "AWS_SECRET_ACCESS_KEY" in message
