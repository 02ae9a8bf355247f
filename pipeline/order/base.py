"""``DatasetOrder``: what the plan asks of one dataset's order, and the versions of it."""

from __future__ import annotations

import hashlib
import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from pipeline.dataset import Dataset
from pipeline.errors import ConfigError, StateError

CALIBRATION_STREAM = 0xCA1B
HOLDOUT_STREAM = 0x4E1D
MAX_HOLDOUT_FRACTION = 0.25
MIN_HOLDOUT_DOCS = 2


class OrderVersion(StrEnum):
    """How a dataset's records are ordered; part of the data contract."""

    V1 = "v1"
    """One seeded permutation of every record per epoch (indexes the whole corpus)."""
    V2 = "v2"
    """Shards permuted per epoch, records permuted within windows of shards (O(1) a record)."""


def name_key(name: str) -> int:
    """A stable 64-bit integer for a dataset name (seeds must not depend on dataset order)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")


def holdout_count(dataset: Dataset, records: int, holdout_docs: int) -> int:
    """Held-out documents to take from ``records`` candidates: ``min(K, floor(n / 4))``;
    raises ConfigError when that is fewer than two."""
    take = min(holdout_docs, int(records * MAX_HOLDOUT_FRACTION))
    if take < MIN_HOLDOUT_DOCS:
        raise ConfigError(
            f"dataset {dataset.name!r} has {records} records: holding out "
            f"{MIN_HOLDOUT_DOCS} documents for evaluation needs at least "
            f"{math.ceil(MIN_HOLDOUT_DOCS / MAX_HOLDOUT_FRACTION)} (held-out documents are "
            f"at most {MAX_HOLDOUT_FRACTION:.0%} of a dataset); add data or set "
            "holdout_bytes=0"
        )
    return take


@dataclass(frozen=True)
class OrderSettings:
    """What every dataset's order of one plan shares (fields of the data contract)."""

    seed: int
    """The plan's seed."""
    holdout_docs: int
    """``K``: documents held out per dataset (at most a quarter of the candidates)."""
    holds_out: bool
    """Whether documents are held out at all (``holdout_bytes > 0``)."""
    calibration_bytes: int
    """Bytes of the calibration sample."""
    max_calibration_records: int
    """Records of the calibration sample, at most."""
    shard_window: int
    """Order v2: the fewest shards whose records are permuted together."""


class DatasetOrder(ABC):
    """One dataset's records as the plan sees them: an endless stream of epochs of training
    records (position ``p`` -> record key), the held-out records and the calibration sample.

    Every answer is a pure function of the dataset's content, its name and the settings.
    """

    version: OrderVersion

    def __init__(self, dataset: Dataset, settings: OrderSettings) -> None:
        self.dataset = dataset
        self.settings = settings
        self.seed = settings.seed
        self.name_key = name_key(dataset.name)
        self.closing = threading.Event()
        """Set by :meth:`close`: background work stops at its next step."""
        self.background: list[threading.Thread] = []
        """Threads of background work (v2's look-ahead), joined by :meth:`close`."""

    def close(self) -> None:
        """Stop background work (v2's look-ahead indexing) after the shard it is at, and
        wait for it; the order stays usable, and a later use starts it again."""
        self.closing.set()
        for thread in self.background:
            thread.join()
        self.background = [t for t in self.background if t.is_alive()]

    @abstractmethod
    def contract_fingerprint(self) -> str:
        """The dataset's identity in the data contract."""

    @abstractmethod
    def heldout_keys(self) -> np.ndarray:
        """Keys of the held-out records, in their selection order (empty without hold-out)."""

    @abstractmethod
    def calibration_keys(self) -> np.ndarray:
        """Keys of the calibration sample, in sample order."""

    @abstractmethod
    def calibration_identity(self) -> str:
        """What the calibration sample's content depends on (its cache key)."""

    @abstractmethod
    def key_at(self, position: int) -> int:
        """Key of the record at stream ``position`` (epoch after epoch, endlessly)."""

    @abstractmethod
    def in_first_epoch(self, position: int) -> bool:
        """Whether stream ``position`` lies in epoch 0 (``ExhaustedPolicy.STOP`` ends there)."""

    @abstractmethod
    def epoch_start(self, position: int) -> int:
        """The first stream position of the epoch ``position`` lies in."""

    @abstractmethod
    def training_keys(self) -> np.ndarray:
        """Keys of every training record, sorted (enumerates the dataset: tests, benchmarks)."""

    @abstractmethod
    def mean_cost(self, tokens_per_byte: float) -> float:
        """``cbar_d``, the mean estimated record cost the lane phases use: an exact integer
        sum over a count, so the same float on every machine."""

    def cursor(self, position: int) -> list[int] | None:
        """What a saved plan state needs to place ``position`` again cheaply (JSON ints), or
        None when the order needs nothing (v1) or the position is past a stopping end."""
        return None

    def adopt_cursor(self, cursor: Sequence[int]) -> None:
        """Take a cursor saved by :meth:`cursor` (in another process) before placing."""
        raise StateError(
            f"dataset {self.dataset.name!r}: a plan state holds a cursor {list(cursor)}, which "
            f"order {self.version} never saves; the state belongs to another data contract"
        )

    @abstractmethod
    def estimated_text_bytes(self) -> float:
        """Text bytes of the whole dataset: exact (v1) or estimated from per-shard sizes."""

    def record_cost(self, key: int, tokens_per_byte: float) -> int:
        """Estimated tokens of one record: ``round(bytes * tokens/byte) + 1`` (EOS)."""
        return round(self.dataset.text_bytes_of(key) * tokens_per_byte) + 1
