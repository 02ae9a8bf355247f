"""Order v2: only the shards a run reaches are read; every guarantee of the plan holds."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline import DataError, Dataset, WorkSource, load_tokenizer, merge_states
from pipeline.dataset import split_record_keys
from pipeline.formats import JsonlFormat, ShardIndex
from tests.support.helpers import run_ranks, write_jsonl
from tests.support.processes import forked_process_context

SHARDS = 120
RECORDS_PER_SHARD = 25


def many_shards(root: Path, *, exhausted: str = "repeat", shards: int = SHARDS) -> Dataset:
    """``shards`` JSONL shards of ``RECORDS_PER_SHARD`` records of varying length."""
    for s in range(shards):
        texts = [f"shard {s} record {i} " * (1 + (3 * i + s) % 7) for i in range(RECORDS_PER_SHARD)]
        write_jsonl(root / f"part-{s:04d}.jsonl", texts)
    return Dataset("web", str(root / "part-*.jsonl"), cache_dir=root / "cache", exhausted=exhausted)


def plan(ds: Dataset, **kwargs: object) -> WorkSource:
    kwargs = {"seed": 3, "chunk_tokens": 48, "holdout_bytes": 500, "holdout_docs": 8, **kwargs}
    source = WorkSource([ds], {"web": 1.0}, shard_window=16, **kwargs)
    source.calibrate(load_tokenizer("gpt2"))
    return source


def lane_records(source: WorkSource, lane: int, lanes: int, count: int) -> list[int]:
    lane_plan = source.lane_plan(lane, lanes)
    keys: list[int] = []
    while len(keys) < count and (chunk := lane_plan.next_chunk()) is not None:
        keys += chunk.records.tolist()
    return keys[:count]


def test_a_run_indexes_the_windows_it_reaches_not_the_corpus(tmp_path: Path) -> None:
    ds = many_shards(tmp_path)
    source = plan(ds, holdout_bytes=0, calibration_bytes=2000)
    for lane in range(4):
        lane_records(source, lane, 4, 40)
    indexed = ds.report()["shards_indexed"]
    # the calibration shards, the first window (16-23 shards) and the window ahead
    assert indexed <= 16 + 2 * 23
    assert indexed < SHARDS


def test_stop_visits_every_training_record_once_and_never_a_held_out_one(tmp_path: Path) -> None:
    ds = many_shards(tmp_path, exhausted="stop", shards=40)
    source = plan(ds)
    held = set(source.heldout_records(0).tolist())
    assert len(held) == 8
    seen = Counter(k for lane in range(3) for k in lane_records(source, lane, 3, 10**6))
    assert set(seen.values()) == {1}
    assert set(seen) == set(source.training_records(0).tolist())
    assert not held & set(seen)
    assert len(seen) + len(held) == 40 * RECORDS_PER_SHARD


def test_each_epoch_is_a_new_permutation_of_the_training_records(tmp_path: Path) -> None:
    ds = many_shards(tmp_path, shards=40)
    source = plan(ds, holdout_bytes=0)
    n = 40 * RECORDS_PER_SHARD
    stream = [source.orders[0].key_at(p) for p in range(3 * n)]
    epochs = [stream[e * n : (e + 1) * n] for e in range(3)]
    assert all(sorted(e) == sorted(source.training_records(0).tolist()) for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]


def test_a_lane_mixes_records_of_many_shards(tmp_path: Path) -> None:
    """Every 200 consecutive records of a lane come from at least 12 of a window's 16+ shards."""
    ds = many_shards(tmp_path)
    source = plan(ds, holdout_bytes=0)
    keys = lane_records(source, 1, 4, 1200)
    shards = split_record_keys(keys)[0]
    distinct = [len(set(shards[i : i + 200].tolist())) for i in range(0, len(keys) - 200, 50)]
    assert min(distinct) >= 12


def test_the_order_depends_on_the_seed_and_resumes_from_a_state(tmp_path: Path) -> None:
    ds = many_shards(tmp_path)
    first, other = plan(ds, seed=1), plan(ds, seed=2)
    assert lane_records(first, 0, 2, 50) != lane_records(other, 0, 2, 50)
    lane_plan = first.lane_plan(1, 2)
    for _ in range(5):
        lane_plan.next_chunk()
    state = json.loads(json.dumps(lane_plan.state()))
    expected = [lane_plan.next_chunk().records.tolist() for _ in range(5)]
    reopened = Dataset("web", ds.shards, cache_dir=tmp_path / "cache")  # as a new process
    resumed_plan = plan(reopened, seed=1).lane_plan(1, 2, state)
    assert [resumed_plan.next_chunk().records.tolist() for _ in range(5)] == expected


def test_global_batches_are_identical_at_every_dp_size_and_across_a_resume(tmp_path: Path) -> None:
    source = plan(many_shards(tmp_path), chunk_tokens=64)
    reference = run_ranks(source, 1, 8, parallelism=0, runner="inline")
    for dp in (2, 4, 8):
        assert run_ranks(source, dp, 8).digests == reference.digests
    first = run_ranks(source, 4, 3)
    rest = run_ranks(source, 2, 5, state=merge_states(first.states))
    assert first.digests + rest.digests == reference.digests


