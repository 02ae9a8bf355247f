"""Per-stage counters of a pipeline, for logging "data wait" and finding bottlenecks.

Every counter is updated by the thread that owns the stage's accumulator (the
lane producer), never by workers: a worker reports its own counts and busy
time inside its result, and the lane adds them when it takes the result in
order. Reading a snapshot from another thread is safe (plain numbers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from pipeline.stages.pack import PackedSequence


@dataclass
class StageCounters:
    """Counters of one stage."""

    items_in: int = 0
    """Work items or sequences the stage received."""
    items_out: int = 0
    """Items it emitted."""
    records: int = 0
    """Records read (read/tokenize stage)."""
    tokens: int = 0
    """Tokens produced or passed on."""
    bytes: int = 0
    """UTF-8 text bytes read (read/tokenize stage)."""
    encoded: int = 0
    """Records whose text was read and tokenized; the others' tokens came from the token
    cache (read/tokenize stage)."""
    busy_s: float = 0.0
    """Seconds spent working (summed over workers for parallel stages)."""
    wait_s: float = 0.0
    """Seconds the stage's consumer waited for its output."""


@dataclass
class PipelineCounters:
    """All counters of a pipeline (see :meth:`Pipeline.stats`)."""

    tokenize: StageCounters = field(default_factory=StageCounters)
    pack: StageCounters = field(default_factory=StageCounters)
    shuffle: StageCounters = field(default_factory=StageCounters)
    batch: StageCounters = field(default_factory=StageCounters)
    padded_sequences: int = 0
    """Sequences that end in padding (one per flush window at most, per lane)."""
    label_tokens: dict[str, int] = field(default_factory=dict)
    """Tokens delivered as training labels, per dataset."""
    steps: int = 0
    """Steps handed to the consumer."""
    microbatches: int = 0
    """Micro-batches handed to the consumer."""
    consumer_wait_s: float = 0.0
    """Total seconds the consumer waited in ``next()`` for a micro-batch."""
    last_microbatch_wait_s: float = 0.0
    """Seconds the consumer waited for the latest micro-batch."""
    undelivered_at_end: int = 0
    """Sequences left in this rank's lanes when a finite plan ended."""
    records_read: dict[str, int] = field(default_factory=dict)
    """Records read per dataset, trained on or removed, counted as the lanes take them."""
    overlapping: dict[str, int] = field(default_factory=dict)
    """Records trained on that share a word n-gram with a scored document, per dataset
    (counted with ``overlap_ngram`` only)."""
    removed: dict[str, dict[str, int]] = field(default_factory=dict)
    """Records read but not trained on, per dataset and step that dropped them
    (``decontaminate``, a processing step's name), counted as the lanes take them."""
    repeated: dict[str, int] = field(default_factory=dict)
    """Records read past their dataset's first epoch (read again), per dataset: of
    ``records_read``, ``records_read - repeated`` are distinct records."""
    ran_out: dict[str, int] = field(default_factory=dict)
    """Lanes in which a dataset that stops after one epoch (``exhausted: stop``) ended."""

    def snapshot(self) -> dict[str, Any]:
        """A plain, JSON-serialisable copy."""
        return asdict(self)

    def count_removed(self, dataset: str, step: str) -> None:
        """Count one record of ``dataset`` read and dropped by ``step``."""
        by_step = self.removed.setdefault(dataset, {})
        by_step[step] = by_step.get(step, 0) + 1
        self.count_read(dataset, 1)

    def count_overlapping(self, dataset: str) -> None:
        """Count one record of ``dataset`` trained on that overlaps a scored document."""
        self.overlapping[dataset] = self.overlapping.get(dataset, 0) + 1

    def count_repeated(self, dataset: str, records: int = 1) -> None:
        """Count ``records`` records of ``dataset`` read past its first epoch."""
        self.repeated[dataset] = self.repeated.get(dataset, 0) + records

    def count_ran_out(self, dataset: str) -> None:
        """Count one lane in which ``dataset`` ended (``exhausted: stop``)."""
        self.ran_out[dataset] = self.ran_out.get(dataset, 0) + 1

    def count_read(self, dataset: str, records: int) -> None:
        """Count ``records`` records of ``dataset`` read."""
        self.records_read[dataset] = self.records_read.get(dataset, 0) + records

    def count_step(self, sequences: Sequence[PackedSequence], datasets: Sequence[str]) -> None:
        """Count a step's sequences and label tokens per dataset (``datasets``: the names,
        by dataset index). A piece's labels run from its start to the next piece's start,
        the last piece's to ``num_valid - 1``. All pieces of the step at once: per-sequence
        numpy calls cost more than the arithmetic."""
        self.batch.items_in += len(sequences)
        if not sequences:
            return
        starts = np.concatenate([seq.doc_starts for seq in sequences]).astype(np.int64)
        sources = np.concatenate([seq.doc_sources for seq in sequences])
        pieces = np.fromiter((len(seq.doc_starts) for seq in sequences), np.int64, len(sequences))
        label_ends = np.fromiter((seq.num_valid - 1 for seq in sequences), np.int64, len(sequences))
        ends = np.append(starts[1:], 0)  # the next piece's start ...
        last_piece = np.cumsum(pieces) - 1
        ends[last_piece] = label_ends  # ... except for a sequence's last piece
        sizes = np.maximum(np.minimum(ends, np.repeat(label_ends, pieces)) - starts, 0)
        per_source = np.bincount(sources, weights=sizes, minlength=len(datasets))
        for name, tokens in zip(datasets, per_source.tolist(), strict=True):
            self.label_tokens[name] += int(tokens)
        self.batch.tokens += int(np.maximum(label_ends, 0).sum())

    def count_microbatch(self, wait: float, *, is_last: bool) -> None:
        """Count a micro-batch handed to the consumer after it waited ``wait`` seconds; the
        last of its step completes the step."""
        self.microbatches += 1
        self.batch.items_out += 1
        self.consumer_wait_s += wait
        self.last_microbatch_wait_s = wait
        self.steps += is_last
