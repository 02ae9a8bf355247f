"""The engine's performance knobs never change the data; failures surface and clean up."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline import Dataset, StageError, StateError, WorkSource, load_tokenizer
from tests.support.helpers import run_ranks
from tests.support.pipelines import make_pipeline

STEPS = 6


def leaked_workers() -> list:
    """Process workers still alive (children of this test process)."""
    deadline = time.monotonic() + 5
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return multiprocessing.active_children()


@pytest.mark.parametrize(
    "knobs",
    [
        {"runner": "processes", "parallelism": 2, "dp_size": 2},
        {"runner": "threads", "parallelism": 3, "dp_size": 4, "prefetch": 1, "prefetch_steps": 0},
        {"runner": "threads", "parallelism": 2, "dp_size": 1, "prefetch": 7, "prefetch_steps": 5},
    ],
)
def test_runner_and_prefetch_knobs_keep_the_data(source: WorkSource, knobs: dict) -> None:
    reference = run_ranks(source, 1, STEPS, parallelism=0, runner="inline")
    knobs = dict(knobs)
    run = run_ranks(source, knobs.pop("dp_size"), STEPS, **knobs)
    for step in range(STEPS):
        np.testing.assert_array_equal(run.tokens[step], reference.tokens[step])
    assert run.digests == reference.digests
    assert not leaked_workers()


def corrupt_after_indexing(tmp_path: Path) -> WorkSource:
    """A source whose shard's first line is damaged after it was indexed and calibrated."""
    shard = tmp_path / "a.jsonl"
    shard.write_text(
        "".join(json.dumps({"text": f"document number {i} " * 20}) + "\n" for i in range(50))
    )
    ds = Dataset("a", [str(shard)], cache_dir=tmp_path / "cache")
    source = WorkSource([ds], {"a": 1.0}, chunk_tokens=64)
    source.calibrate(load_tokenizer("gpt2"))
    shard.write_bytes(b"{garbage" + shard.read_bytes()[8:])
    return source


@pytest.mark.parametrize("runner", ["threads", "processes"])
def test_worker_error_names_record_and_cleans_up(tmp_path: Path, runner: str) -> None:
    source = corrupt_after_indexing(tmp_path)
    threads_before = threading.active_count()
    pipeline = make_pipeline(source, lanes=2, global_batch_size=2, parallelism=2, runner=runner)
    with pytest.raises(
        StageError, match=r"stage 'read' failed on dataset 'a', record pointer \('a', 0, \d+\)"
    ):
        for _ in pipeline:
            pass
    assert threading.active_count() == threads_before
    assert not leaked_workers()


def test_killed_worker_process_surfaces_as_an_error(source: WorkSource) -> None:
    pipeline = make_pipeline(
        source, parallelism=2, runner="processes", global_batch_size=8, max_length=256
    )
    batches = iter(pipeline)
    next(batches)
    for child in multiprocessing.active_children():
        os.kill(child.pid, signal.SIGKILL)
    began = time.monotonic()
    with pytest.raises(
        StageError,
        match=r"stage 'tokenize' failed on dataset '\w+', record pointer .*(terminated|Broken)",
    ):
        for _ in range(10_000):
            next(batches)
    assert time.monotonic() - began < 60, "a dead worker must not hang the pipeline"
    assert not leaked_workers()


@pytest.mark.parametrize("runner", ["threads", "processes"])
def test_close_and_early_stop_leave_nothing_running(source: WorkSource, runner: str) -> None:
    threads_before = set(threading.enumerate())
    with make_pipeline(source, parallelism=2, runner=runner) as pipeline:
        batches = iter(pipeline)
        next(batches)
        assert set(threading.enumerate()) - threads_before
    batches.close()
    # None of the pipeline's threads (workers, step prefetch, the plan's look-ahead) is left;
    # threads that other tests left may have ended meanwhile.
    assert not set(threading.enumerate()) - threads_before
    assert not leaked_workers()


def test_ready_data_stays_bounded(source: WorkSource) -> None:
    """The pipeline holds at most its buffers and in-flight chunks, however long it runs."""
    buffer, max_length = 8, 64
    pipeline = make_pipeline(
        source, global_batch_size=8, shuffle_buffer=buffer, max_length=max_length
    )
    batches = iter(pipeline)
    next(batches)  # calibrates the plan
    # A chunk closes once its estimated tokens reach chunk_tokens, so it holds at most that
    # plus one record (estimates can be off: allow twice the largest record's estimate).
    largest = max(int(source.chunk_costs(d).max()) for d in range(len(source.datasets)))
    per_chunk = (source.chunk_tokens + 2 * largest) // max_length + 1
    for _ in range(300):
        next(batches)
        for lane in pipeline._lanes:
            assert lane.available() <= buffer + per_chunk + 2
            assert len(lane._inflight) <= lane._prefetch
    batches.close()


def test_counters_add_up(source: WorkSource) -> None:
    pipeline = make_pipeline(source, parallelism=2, microbatch_size=4)
    batches = iter(pipeline)
    for _ in range(40):
        next(batches)
    stats = pipeline.stats()
    batches.close()
    tok = stats["tokenize"]
    assert tok["records"] > 0 and tok["bytes"] > tok["tokens"] > 0 and tok["busy_s"] > 0
    assert tok["items_out"] <= tok["items_in"]
    assert stats["pack"]["tokens"] == tok["tokens"]
    assert stats["shuffle"]["items_in"] == stats["pack"]["items_out"]
    assert stats["microbatches"] == 40 and stats["steps"] == 10
    assert stats["consumer_wait_s"] >= stats["last_microbatch_wait_s"] >= 0
    assert stats["batch"]["tokens"] == sum(stats["label_tokens"].values())
    assert set(stats["skipped"]) == {ds.name for ds in source.datasets}


def test_completion_order_runs_but_refuses_a_state(source: WorkSource) -> None:
    pipeline = make_pipeline(source, parallelism=2)
    pipeline.options(ordered=False)
    batches = iter(pipeline)
    assert next(batches).is_last
    with pytest.raises(StateError, match="ordered=False"):
        pipeline.state_dict()
    batches.close()
