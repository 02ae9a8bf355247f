"""``tokenize``: the stateless worker function that turns a work chunk into tokens.

A worker gets the outcome of each of the chunk's records from its encoder (read,
decontaminated and encoded with the run's tokenizer, special-token strings in the data
being plain text; or answered by the token cache) and appends EOS to every document. It
holds no state, so any number of workers may run it, in threads or processes, in any order;
the lane re-orders results by chunk sequence number before the packer sees them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pipeline.dataset import Dataset
from pipeline.processing import KEPT
from pipeline.stages.encode import Encoder
from pipeline.stages.pack import TokenizedChunk


@dataclass(frozen=True, slots=True)
class WorkChunk:
    """A small ordered list of record pointers planned for one lane."""

    lane: int
    """Lane this chunk belongs to."""
    index: int
    """Sequence number of the chunk within its lane."""
    datasets: np.ndarray
    """int16, dataset index of each record."""
    records: np.ndarray
    """int64, record key within its dataset (``shard << 32 | row``, see ``record_keys``)."""
    tokenized: TokenizedChunk | None = None
    """The chunk's tokens, when a processed plan made them already (no work left to do)."""
    repeated: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int16))
    """int16, the dataset index of each record drawn past its dataset's first epoch (its
    second reading or later), counted when the chunk is taken."""


class TokenizeWork:
    """The tokenize stage's work function; picklable, so process workers can run it.

    Each record's outcome comes from ``encoder`` (read, decontaminated and tokenized, or
    answered by the token cache); a process worker receives this object once and loads the
    tokenizer there (by id, from the provisioned file) instead of pickling it.
    """

    def __init__(self, datasets: Sequence[Dataset], encoder: Encoder) -> None:
        self.datasets = list(datasets)
        self.encoder = encoder

    def __call__(self, chunk: WorkChunk) -> TokenizedChunk:
        """Read and tokenize every record of ``chunk``; errors name the record pointer."""
        began = time.perf_counter()
        eos = np.array([self.encoder.tokenizer().eos_id], dtype=np.uint32)
        sources = chunk.datasets.astype(np.int16, copy=True)
        tokens: list[np.ndarray | None] = [None] * len(sources)
        dropped = np.zeros(len(sources), dtype=bool)
        overlapping = np.zeros(len(sources), dtype=bool)
        text_bytes = encoded = 0
        for ds_index, positions in _by_dataset(sources):
            got = self.encoder.outcomes(self.datasets[ds_index], chunk.records[positions])
            for pos, ids in zip(positions.tolist(), got.tokens, strict=True):
                tokens[pos] = ids
            dropped[positions] = got.dropped_by != KEPT
            overlapping[positions] = got.overlapping
            text_bytes += got.text_bytes
            encoded += got.encoded
        kept = [ids for ids in tokens if ids is not None]
        lengths = np.fromiter((len(ids) + 1 for ids in kept), dtype=np.int64, count=len(kept))
        # One concatenate of [ids_0, EOS, ids_1, EOS, ...]; ids < 2**31, so the uint32
        # result reinterpreted as int32 holds the same values.
        pieces = [eos] * (2 * len(kept))
        pieces[0::2] = kept
        return TokenizedChunk(
            tokens=np.concatenate(pieces).view(np.int32) if pieces else np.zeros(0, np.int32),
            doc_lengths=lengths,
            doc_sources=sources[~dropped],
            removed=sources[dropped],
            overlapping=sources[overlapping],
            text_bytes=text_bytes,
            encoded=encoded,
            busy_s=time.perf_counter() - began,
        )

    def close(self) -> None:
        """Write what the encoder holds back (the token cache's pending entries)."""
        self.encoder.close()


def first_pointer(
    chunk: WorkChunk, datasets: Sequence[Dataset]
) -> tuple[str, tuple[str, int, int]]:
    """Dataset name and record pointer of the chunk's first record (for error messages)."""
    ds = datasets[int(chunk.datasets[0])]
    return ds.name, ds.pointer(int(chunk.records[0])).as_tuple()


def _by_dataset(sources: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """Each dataset of a chunk and its records' positions, in dataset order."""
    first = int(sources[0]) if len(sources) else 0
    if (sources == first).all():  # one dataset: no grouping to do
        return [(first, np.arange(len(sources)))] if len(sources) else []
    return [(d, np.flatnonzero(sources == d)) for d in np.unique(sources).tolist()]
