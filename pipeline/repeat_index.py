"""``RepeatIndex``: which stream positions of a dataset repeat a record read earlier in the
same epoch, the same answer in every lane, rank and restart.

A deduplication step (``pipeline/processing/deduplication.py``) keeps the first copy in the
dataset's stream order. Lane ``l`` reads positions ``l, l+L, ...``, so whether its record is
a copy depends on the other lanes' records before it. The index answers by reading the
epoch's records in position order, from the epoch's start up to the furthest position asked
for, and asking the step's matcher about each: a rank's lanes share one index per dataset and
step, and each rank reads all lanes' records of the dataset once (the cost, and why it is
worth it: docs/design/pipeline_processing.md). A restart reads the epoch again up to where it
stopped; no state is saved.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from pipeline.order import DatasetOrder
from pipeline.processing import Deduplication, ProcessChain, RepeatMatcher
from pipeline.stages.encode import read_dataset

_READ_BATCH = 1024
"""Records read at a time."""
_EPOCHS_KEPT = 2
"""Epochs remembered at once: lanes cross an epoch's end a few records apart."""


@dataclass
class _EpochScan:
    matcher: RepeatMatcher
    next: int
    """The next position to read."""
    repeats: set[int] = field(default_factory=set)
    """Positions read that repeat an earlier one."""


class RepeatIndex:
    """Copies among one dataset's stream positions, by one deduplication step."""

    def __init__(self, order: DatasetOrder, step: Deduplication) -> None:
        self._order = order
        self._step = step
        self._scans: OrderedDict[int, _EpochScan] = OrderedDict()
        self._lock = threading.Lock()

    def repeats(self, positions: np.ndarray) -> np.ndarray:
        """bool per stream position (ascending): whether its record repeats an earlier one of
        its epoch."""
        with self._lock:
            return np.fromiter(
                (self._is_repeat(int(p)) for p in positions), dtype=bool, count=len(positions)
            )

    def _is_repeat(self, position: int) -> bool:
        start = self._order.epoch_start(position)
        scan = self._scans.get(start)
        if scan is None:
            scan = self._scans[start] = _EpochScan(self._step.matcher(), start)
            while len(self._scans) > _EPOCHS_KEPT:
                self._scans.popitem(last=False)
        while scan.next <= position:
            self._read(scan, start, position)
        return position in scan.repeats

    def _read(self, scan: _EpochScan, start: int, position: int) -> None:
        """Read the next batch of the epoch's positions (at least up to ``position``)."""
        end = max(position + 1, scan.next + _READ_BATCH)
        while end > position + 1 and self._order.epoch_start(end - 1) != start:
            end = max(position + 1, (scan.next + end) // 2)  # the epoch ends within the batch
        positions = range(scan.next, end)
        keys = np.fromiter((self._order.key_at(p) for p in positions), np.int64, len(positions))
        texts, _ = read_dataset(self._order.dataset, keys)
        for p, text in zip(positions, texts, strict=True):
            if scan.matcher.seen(text):
                scan.repeats.add(p)
        scan.next = end


def repeat_indexes(
    chain: ProcessChain, orders: list[DatasetOrder]
) -> list[list[tuple[int, RepeatIndex]]]:
    """Per dataset (``orders``), ``(step index, index of copies)`` of each deduplication
    step of ``chain`` that applies to it: one index per dataset and step, shared by a
    rank's lanes."""
    return [
        [
            (i, RepeatIndex(order, step))
            for i, (step, only) in enumerate(zip(chain.steps, chain.only, strict=True))
            if isinstance(step, Deduplication) and (only is None or order.dataset.name in only)
        ]
        for order in orders
    ]
