"""A plan over shards in S3 (a local S3 endpoint): each shard it reads is downloaded once for
every plan and run of the machine, and nothing it writes (the data spec, the experiment
record, its output and the log) holds AWS credentials."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
import s3fs

from benchmarks.object_store import local_object_store
from orchestrator.experiment import read_data_spec, write_data_spec
from orchestrator.experiment.run_record import ExperimentRecord
from orchestrator.run import api
from tests.support.s3_shards import CACHE_ON, jsonl_zst_bytes, parquet_bytes

SECRETS = {
    "AWS_ACCESS_KEY_ID": "ZEPHONSENTINELKEYID",
    "AWS_SECRET_ACCESS_KEY": "zephon-sentinel-secret-7f3a",
}


def test_a_plan_over_s3_downloads_each_shard_once_and_records_no_credentials(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.INFO)  # botocore's DEBUG log names the access key id, not Zephon
    with local_object_store() as store:
        objects = {
            "plan/part-0.parquet": parquet_bytes("plan0"),
            "plan/part-1.parquet": parquet_bytes("plan1"),
            "plan/part-2.jsonl.zst": jsonl_zst_bytes("plan2"),
        }
        for key, data in objects.items():
            store.put(key, data)
        os.environ.update(SECRETS)  # restored when the store stops
        s3fs.S3FileSystem.clear_instance_cache()
        datasets = {"web": [store.url("plan/*.parquet")], "code": [store.url("plan/*.jsonl.zst")]}
        experiment = {
            "data": {
                "datasets": datasets,
                "mixture": {"web": 1.0, "code": 1.0},
                "cache_dir": str(tmp_path / "cache"),
                "io_options": CACHE_ON,
            },
            "runs_root": str(tmp_path / "runs"),
        }
        store.proxy.reset()
        planned = api.plan(experiment, dp=1)
        # The contract needs metadata only (a listing per glob, a HEAD per object); the
        # calibration of tokens per byte downloads its sample's shards, here all, once each.
        assert all(store.object_gets(key) == 1 for key in objects)
        store.proxy.reset()
        again = api.plan(experiment, dp=1)  # a later plan, or run, of this machine
        assert all(store.object_gets(key) == 0 for key in objects)  # the cached copies
        assert again.fingerprints.contract_fingerprint == planned.fingerprints.contract_fingerprint

    write_data_spec(tmp_path / "data.json", planned.config.data)
    assert read_data_spec(tmp_path / "data.json").datasets == datasets
    assert read_data_spec(tmp_path / "data.json").io_options == CACHE_ON
    planned.folder.write_experiment(
        ExperimentRecord.new(config=planned.config.to_dict(), **planned.fingerprints.to_dict())
    )
    captured = capsys.readouterr()
    written = [
        json.dumps(planned.to_dict(), default=str),
        (tmp_path / "data.json").read_text(),
        (planned.folder.path / "experiment.json").read_text(),
        caplog.text,
        captured.out + captured.err,
    ]
    for secret in SECRETS.values():
        assert not any(secret in text for text in written)
