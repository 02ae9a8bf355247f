"""Record keys: a record of a dataset is addressed as ``shard << 32 | row``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RECORD_KEY_SHIFT = 32
"""A record's key is ``shard << RECORD_KEY_SHIFT | row``: shards and rows below 2**31."""
ROW_MASK = (1 << RECORD_KEY_SHIFT) - 1
"""A record key's row bits."""


def record_keys(shards: np.ndarray | int, rows: np.ndarray | int) -> np.ndarray:
    """Keys of records ``(shard, row)`` (int64)."""
    return (np.asarray(shards, dtype=np.int64) << RECORD_KEY_SHIFT) | np.asarray(rows, np.int64)


def split_record_keys(keys: np.ndarray | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(shards, rows)`` of record keys."""
    array = np.asarray(keys, dtype=np.int64)
    return array >> RECORD_KEY_SHIFT, array & ROW_MASK


def split_record_key(key: int) -> tuple[int, int]:
    """``(shard, row)`` of one record key (without numpy, for per-record lookups)."""
    return int(key) >> RECORD_KEY_SHIFT, int(key) & ROW_MASK


@dataclass(frozen=True)
class RecordPointer:
    """Address of one record: dataset name, shard index (sorted order), record in shard."""

    dataset: str
    shard: int
    record: int

    def as_tuple(self) -> tuple[str, int, int]:
        """``(dataset, shard, record)``."""
        return (self.dataset, self.shard, self.record)
