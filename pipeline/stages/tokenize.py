"""``tokenize``: the stateless worker function that turns a work chunk into tokens.

A worker reads the chunk's records (in chunk order), encodes each text with
the run's tokenizer (``encode_ordinary``: special-token strings in the data are
plain text) and appends EOS to every document. It holds no state, so any number
of workers may run it in any order; the lane re-orders results by chunk
sequence number before the packer sees them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.dataset import Dataset
from pipeline.errors import StageError
from pipeline.stages.pack import TokenizedChunk
from pipeline.tokenizer import Tokenizer


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
    """int64, global record index within its dataset."""


def tokenize_chunk(
    chunk: WorkChunk, datasets: Sequence[Dataset], tokenizer: Tokenizer
) -> TokenizedChunk:
    """Read and tokenize every record of ``chunk``; errors name the record pointer."""
    texts = _read_in_order(chunk, datasets)
    try:
        encoded = tokenizer.encode_batch(texts)
    except Exception as exc:  # name the chunk's first record; the encoder gives no finer detail
        ds = datasets[int(chunk.datasets[0])]
        raise StageError(
            "tokenize", ds.name, ds.pointer(int(chunk.records[0])).as_tuple(), exc
        ) from exc
    eos = tokenizer.eos_id
    lengths = np.fromiter((len(ids) + 1 for ids in encoded), dtype=np.int64, count=len(encoded))
    flat: list[int] = []
    for ids in encoded:
        flat.extend(ids)
        flat.append(eos)
    return TokenizedChunk(
        tokens=np.asarray(flat, dtype=np.int32),
        doc_lengths=lengths,
        doc_sources=chunk.datasets.astype(np.int16, copy=True),
    )


def _read_in_order(chunk: WorkChunk, datasets: Sequence[Dataset]) -> list[str]:
    """Read the chunk's texts, one batched read per dataset, back in chunk order."""
    texts: list[str] = [""] * len(chunk.records)
    for ds_index in np.unique(chunk.datasets):
        positions = np.flatnonzero(chunk.datasets == ds_index)
        ds = datasets[int(ds_index)]
        records = [int(r) for r in chunk.records[positions]]
        try:
            got = ds.read_texts(records)
        except Exception as exc:
            raise StageError("read", ds.name, _failing_pointer(ds, records), exc) from exc
        for pos, text in zip(positions, got, strict=True):
            texts[int(pos)] = text
    return texts


def _failing_pointer(ds: Dataset, records: list[int]) -> tuple[str, int, int]:
    """Find the first record of a failed batched read by reading them one at a time."""
    for record in records:
        try:
            ds.read_texts([record])
        except Exception:
            return ds.pointer(record).as_tuple()
    return ds.pointer(records[0]).as_tuple()
