"""The guard on runs whose shards are S3 objects (a local S3 endpoint): an object replaced
between two runs is refused, naming the shard, from the runs' own contracts and records."""

from __future__ import annotations

from pathlib import Path

from benchmarks.object_store import local_object_store
from orchestrator.guard import RefusalCode, check
from pipeline import Pipeline
from tests.support.guard_runs import MIX_A, MIX_B, codes, make_contract, make_run
from tests.support.s3_shards import runs_around_a_replacement


def test_runs_on_a_replaced_object_are_refused_naming_the_shard(tmp_path: Path) -> None:
    with local_object_store() as store:
        before, after = runs_around_a_replacement(store, tmp_path)

    def run_of(name: str, mixture: dict[str, float], pipeline: Pipeline):
        dataset = pipeline.contract()["datasets"][0]
        run = make_run(name, mixture, contract=make_contract(datasets=[dataset]))
        run.shards_read = pipeline.shards_read()
        return run

    refusals = check([run_of("a", MIX_A, before), run_of("b", MIX_B, after)])
    assert codes(refusals) == [RefusalCode.CONTRACT_MISMATCH, RefusalCode.SHARD_CHANGED]
    assert "datasets.web.fingerprint" in refusals[0].message
    changed = refusals[1]
    assert "part-0.parquet" in changed.message and "'web'" in changed.message
    assert "was changed between the runs" in changed.message
    assert changed.detail["file"] == "part-0.parquet" and changed.detail["shard"] == 0
