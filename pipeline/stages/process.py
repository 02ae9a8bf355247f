"""``process``: the stateless worker that reads, processes and tokenizes a lane's next
records of one dataset (a :class:`FeedBatch`).

Used when the pipeline has a processing chain: each record goes through the chain (the
decontamination first), and the records it keeps are tokenized, EOS appended. The plan then
draws only kept records, by their real token counts, so token shares hold on the tokens that
survive (docs/design/pipeline_processing.md). Like ``tokenize``, it holds no state: any
number of workers may run it in any order.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.dataset import Dataset
from pipeline.stages.encode import Encoder


@dataclass(frozen=True, slots=True)
class FeedBatch:
    """Consecutive records of one dataset in one lane's stream."""

    dataset: int
    """Dataset index."""
    records: np.ndarray
    """int64 record keys, in stream order."""


@dataclass(slots=True)
class ProcessedRecords:
    """What the chain kept of a :class:`FeedBatch`, tokenized."""

    tokens: list[np.ndarray | None]
    """Per record: int32 tokens ending with EOS, or None if the chain dropped it."""
    dropped_by: np.ndarray
    """int16 per record: the index of the step that dropped it, or ``KEPT``."""
    overlapping: np.ndarray
    """bool per record: kept, and sharing a word n-gram with a scored document (counted
    only with ``overlap_ngram``)."""
    text_bytes: int
    """UTF-8 bytes read."""
    busy_s: float
    """Seconds the worker spent."""
    encoded: int
    """Records whose text was read and tokenized (the others' came from the token cache)."""


class ProcessWork:
    """The process stage's work function; picklable (each process loads its tokenizer).

    Each record's outcome comes from ``encoder`` (read, run through the chain and tokenized,
    or answered by the token cache)."""

    def __init__(self, datasets: Sequence[Dataset], encoder: Encoder) -> None:
        self.datasets = list(datasets)
        self.encoder = encoder

    def __call__(self, batch: FeedBatch) -> ProcessedRecords:
        """Read, process and tokenize ``batch``; errors name the record."""
        began = time.perf_counter()
        eos = np.array([self.encoder.tokenizer().eos_id], dtype=np.uint32)
        got = self.encoder.outcomes(self.datasets[batch.dataset], batch.records)
        tokens = [
            None if ids is None else np.concatenate((ids, eos)).view(np.int32) for ids in got.tokens
        ]
        return ProcessedRecords(
            tokens,
            got.dropped_by,
            got.overlapping,
            got.text_bytes,
            time.perf_counter() - began,
            got.encoded,
        )

    def close(self) -> None:
        """Write what the encoder holds back (the token cache's pending entries)."""
        self.encoder.close()
