"""Order v1: one seeded permutation of all of a dataset's training records per epoch.

Kept so that runs made with it resume and compare with their own fingerprints; it indexes
every shard and holds O(records) arrays. Design: docs/design/pipeline_order.md.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from pipeline.order.base import (
    CALIBRATION_STREAM,
    HOLDOUT_STREAM,
    DatasetOrder,
    OrderVersion,
    holdout_count,
)


class GlobalPermutationOrder(DatasetOrder):
    """Epoch ``e`` is ``perm(seed, name, e)`` over the training records (global numbering)."""

    version = OrderVersion.V1
    _training_key_array: np.ndarray | None = None
    _training_id_array: np.ndarray | None = None

    def contract_fingerprint(self) -> str:
        """The content fingerprint over every shard."""
        return self.dataset.fingerprint

    def heldout_keys(self) -> np.ndarray:
        """The first ``k`` records of ``perm(name)`` (design doc)."""
        return self.dataset.global_keys(self._heldout_ids())

    def _heldout_ids(self) -> np.ndarray:
        if not self.settings.holds_out:
            return np.zeros(0, dtype=np.int64)
        n = self.dataset.num_records
        take = holdout_count(self.dataset, n, self.settings.holdout_docs)
        order = np.random.default_rng([HOLDOUT_STREAM, self.name_key]).permutation(n)
        return order[:take].astype(np.int64)

    def calibration_keys(self) -> np.ndarray:
        """Records in the order ``perm(name)`` until ``calibration_bytes``."""
        ds = self.dataset
        order = np.random.default_rng([self.name_key, CALIBRATION_STREAM]).permutation(
            ds.num_records
        )
        cumulative = np.cumsum(ds.record_bytes[order])
        take = min(
            int(np.searchsorted(cumulative, self.settings.calibration_bytes)) + 1,
            self.settings.max_calibration_records,
        )
        return ds.global_keys(order[:take])

    def calibration_identity(self) -> str:
        """The sample is drawn from every record: the whole content."""
        return self.dataset.fingerprint

    def _training_ids(self) -> np.ndarray:
        if self._training_id_array is None:  # ~12 s at 10M records: computed once
            self._training_id_array = np.setdiff1d(
                np.arange(self.dataset.num_records, dtype=np.int64), self._heldout_ids()
            )
        return self._training_id_array

    def training_keys(self) -> np.ndarray:
        """All records but the held-out ones (computed once)."""
        cached = self._training_key_array
        if cached is None:
            cached = self._training_key_array = self.dataset.global_keys(self._training_ids())
        return cached

    def key_at(self, position: int) -> int:
        """``perm(seed, name, e)[i]`` with ``(e, i) = divmod(position, n_train)``."""
        keys = self.training_keys()
        epoch, i = divmod(position, len(keys))
        order = _build_epoch_permutation(self.seed, self.name_key, len(keys), epoch)
        return int(keys[order[i]])

    def in_first_epoch(self, position: int) -> bool:
        """Whether ``position < n_train``."""
        return position < len(self.training_keys())

    def epoch_start(self, position: int) -> int:
        """``position`` less its offset within an epoch of ``n_train`` positions."""
        return position - position % len(self.training_keys())

    def estimated_text_bytes(self) -> float:
        """Every record's text bytes, summed (indexes every shard)."""
        return float(self.dataset.record_bytes.sum())

    def mean_cost(self, tokens_per_byte: float) -> float:
        """Mean cost over every training record."""
        costs = np.rint(self.dataset.record_bytes * tokens_per_byte).astype(np.int64) + 1
        training = self._training_ids()
        return int(costs[training].sum()) / max(1, len(training))


@lru_cache(maxsize=64)
def _build_epoch_permutation(seed: int, name_key: int, num_records: int, epoch: int) -> np.ndarray:
    dtype = np.int32 if num_records < 2**31 else np.int64
    perm = np.random.default_rng([seed, name_key, epoch]).permutation(num_records).astype(dtype)
    perm.flags.writeable = False
    return perm
