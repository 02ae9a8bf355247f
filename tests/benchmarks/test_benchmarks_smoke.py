"""Smoke test of the benchmark measurements on a tiny corpus: correctness only, no timing.

The DataLoader baseline and the Zephon pipeline measurement must run, produce
``SEQ_LEN + 1``-token sequences, and deliver about the corpus's token count
(the DataLoader once, without duplicates across workers). TorchTitan is not needed.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from benchmarks.baselines import ShardTokenStream, measure_dataloader, split_shards
from benchmarks.lanes import PipelineSpec, build_pipeline, calibrated_source, measure_pipeline
from benchmarks.workload import SEQ_LEN, Workload, prepare_workload


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    """About 200 KB of text per domain (~0.3M gpt2 tokens in all)."""
    return prepare_workload(tmp_path_factory.mktemp("bench"), max_bytes_per_domain=200_000)


def test_split_shards_partitions_the_shards(workload: Workload) -> None:
    shards = [p for paths in workload.shards.values() for p in paths]
    parts = [split_shards(shards, worker, 2) for worker in range(2)]
    assert sorted(parts[0] + parts[1]) == sorted(shards)


def test_dataloader_and_pipeline_deliver_the_corpus(workload: Workload) -> None:
    shards = sorted(p for paths in workload.shards.values() for p in paths)
    first = next(iter(ShardTokenStream(shards, SEQ_LEN)))
    assert first.shape == (SEQ_LEN + 1,) and first.dtype == torch.int64

    loader = measure_dataloader(workload, num_workers=2)
    # Each worker drops a tail of < SEQ_LEN tokens and adds one EOS per document.
    assert 0.95 < loader.tokens / workload.total_tokens < 1.05

    spec = PipelineSpec(parallelism=2)
    batch = next(iter(build_pipeline(calibrated_source(workload), spec)))
    assert batch.tokens().shape == (spec.microbatch_size, SEQ_LEN + 1)
    zephon = measure_pipeline(workload, tokens=workload.total_tokens, spec=asdict(spec))
    step_tokens = spec.global_batch_size * SEQ_LEN
    assert workload.total_tokens <= zephon.tokens <= workload.total_tokens + step_tokens


def test_workload_is_reused(workload: Workload) -> None:
    again = prepare_workload(Path(workload.work_dir), max_bytes_per_domain=200_000)
    assert again == workload
