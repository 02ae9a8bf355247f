"""``WorkSource``: the plan. Decides what is trained on, in which order, per lane.

No record contents are read here except the small calibration sample.

Lanes. Each dataset ``d`` with ``n_d`` records is an endless stream of epochs;
epoch ``e`` is the permutation ``perm(seed, d, e)`` of its records. Lane ``l``
of ``L`` takes stream positions ``l, l+L, l+2L, ...``: its ``k``-th record of
``d`` is ``perm(seed, d, e)[i]`` with ``(e, i) = divmod(k*L + l, n_d)``. Lanes
are thus disjoint within an epoch and independent of each other and of the
number of ranks. A dataset with ``exhausted="stop"`` ends after epoch 0.

Mixing. Each lane draws records by estimated token cost
(``round(bytes * tokens_per_byte) + 1``) from the dataset furthest behind its
share (see :mod:`pipeline.mixture`), and closes a work chunk once its estimated
tokens reach ``chunk_tokens``.

Calibration. ``tokens_per_byte`` is measured once per dataset with the run's
tokenizer on a deterministic sample: its records in the order ``perm(name)``
until ``calibration_bytes``. Like the held-out records it depends on the
dataset, never on the seed or the mixture, so every seed of a contract
estimates costs alike, and a process measures each (dataset, tokenizer, sample
size) once: later plans of the same data (an agent's hundreds of dry runs)
reuse it. The values are part of the plan: they are stored in pipeline states
and adopted on restore, never re-measured.

Held-out records. With ``holdout_bytes = B > 0`` each dataset sets records
aside for evaluation: its records in the order ``perm(name)`` (seeded by the
dataset name only, so every seed, mixture and lane count holds out the same
records) are taken until their bytes reach ``B``. Training never sees them:
the epoch permutations above run over the remaining ``n_d`` records.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from pipeline.dataset import Dataset
from pipeline.errors import ConfigError, StateError
from pipeline.mixture import Mixture, furthest_behind
from pipeline.stages.tokenize import WorkChunk
from pipeline.tokenizer import Tokenizer

_CALIBRATION_STREAM = 0xCA1B
_HOLDOUT_STREAM = 0x4E1D
_MAX_HOLDOUT_FRACTION = 0.5
_MAX_CALIBRATION_RECORDS = 4096
_MEASURED: dict[tuple[str, str, str, str, int], float] = {}
"""Tokens per byte measured in this process, by (name, content fingerprint, text field,
tokenizer fingerprint, sample bytes): a pure function of them (module docstring)."""
_MEASURED_LOCK = threading.Lock()


def _name_key(name: str) -> int:
    """A stable 64-bit integer for a dataset name (seeds must not depend on dataset order)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")


