"""A small pipeline over a test plan, with the knobs the pipeline tests vary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline import Pipeline, WorkSource


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
    process: Sequence[Any] = (),
    overlap_ngram: int = 0,
    token_cache_dir: str | None = None,
    tokenizer: str = "gpt2",
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
            overlap_ngram=overlap_ngram,
            token_cache_dir=token_cache_dir,
        )
        .process(*process)
        .tokenize(tokenizer_id=tokenizer, field="text", parallelism=parallelism)
        .pack_flat(max_length=max_length, algorithm="wrap")
        .shuffle(buffer_size=shuffle_buffer, seed=3)
        .batch(microbatch_size=microbatch_size or local, global_batch_size=global_batch_size)
    )
