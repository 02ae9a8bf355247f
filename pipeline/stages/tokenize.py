"""``tokenize``: the stateless worker function that turns a work chunk into tokens.

A worker reads the chunk's records (in chunk order), encodes each text with
the run's tokenizer (special-token strings in the data are plain text) and
appends EOS to every document. It holds no state, so any number of workers
may run it, in threads or processes, in any order; the lane re-orders results
by chunk sequence number before the packer sees them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pipeline.dataset import Dataset
from pipeline.errors import StageError
from pipeline.processing import Decontaminator
from pipeline.stages.pack import TokenizedChunk
from pipeline.tokenizer import Tokenizer, load_tokenizer


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

    A process worker receives this object once and loads the tokenizer there
    (by id, from the provisioned file) instead of pickling it.
    """

    def __init__(
        self,
        datasets: Sequence[Dataset],
        tokenizer_id: str,
        decontaminator: Decontaminator | None = None,
    ) -> None:
        self.datasets = list(datasets)
        self.tokenizer_id = tokenizer_id
        self.decontaminator = decontaminator
        """Drops records that are scored documents (None: no document is scored)."""
        self._tokenizer: Tokenizer | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_tokenizer": None}

    def __call__(self, chunk: WorkChunk) -> TokenizedChunk:
        """Read and tokenize every record of ``chunk``; errors name the record pointer."""
        began = time.perf_counter()
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.tokenizer_id)
        texts, text_bytes = _read_in_order(chunk, self.datasets)
        sources = chunk.datasets.astype(np.int16, copy=True)
        removed = np.zeros(0, dtype=np.int16)
        if self.decontaminator is not None and self.decontaminator.digests:
            keep = np.fromiter(
                (self.decontaminator.apply(t) is not None for t in texts), bool, len(texts)
            )
            if not keep.all():
                removed = sources[~keep]
                texts = [t for t, k in zip(texts, keep.tolist(), strict=True) if k]
                sources = sources[keep]
        overlapping = np.zeros(0, dtype=np.int16)
        if self.decontaminator is not None and self.decontaminator.ngrams:
            mask = np.fromiter(map(self.decontaminator.overlaps, texts), bool, len(texts))
            overlapping = sources[mask]
        try:
            encoded = self._tokenizer.encode_arrays(texts)
        except Exception as exc:  # name the chunk's first record; the encoder gives no finer detail
            raise StageError("tokenize", *first_pointer(chunk, self.datasets), exc) from exc
        lengths = np.fromiter((len(ids) + 1 for ids in encoded), dtype=np.int64, count=len(encoded))
        # One concatenate of [ids_0, EOS, ids_1, EOS, ...]; ids < 2**31, so the uint32
        # result reinterpreted as int32 holds the same values.
        pieces = [np.array([self._tokenizer.eos_id], dtype=np.uint32)] * (2 * len(encoded))
        pieces[0::2] = encoded
        tokens = np.concatenate(pieces).view(np.int32) if pieces else np.zeros(0, np.int32)
        return TokenizedChunk(
            tokens=tokens,
            doc_lengths=lengths,
            doc_sources=sources,
            removed=removed,
            overlapping=overlapping,
            text_bytes=text_bytes,
            busy_s=time.perf_counter() - began,
        )


def first_pointer(
    chunk: WorkChunk, datasets: Sequence[Dataset]
) -> tuple[str, tuple[str, int, int]]:
    """Dataset name and record pointer of the chunk's first record (for error messages)."""
    ds = datasets[int(chunk.datasets[0])]
    return ds.name, ds.pointer(int(chunk.records[0])).as_tuple()


def _read_in_order(chunk: WorkChunk, datasets: Sequence[Dataset]) -> tuple[list[str], int]:
    """Read the chunk's texts (one batched read per dataset) in chunk order, and their bytes."""
    dataset_ids = chunk.datasets.tolist()
    first = dataset_ids[0] if dataset_ids else 0
    if dataset_ids.count(first) == len(dataset_ids):  # one dataset: no reordering to do
        return read_dataset(datasets[first], chunk.records)
    texts: list[str] = [""] * len(dataset_ids)
    text_bytes = 0
    for ds_index in sorted(set(dataset_ids)):
        positions = np.flatnonzero(chunk.datasets == ds_index)
        got, got_bytes = read_dataset(datasets[ds_index], chunk.records[positions])
        for pos, text in zip(positions.tolist(), got, strict=True):
            texts[pos] = text
        text_bytes += got_bytes
    return texts, text_bytes


def read_dataset(ds: Dataset, records: np.ndarray) -> tuple[list[str], int]:
    """Texts and UTF-8 bytes of ``records`` of one dataset; a failure names its record."""
    try:
        return ds.read_records_and_bytes(records)
    except Exception as exc:
        raise StageError("read", ds.name, _failing_pointer(ds, records.tolist()), exc) from exc


def _failing_pointer(ds: Dataset, records: list[int]) -> tuple[str, int, int]:
    """Find the first record of a failed batched read by reading them one at a time."""
    for record in records:
        try:
            ds.read_records([record])
        except Exception:
            return ds.pointer(record).as_tuple()
    return ds.pointer(records[0]).as_tuple()
