"""``RecordFeed``: one lane's upcoming records of one dataset, processed ahead by workers.

The records a lane will take from a dataset are known in advance (stream positions
``k*L + lane``), whatever the mixture draws in between, so the feed can have them read,
processed and tokenized by the stage's workers in batches, ahead of the plan. Results are
consumed strictly in stream order, so the plan sees the same records whatever the number of
workers, batch sizes or where a restore started.

A deduplication step's copies are told here, by position (:class:`RepeatIndex`): a record
the chain kept that repeats an earlier one of its epoch is marked dropped by that step.

Design: docs/design/pipeline_processing.md
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from pipeline.order import DatasetOrder
from pipeline.processing import KEPT
from pipeline.repeat_index import RepeatIndex
from pipeline.runners import Runner, Ticket
from pipeline.stages.process import FeedBatch, ProcessedRecords


class RecordFeed:
    """Processed records of dataset ``dataset`` at a lane's stream positions, in order."""

    def __init__(
        self,
        order: DatasetOrder,
        dataset: int,
        *,
        lane: int,
        num_lanes: int,
        start: int,
        runner: Runner[FeedBatch, ProcessedRecords],
        batch_records: int,
        depth: int,
        first_epoch_only: bool,
        repeats: Sequence[tuple[int, RepeatIndex]] = (),
    ) -> None:
        self._order = order
        self._dataset = dataset
        self._lane = lane
        self._num_lanes = num_lanes
        self._runner = runner
        self._batch_records = max(1, batch_records)
        self._depth = max(1, depth)
        self._first_epoch_only = first_epoch_only
        self._repeats = list(repeats)  # (step index, its index of copies)
        self._next_submit = start  # lane position of the next record to submit
        self._tickets: deque[tuple[np.ndarray, np.ndarray, Ticket[ProcessedRecords]]] = deque()
        self._head: tuple[np.ndarray, ProcessedRecords] | None = None
        self._offset = 0  # next record within the head batch

    def peek(self) -> tuple[int, np.ndarray | None, int, bool] | None:
        """The next record: its key, its tokens (None: dropped), the index of the step that
        dropped it, and whether it overlaps a scored document; None past the first epoch of a
        dataset that stops there."""
        if self._head is None or self._offset == len(self._head[0]):
            self._submit_ahead()
            if not self._tickets:
                return None
            keys, positions, ticket = self._tickets.popleft()
            self._head, self._offset = (keys, self._without_repeats(positions, ticket.result())), 0
            self._submit_ahead()
        keys, processed = self._head
        i = self._offset
        return (
            int(keys[i]),
            processed.tokens[i],
            int(processed.dropped_by[i]),
            bool(processed.overlapping[i]),
        )

    def pop(self) -> ProcessedRecords | None:
        """Move past the record :meth:`peek` gave; the batch it came from when it was the
        batch's first record (so its bytes and seconds are counted once), else None."""
        assert self._head is not None, "peek() before pop()"
        first = self._offset == 0
        self._offset += 1
        return self._head[1] if first else None

    def _submit_ahead(self) -> None:
        while len(self._tickets) < self._depth:
            positions = range(self._next_submit, self._next_submit + self._batch_records)
            if self._first_epoch_only:
                positions = [p for p in positions if self._in_first_epoch(p)]
                if not positions:
                    return
            stream = np.asarray(positions, dtype=np.int64) * self._num_lanes + self._lane
            keys = np.fromiter((self._order.key_at(int(p)) for p in stream), np.int64, len(stream))
            ticket = self._runner.submit(FeedBatch(self._dataset, keys))
            self._tickets.append((keys, stream, ticket))
            self._next_submit += len(positions)

    def _without_repeats(self, stream: np.ndarray, processed: ProcessedRecords) -> ProcessedRecords:
        """``processed`` with each kept record that a deduplication step finds a copy of an
        earlier one marked dropped by that step (the first step that finds it)."""
        for step, index in self._repeats:
            kept = processed.dropped_by == KEPT
            if not kept.any():
                break
            for i in np.flatnonzero(kept)[index.repeats(stream[kept])].tolist():
                processed.dropped_by[i] = step
                processed.tokens[i] = None
                processed.overlapping[i] = False
        return processed

    def _in_first_epoch(self, position: int) -> bool:
        return self._order.in_first_epoch(position * self._num_lanes + self._lane)
