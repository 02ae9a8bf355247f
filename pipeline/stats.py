"""Per-stage counters of a pipeline, for logging "data wait" and finding bottlenecks.

Every counter is updated by the thread that owns the stage's accumulator (the
lane producer), never by workers: a worker reports its own counts and busy
time inside its result, and the lane adds them when it takes the result in
order. Reading a snapshot from another thread is safe (plain numbers).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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

    def snapshot(self) -> dict[str, Any]:
        """A plain, JSON-serialisable copy."""
        return asdict(self)