def test_the_contract_reads_metadata_only_and_names_the_order(tmp_path: Path) -> None:
    ds = many_shards(tmp_path)
    contract = WorkSource([ds], {"web": 1.0}, shard_window=16).contract()
    assert contract["order"] == {"version": "v2", "shard_window": 16, "calibration_bytes": 1 << 20}
    assert contract["datasets"][0]["fingerprint"] == ds.manifest_fingerprint
    assert ds.report()["shards_indexed"] == 0
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in ds.shards:  # the same files elsewhere: the same contract
        (copy / path.name).write_bytes(path.read_bytes())
    moved = Dataset("web", str(copy / "part-*.jsonl"), cache_dir=tmp_path / "cache")
    assert moved.manifest_fingerprint == ds.manifest_fingerprint


def test_a_shard_changed_between_the_plan_and_its_read_fails_naming_it(tmp_path: Path) -> None:
    ds = many_shards(tmp_path, shards=4)
    ds.shard_metadata()  # the plan
    victim = ds.shards[2]
    with open(victim, "a") as f:
        f.write(json.dumps({"text": "an extra record"}) + "\n")
    assert ds.read_records([0]) == ["shard 0 record 0 "]  # shards not edited read as planned
    with pytest.raises(DataError, match=rf"{victim.name} changed between the plan and its first"):
        ds.read_records([2 << 32])


def test_a_shard_read_is_hashed_once_and_recorded(tmp_path: Path) -> None:
    ds = many_shards(tmp_path, shards=4)
    ds.read_records([(1 << 32) | 3])
    fingerprints = ds.read_shard_fingerprints()
    assert list(fingerprints) == [1]
    assert fingerprints[1] == hashlib.sha256(ds.shards[1].read_bytes()).hexdigest()
    assert os.path.exists(tmp_path / "cache" / "index")
    assert np.all(ds.shard_index(1).text_bytes > 0)


def test_a_restore_far_into_the_corpus_indexes_no_shard_it_has_passed(tmp_path: Path) -> None:
    """The plan state carries each dataset's block (a cursor): a new process places the
    lane's next record without counting the records of the windows before it."""
    source = plan(many_shards(tmp_path), holdout_bytes=0, calibration_bytes=2000)
    lane_plan = source.lane_plan(0, 2)
    drawn = 0
    while drawn < 1200:  # position 2,400 of 3,000: the fifth of seven windows
        drawn += len(lane_plan.next_chunk().records)
    state = json.loads(json.dumps(lane_plan.state()))
    epoch, block, start, total = state["cursors"]["web"]
    assert (epoch, total) == (0, -1) and block >= 3 and start > 0
    expected = [lane_plan.next_chunk().records.tolist() for _ in range(5)]
    reopened = Dataset("web", str(tmp_path / "part-*.jsonl"), cache_dir=tmp_path / "cache")
    restored = WorkSource(
        [reopened], {"web": 1.0}, seed=3, chunk_tokens=48, calibration_bytes=2000, shard_window=16
    )
    restored.set_calibration(source.tokens_per_byte)
    resumed = restored.lane_plan(0, 2, state)
    assert [resumed.next_chunk().records.tolist() for _ in range(5)] == expected
    # the calibration shards, the window of the next records and the one ahead: not the
    # 60-odd shards of the windows passed
    assert reopened.report()["shards_indexed"] <= 16 + 2 * 23 < SHARDS


def _index_first_window(root: str, log: str, barrier: Any) -> None:
    """A rank's cold start: count the first window; log every index this process builds."""
    build = JsonlFormat.build_index

    def logged(self: JsonlFormat, path: Path, field: str) -> ShardIndex:
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {Path(path).name}\n")
        time.sleep(0.05)  # a shard worth indexing: the other ranks reach it meanwhile
        return build(self, path, field)

    JsonlFormat.build_index = logged  # type: ignore[method-assign]
    ds = Dataset("web", str(Path(root) / "part-*.jsonl"), cache_dir=Path(root) / "cache")
    source = WorkSource([ds], {"web": 1.0}, seed=3, shard_window=16)
    barrier.wait()
    source.orders[0].key_at(0)
    source.orders[0].close()


def test_ranks_starting_together_index_each_shard_once_and_share_the_work(
    tmp_path: Path,
) -> None:
    many_shards(tmp_path, shards=24)
    old = time.time() - 60  # not modified just now: hashes go to the stat cache
    for path in tmp_path.glob("part-*.jsonl"):
        os.utime(path, (old, old))
    log = tmp_path / "builds.log"
    ctx = forked_process_context(__name__)
    barrier = ctx.Barrier(3)
    procs = [
        ctx.Process(target=_index_first_window, args=(str(tmp_path), str(log), barrier))
        for _ in range(3)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    builds = [line.split() for line in log.read_text().splitlines()]
    assert sorted(name for _, name in builds) == sorted(f"part-{s:04d}.jsonl" for s in range(24))
    assert len({pid for pid, _ in builds}) >= 2  # the work was shared, not queued
