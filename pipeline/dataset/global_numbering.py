"""``GlobalNumbering``: every record of a dataset numbered in shard order, and the dataset's
content fingerprint (both index every shard; order v1 uses them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.dataset.bad_records import skip_summary
from pipeline.dataset.record_key import record_keys
from pipeline.dataset.shard import IndexedShard, Shard
from pipeline.errors import DataError
from pipeline.state import ordered_fingerprint

FINGERPRINT_TAG = "zephon-dataset-v1"


@dataclass(frozen=True)
class GlobalNumbering:
    """Global record numbers over every shard of a dataset."""

    starts: np.ndarray
    """Global number of each shard's first record; one more entry than shards."""
    record_bytes: np.ndarray
    """UTF-8 byte length of each record's text (int64), read-only."""
    fingerprint: str
    """SHA-256 over the field and each shard's format and content fingerprint, in order."""

    @property
    def num_records(self) -> int:
        """Usable records over all shards."""
        return int(self.starts[-1])

    def keys(self, dataset: str, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Record keys of global record numbers; IndexError naming ``dataset`` if out of range."""
        idx = np.asarray(indices, dtype=np.int64)
        n = self.num_records
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise IndexError(f"dataset {dataset!r}: record index out of range [0, {n})")
        shard = np.searchsorted(self.starts, idx, side="right") - 1
        return record_keys(shard, idx - self.starts[shard])


def number_globally(
    dataset: str,
    field: str,
    *,
    shards: Sequence[Shard],
    indexed: Sequence[IndexedShard],
    text_bytes: Callable[[int], np.ndarray],
) -> GlobalNumbering:
    """Number the records of ``shards`` (all indexed: ``indexed``, and each shard's
    ``text_bytes``); DataError naming ``dataset`` if none is usable."""
    counts = np.array([state.records for state in indexed], dtype=np.int64)
    if counts.sum() == 0:
        skipped, _ = skip_summary([(s.source, st) for s, st in zip(shards, indexed, strict=True)])
        raise DataError(
            f"dataset {dataset!r} has no usable records ({len(shards)} files; "
            f"skipped: {skipped}); check `field=` and the files"
        )
    record_bytes = np.concatenate(
        [np.zeros(0, np.int64)] + [np.asarray(text_bytes(s)) for s in range(len(indexed))]
    ).astype(np.int64)
    record_bytes.flags.writeable = False  # shared with every caller
    canonical = [
        FINGERPRINT_TAG,
        field,
        [[s.format, st.fingerprint] for s, st in zip(shards, indexed, strict=True)],
    ]
    return GlobalNumbering(
        starts=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        record_bytes=record_bytes,
        fingerprint=ordered_fingerprint(canonical),
    )
