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
from pipeline.errors import StageError
from pipeline.processing import KEPT, Decontaminator, ProcessChain
from pipeline.stages.tokenize import read_dataset
from pipeline.tokenizer import Tokenizer, load_tokenizer


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


class ProcessWork:
    """The process stage's work function; picklable (each process loads its tokenizer)."""

    def __init__(self, datasets: Sequence[Dataset], tokenizer_id: str, chain: ProcessChain):
        self.datasets = list(datasets)
        self.tokenizer_id = tokenizer_id
        self.chain = chain
        self.decontaminator = next((s for s in chain.steps if isinstance(s, Decontaminator)), None)
        self._tokenizer: Tokenizer | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_tokenizer": None}

    def __call__(self, batch: FeedBatch) -> ProcessedRecords:
        """Read, process and tokenize ``batch``; errors name the record."""
        began = time.perf_counter()
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.tokenizer_id)
        ds = self.datasets[batch.dataset]
        texts, text_bytes = read_dataset(ds, batch.records)
        dropped_by = np.full(len(texts), KEPT, dtype=np.int16)
        overlapping = np.zeros(len(texts), dtype=bool)
        counting = self.decontaminator is not None and bool(self.decontaminator.ngrams)
        kept: list[str] = []
        for i, (text, key) in enumerate(zip(texts, batch.records.tolist(), strict=True)):
            try:
                result, step = self.chain.apply(text, ds.name)
            except Exception as exc:  # a step failed on this record: name it and the step
                raise StageError("process", ds.name, ds.pointer(key).as_tuple(), exc) from exc
            dropped_by[i] = step
            if result is not None:
                kept.append(result)
                overlapping[i] = counting and self.decontaminator.overlaps(result)
        try:
            encoded = iter(self._tokenizer.encode_arrays(kept))
        except Exception as exc:
            key = int(batch.records[0])
            raise StageError("tokenize", ds.name, ds.pointer(key).as_tuple(), exc) from exc
        eos = np.array([self._tokenizer.eos_id], dtype=np.uint32)
        tokens = [
            None if step != KEPT else np.concatenate((next(encoded), eos)).view(np.int32)
            for step in dropped_by.tolist()
        ]
        return ProcessedRecords(
            tokens, dropped_by, overlapping, text_bytes, time.perf_counter() - began
        )
