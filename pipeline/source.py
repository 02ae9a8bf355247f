"""``WorkSource``: the plan. Decides what is trained on, in which order, per lane.

No record contents are read here except the small calibration sample. Lane ``l`` of ``L``
takes stream positions ``l, l+L, ...`` of each dataset's seeded epoch permutations and draws
records by estimated token cost from the dataset whose next record finishes first
(:mod:`pipeline.mixture`), out of phase with the other lanes: token shares hold within a few
records per lane from the first step, and a lane's offsets are a pure function of the plan.

Design: docs/design/pipeline_plan.md
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from pipeline.dataset import Dataset
from pipeline.errors import ConfigError, StateError
from pipeline.io import atomic_write
from pipeline.mixture import Mixture, earliest_finish
from pipeline.stages.tokenize import WorkChunk
from pipeline.tokenizer import Tokenizer

_CALIBRATION_STREAM = 0xCA1B
_HOLDOUT_STREAM = 0x4E1D
_PHASE_STREAM = 0x9A5E
_MAX_HOLDOUT_FRACTION = 0.25
_MIN_HOLDOUT_DOCS = 2
_MAX_CALIBRATION_RECORDS = 4096
_MEASURED: dict[tuple[str, str, str, str, int], float] = {}
"""Tokens per byte measured in this process, by (name, content fingerprint, text field,
tokenizer fingerprint, sample bytes): a pure function of them (design doc)."""
_MEASURED_LOCK = threading.Lock()
_CALIBRATION_VERSION = 1
"""Part of the on-disk calibration key: bump it when the sample or the measure changes."""


def cut_to_budget(texts: Sequence[str], budget: int) -> list[str]:
    """Each text's first ``min(len_i, c)`` UTF-8 bytes, ``c`` the largest cap keeping the total
    within ``budget`` (design doc); a cut never splits a character."""
    encoded = [t.encode() for t in texts]
    lengths = np.array([len(e) for e in encoded], dtype=np.int64)
    if int(lengths.sum()) <= budget:
        return list(texts)
    # sum_i min(len_i, c) is increasing in c: the largest c within budget, by bisection.
    low, high = 0, int(lengths.max())
    while low < high:
        cap = (low + high + 1) // 2
        if int(np.minimum(lengths, cap).sum()) <= budget:
            low = cap
        else:
            high = cap - 1
    return [
        e[:low].decode("utf-8", "ignore") if len(e) > low else t
        for t, e in zip(texts, encoded, strict=True)
    ]


def _calibration_file(key: tuple[str, str, str, str, int]) -> str:
    """The on-disk calibration entry of ``key`` (see ``_measure_tokens_per_byte``)."""
    text = json.dumps([*key, _CALIBRATION_STREAM, _MAX_CALIBRATION_RECORDS, _CALIBRATION_VERSION])
    return f"{hashlib.sha256(text.encode()).hexdigest()}.json"


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
        holdout_docs: int = 64,
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
        if not isinstance(holdout_docs, int) or holdout_docs < _MIN_HOLDOUT_DOCS:
            raise ConfigError(
                f"holdout_docs must be an integer >= {_MIN_HOLDOUT_DOCS} (the sampling error "
                f"of a held-out score needs two documents), got {holdout_docs!r}"
            )
        self.datasets = list(datasets)
        self.mixture = Mixture(mixture, names)
        self.seed = seed
        self.chunk_tokens = chunk_tokens
        self.calibration_bytes = calibration_bytes
        self.holdout_bytes = holdout_bytes
        self.holdout_docs = holdout_docs
        self._training: list[np.ndarray] | None = None
        self._tokens_per_byte: dict[str, float] | None = None
        self._costs: list[np.ndarray] | None = None
        self._mean_costs: list[float] | None = None
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
            "holdout_docs": self.holdout_docs,
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
                measured = {
                    ds.name: self._measure_tokens_per_byte(ds, tokenizer) for ds in self.datasets
                }
                self._adopt_calibration(measured)
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
            self._adopt_calibration({name: float(v) for name, v in tokens_per_byte.items()})

    def _adopt_calibration(self, tokens_per_byte: dict[str, float]) -> None:
        self._tokens_per_byte = tokens_per_byte
        self._costs = [
            np.rint(ds.record_bytes * tokens_per_byte[ds.name]).astype(np.int64) + 1
            for ds in self.datasets
        ]
        self._mean_costs = None

    def _measure_tokens_per_byte(self, ds: Dataset, tokenizer: Tokenizer) -> float:
        key = (ds.name, ds.fingerprint, ds.field, tokenizer.fingerprint, self.calibration_bytes)
        with _MEASURED_LOCK:
            if key in _MEASURED:
                return _MEASURED[key]
        # Every rank of every launch plans the same contract: measured once per machine and
        # stored beside the shard indexes, not tokenized again by each process (a pure
        # function of the key, so the stored value is exactly the measured one).
        stored = ds.cache_dir / "calibration" / _calibration_file(key)
        try:
            measured = float(json.loads(stored.read_text())["tokens_per_byte"])
        except (OSError, ValueError, KeyError, TypeError):  # missing or damaged: measure
            measured = self._tokens_per_byte_of_sample(ds, tokenizer)
            record = json.dumps({"key": list(key), "tokens_per_byte": measured}).encode()
            atomic_write(stored, lambda out: out.write(record))
        with _MEASURED_LOCK:
            _MEASURED[key] = measured
        return measured

    def _tokens_per_byte_of_sample(self, ds: Dataset, tokenizer: Tokenizer) -> float:
        """Tokens per byte of ``ds``'s seeded calibration sample (design doc)."""
        order = np.random.default_rng([_name_key(ds.name), _CALIBRATION_STREAM]).permutation(
            ds.num_records
        )
        cumulative = np.cumsum(ds.record_bytes[order])
        take = min(
            int(np.searchsorted(cumulative, self.calibration_bytes)) + 1, _MAX_CALIBRATION_RECORDS
        )
        sample = [int(i) for i in order[:take]]
        tokens = sum(len(ids) for ids in tokenizer.encode_batch(ds.read_texts(sample)))
        return tokens / max(1, int(ds.record_bytes[sample].sum()))

    # -- held-out records --------------------------------------------------------------------

    def heldout_records(self, dataset_index: int) -> np.ndarray:
        """Global ids of a dataset's held-out records, in their selection order (design doc)."""
        ds = self.datasets[dataset_index]
        if self.holdout_bytes == 0:
            return np.zeros(0, dtype=np.int64)
        take = min(self.holdout_docs, int(ds.num_records * _MAX_HOLDOUT_FRACTION))
        if take < _MIN_HOLDOUT_DOCS:
            raise ConfigError(
                f"dataset {ds.name!r} has {ds.num_records} records: holding out "
                f"{_MIN_HOLDOUT_DOCS} documents for evaluation needs at least "
                f"{math.ceil(_MIN_HOLDOUT_DOCS / _MAX_HOLDOUT_FRACTION)} (held-out documents are "
                f"at most {_MAX_HOLDOUT_FRACTION:.0%} of a dataset); add data or set "
                "holdout_bytes=0"
            )
        order = np.random.default_rng([_HOLDOUT_STREAM, _name_key(ds.name)]).permutation(
            ds.num_records
        )
        return order[:take].astype(np.int64)

    def heldout_documents(self, dataset_index: int) -> list[str]:
        """The scored text of a dataset's held-out records: cut to ``holdout_bytes`` in all."""
        ds = self.datasets[dataset_index]
        return cut_to_budget(ds.read_texts(self.heldout_records(dataset_index)), self.holdout_bytes)

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
        order = _build_epoch_permutation(
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

    def mean_cost(self, dataset_index: int) -> float:
        """Mean estimated cost of a dataset's training records, ``cbar_d`` (design doc).

        An exact integer sum over a count, so it is the same float on every machine.
        """
        costs = self.chunk_costs(dataset_index)
        training = self.training_records(dataset_index)
        with self._lock:
            if self._mean_costs is None:
                self._mean_costs = [math.nan] * len(self.datasets)
            if math.isnan(self._mean_costs[dataset_index]):
                total = int(costs[training].sum())
                self._mean_costs[dataset_index] = total / max(1, len(training))
            return self._mean_costs[dataset_index]

    def lane_phases(self, lane: int, num_lanes: int) -> list[float]:
        """``phi_{l,d}`` of every dataset for lane ``lane`` of ``num_lanes`` (design doc)."""
        rng = np.random.default_rng([_PHASE_STREAM, self.seed])
        x = (int(rng.permutation(num_lanes)[lane]) + float(rng.random())) / num_lanes
        shares = self.mixture.shares
        total = math.fsum(shares)
        ends, end = [0.0] * len(shares), 0.0
        for d in sorted(range(len(shares)), key=lambda d: self.datasets[d].name):
            end += shares[d] / total
            ends[d] = end
        return [(x - e) % 1.0 for e in ends]

    def lane_start(self, lane: int, num_lanes: int) -> int | None:
        """The dataset whose arc holds the lane's point: its first draw (design doc)."""
        total = math.fsum(self.mixture.shares)
        due = [
            (phi + w / total - 1.0, -d)
            for d, (phi, w) in enumerate(
                zip(self.lane_phases(lane, num_lanes), self.mixture.shares, strict=True)
            )
            if w > 0
        ]
        return -max(due)[1] if due else None

    def lane_offsets(self, lane: int, num_lanes: int) -> list[float]:
        """Starting offsets ``o_{l,d} = -phi_{l,d} * cbar_d`` of a lane (design doc)."""
        return [-phi * self.mean_cost(d) for d, phi in enumerate(self.lane_phases(lane, num_lanes))]


@lru_cache(maxsize=64)
def _build_epoch_permutation(seed: int, name_key: int, num_records: int, epoch: int) -> np.ndarray:
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
        self._offsets = source.lane_offsets(lane, num_lanes)
        self._start = source.lane_start(lane, num_lanes)
        self._fresh = not any(self._drawn)
        self._perms: dict[int, tuple[int, np.ndarray]] = {}
        # (record, cost) of the record each dataset would give next; recomputed after a draw.
        self._next: list[tuple[int, int] | None] = [None] * len(names)
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
        next_costs = [0] * len(shares)
        while estimated < chunk_tokens:
            for e, (w, active) in enumerate(zip(shares, self._active, strict=True)):
                if active and w > 0:
                    pending = self._next[e]
                    if pending is None:
                        record = self._find_lane_record(e, self._drawn[e])
                        pending = self._next[e] = (record, int(self._costs[e][record]))
                    next_costs[e] = pending[1]
            if self._fresh and self._start is not None and self._active[self._start]:
                d = self._start  # the lane's first record (design doc)
            else:
                d = earliest_finish(self._tokens, self._offsets, next_costs, shares, self._active)
            self._fresh = False
            if d is None:
                break
            pending = self._next[d]
            assert pending is not None
            record, cost = pending
            self._next[d] = None
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

    def _find_lane_record(self, d: int, k: int) -> int:
        """The lane's ``k``-th record of dataset ``d``: stream position ``k*L + lane``."""
        epoch, i = divmod(k * self.num_lanes + self.lane, self._sizes[d])
        cached_epoch, perm = self._perms.get(d, (-1, None))
        if cached_epoch != epoch or perm is None:
            perm = self.source.permutation(d, epoch)
            self._perms[d] = (epoch, perm)
        return int(perm[i])
