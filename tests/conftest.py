"""Shared fixtures: a real multi-domain corpus built from local text, and a plan over it."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.local_corpus import build_local_corpus
from pipeline import Dataset, Pipeline, WorkSource


@pytest.fixture(scope="session")
def zephon_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private cache dir for shard indexes, so tests never share state with the user's."""
    return tmp_path_factory.mktemp("zephon-cache")


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """Three real domains (code, docs and a third prose-like domain), about 3 MB each at most."""
    return build_local_corpus(tmp_path_factory.mktemp("corpus"), max_bytes_per_domain=3_000_000)


@pytest.fixture(scope="session")
def datasets(corpus: dict[str, list[Path]], zephon_cache: Path) -> list[Dataset]:
    """One Dataset per corpus domain."""
    return [
        Dataset(name, [str(p) for p in paths], cache_dir=zephon_cache)
        for name, paths in sorted(corpus.items())
    ]


@pytest.fixture(scope="session")
def source(datasets: list[Dataset]) -> WorkSource:
    """A calibrated three-domain plan with small chunks, so flush windows pass often."""
    names = [ds.name for ds in datasets]
    weights = dict(zip(names, (0.5, 0.3, 0.2), strict=False))
    return WorkSource(datasets, weights, seed=7, chunk_tokens=512, calibration_bytes=200_000)


def make_pipeline(
    source: WorkSource,
    *,
    lanes: int = 8,
    dp_rank: int = 0,
    dp_size: int = 1,
    microbatch_size: int | None = None,
    global_batch_size: int = 16,
    max_length: int = 64,
    parallelism: int = 0,
    runner: str = "threads",
    shuffle_buffer: int = 4,
    flush_every: int = 2,
    prefetch: int = 0,
    prefetch_steps: int = 2,
) -> Pipeline:
    """A small pipeline over ``source``; micro-batch defaults to the whole local batch."""
    local = global_batch_size // dp_size
    return (
        Pipeline(source)
        .options(
            lanes=lanes,
            dp_rank=dp_rank,
            dp_size=dp_size,
            flush_every=flush_every,
            runner=runner,
            prefetch=prefetch,
            prefetch_steps=prefetch_steps,
        )
        .tokenize(tokenizer_id="gpt2", field="text", parallelism=parallelism)
        .pack_flat(max_length=max_length, algorithm="wrap")
        .shuffle(buffer_size=shuffle_buffer, seed=3)
        .batch(microbatch_size=microbatch_size or local, global_batch_size=global_batch_size)
    )