class WorkSource:
    """The data plan: datasets, token-share mixture, seeded permutations and lane split."""

    def __init__(
        self,
        datasets: Sequence[Dataset],
        mixture: Mapping[str, float],
        seed: int = 0,
        chunk_tokens: int = 8192,
        calibration_bytes: int = 1 << 20,
        holdout_bytes: int = 0,
    ) -> None:
        if not datasets:
            raise ConfigError("WorkSource needs at least one Dataset.")
        names = [ds.name for ds in datasets]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"dataset names must be unique; repeated: {duplicates}")
        if not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"seed must be an integer >= 0, got {seed!r}")
        if chunk_tokens < 1 or calibration_bytes < 1:
            raise ConfigError("chunk_tokens and calibration_bytes must be >= 1")
        if not isinstance(holdout_bytes, int) or holdout_bytes < 0:
            raise ConfigError(f"holdout_bytes must be an integer >= 0, got {holdout_bytes!r}")
        self.datasets = list(datasets)
        self.mixture = Mixture(mixture, names)
        self.seed = seed
        self.chunk_tokens = chunk_tokens
        self.calibration_bytes = calibration_bytes
        self.holdout_bytes = holdout_bytes
        self._training: list[np.ndarray] | None = None
        self._tokens_per_byte: dict[str, float] | None = None
        self._costs: list[np.ndarray] | None = None
        self._lock = threading.Lock()

    # -- plan contract -------------------------------------------------------------------------

    def contract(self) -> dict[str, Any]:
        """The plan's part of the data contract (indexes the datasets if needed)."""
        return {
            "datasets": [
                {
                    "name": ds.name,
                    "fingerprint": ds.fingerprint,
                    "field": ds.field,
                    "exhausted": ds.exhausted,
                }
                for ds in self.datasets
            ],
            "mixture": self.mixture.canonical(),
            "seed": self.seed,
            "chunk_tokens": self.chunk_tokens,
            "holdout_bytes": self.holdout_bytes,
        }

    # -- calibration ---------------------------------------------------------------------------

    @property
    def tokens_per_byte(self) -> dict[str, float] | None:
        """Measured (or restored) tokens per byte per dataset; None before calibration."""
        return None if self._tokens_per_byte is None else dict(self._tokens_per_byte)

    def calibrate(self, tokenizer: Tokenizer) -> dict[str, float]:
        """Measure tokens/byte per dataset on a deterministic sample (once; later calls reuse it)."""
        with self._lock:
            if self._tokens_per_byte is None:
                measured = {ds.name: self._measure(ds, tokenizer) for ds in self.datasets}
                self._adopt(measured)
            assert self._tokens_per_byte is not None
            return dict(self._tokens_per_byte)

    def set_calibration(self, tokens_per_byte: Mapping[str, float]) -> None:
        """Adopt stored calibration (from a checkpoint) instead of measuring."""
        names = {ds.name for ds in self.datasets}
        if set(tokens_per_byte) != names:
            raise StateError(
                f"stored calibration covers datasets {sorted(tokens_per_byte)}, the plan has "
                f"{sorted(names)}; the state belongs to another data contract."
            )
        with self._lock:
            self._adopt({name: float(v) for name, v in tokens_per_byte.items()})

    def _adopt(self, tokens_per_byte: dict[str, float]) -> None:
        self._tokens_per_byte = tokens_per_byte
        self._costs = [
            np.rint(ds.record_bytes * tokens_per_byte[ds.name]).astype(np.int64) + 1
            for ds in self.datasets
        ]

    def _measure(self, ds: Dataset, tokenizer: Tokenizer) -> float:
        key = (ds.name, ds.fingerprint, ds.field, tokenizer.fingerprint, self.calibration_bytes)
        with _MEASURED_LOCK:
            if key in _MEASURED:
                return _MEASURED[key]
        order = np.random.default_rng([_name_key(ds.name), _CALIBRATION_STREAM]).permutation(
            ds.num_records
        )
        cumulative = np.cumsum(ds.record_bytes[order])
        take = min(
            int(np.searchsorted(cumulative, self.calibration_bytes)) + 1, _MAX_CALIBRATION_RECORDS
        )
        sample = [int(i) for i in order[:take]]
        texts = ds.read_texts(sample)
        tokens = sum(len(ids) for ids in tokenizer.encode_batch(texts))
        measured = tokens / max(1, int(ds.record_bytes[sample].sum()))
        with _MEASURED_LOCK:
            _MEASURED[key] = measured
        return measured

    # -- held-out records --------------------------------------------------------------------

    def heldout_records(self, dataset_index: int) -> np.ndarray:
        """Global ids of a dataset's held-out records, in their selection order."""
        ds = self.datasets[dataset_index]
        if self.holdout_bytes == 0:
            return np.zeros(0, dtype=np.int64)
        order = np.random.default_rng([_HOLDOUT_STREAM, _name_key(ds.name)]).permutation(
            ds.num_records
        )
        take = int(np.searchsorted(np.cumsum(ds.record_bytes[order]), self.holdout_bytes)) + 1
        if take > ds.num_records * _MAX_HOLDOUT_FRACTION:
            raise ConfigError(
                f"dataset {ds.name!r}: holding out {self.holdout_bytes} bytes takes {take} of its "
                f"{ds.num_records} records (more than {_MAX_HOLDOUT_FRACTION:.0%}); lower "
                "holdout_bytes or add data"
            )
        return order[:take].astype(np.int64)

    def training_records(self, dataset_index: int) -> np.ndarray:
        """Global ids of the records training draws from (all but the held-out), sorted."""
        with self._lock:
            if self._training is None:
                self._training = [
                    np.setdiff1d(np.arange(ds.num_records, dtype=np.int64), self.heldout_records(d))
                    for d, ds in enumerate(self.datasets)
                ]
            return self._training[dataset_index]

    # -- lane plans ----------------------------------------------------------------------------

    def permutation(self, dataset_index: int, epoch: int) -> np.ndarray:
        """Record ids of ``epoch`` of a dataset, in order (seeded by seed, dataset name, epoch)."""
        training = self.training_records(dataset_index)
        order = _permutation(
            self.seed, _name_key(self.datasets[dataset_index].name), len(training), epoch
        )
        return order if self.holdout_bytes == 0 else training[order]

    def lane_plan(
        self, lane: int, num_lanes: int, state: Mapping[str, Any] | None = None
    ) -> LanePlan:
        """The chunk stream of one lane, from the beginning or from a saved plan state."""
        assert self._costs is not None, "calibrate() or set_calibration() before planning"
        assert 0 <= lane < num_lanes, f"lane must be in [0, {num_lanes}), got {lane}"
        return LanePlan(self, lane, num_lanes, state)

    def chunk_costs(self, dataset_index: int) -> np.ndarray:
        """Estimated token cost of every record of a dataset."""
        assert self._costs is not None, "calibrate() or set_calibration() before planning"
        return self._costs[dataset_index]


@lru_cache(maxsize=64)
def _permutation(seed: int, name_key: int, num_records: int, epoch: int) -> np.ndarray:
    dtype = np.int32 if num_records < 2**31 else np.int64
    perm = np.random.default_rng([seed, name_key, epoch]).permutation(num_records).astype(dtype)
    perm.flags.writeable = False
    return perm


class LanePlan:
    """Emits one lane's work chunks; its state is a handful of integers per dataset."""

    def __init__(
        self, source: WorkSource, lane: int, num_lanes: int, state: Mapping[str, Any] | None
    ) -> None:
        self.source = source
        self.lane = lane
        self.num_lanes = num_lanes
        names = [ds.name for ds in source.datasets]
        self._sizes = [len(source.training_records(d)) for d in range(len(source.datasets))]
        self._stops = [ds.exhausted == "stop" for ds in source.datasets]
        if state is None:
            self._chunk = 0
            self._drawn = [0] * len(names)
            self._tokens = [0] * len(names)
        else:
            self._chunk = int(state["chunk"])
            self._drawn = [int(state["drawn"][n]) for n in names]
            self._tokens = [int(state["tokens"][n]) for n in names]
        self._names = names
        self._costs = [source.chunk_costs(d) for d in range(len(names))]
        self._perms: dict[int, tuple[int, np.ndarray]] = {}
        self._active = [
            not (stop and drawn * num_lanes + lane >= size)
            for stop, drawn, size in zip(self._stops, self._drawn, self._sizes, strict=True)
        ]

    def state(self) -> dict[str, Any]:
        """JSON-serialisable position of the plan (before the next chunk)."""
        return {
            "chunk": self._chunk,
            "drawn": dict(zip(self._names, self._drawn, strict=True)),
            "tokens": dict(zip(self._names, self._tokens, strict=True)),
        }

    def next_chunk(self) -> WorkChunk | None:
        """Plan the next chunk, or return None when every dataset of the lane is exhausted."""
        shares = self.source.mixture.shares
        chunk_tokens = self.source.chunk_tokens
        ds_ids: list[int] = []
        rec_ids: list[int] = []
        estimated = 0
        while estimated < chunk_tokens:
            d = furthest_behind(self._tokens, shares, self._active)
            if d is None:
                break
            record = self._record(d, self._drawn[d])
            cost = int(self._costs[d][record])
            self._drawn[d] += 1
            self._tokens[d] += cost
            estimated += cost
            ds_ids.append(d)
            rec_ids.append(record)
            if self._stops[d]:
                self._active[d] = self._drawn[d] * self.num_lanes + self.lane < self._sizes[d]
        if not ds_ids:
            return None
        chunk = WorkChunk(
            lane=self.lane,
            index=self._chunk,
            datasets=np.asarray(ds_ids, dtype=np.int16),
            records=np.asarray(rec_ids, dtype=np.int64),
        )
        self._chunk += 1
        return chunk

    def _record(self, d: int, k: int) -> int:
        """The lane's ``k``-th record of dataset ``d``: stream position ``k*L + lane``."""
        epoch, i = divmod(k * self.num_lanes + self.lane, self._sizes[d])
        cached_epoch, perm = self._perms.get(d, (-1, None))
        if cached_epoch != epoch or perm is None:
            perm = self.source.permutation(d, epoch)
            self._perms[d] = (epoch, perm)
        return int(perm[i])
