"""``WorkSource``: the plan. Decides what is trained on, in which order, per lane.

No record contents are read here except the small calibration sample.

Lanes. Each dataset ``d`` with ``n_d`` records is an endless stream of epochs;
epoch ``e`` is the permutation ``perm(seed, d, e)`` of its records. Lane ``l``
of ``L`` takes stream positions ``l, l+L, l+2L, ...``: its ``k``-th record of
``d`` is ``perm(seed, d, e)[i]`` with ``(e, i) = divmod(k*L + l, n_d)``. Lanes
are thus disjoint within an epoch and independent of each other and of the
number of ranks. A dataset with ``exhausted="stop"`` ends after epoch 0.

Mixing. Each lane draws records by estimated token cost
``c = round(bytes * tokens_per_byte) + 1`` from the dataset whose next record
finishes first in virtual time (see :mod:`pipeline.mixture`)::

    d* = argmin_{d active, w_d > 0}  (o_{l,d} + t_d + c_d) / w_d

(``c_d``: the cost of the record the lane would draw next from ``d``; the
lane's first record is drawn by the start rule below), and closes a work chunk
once its estimated tokens reach ``chunk_tokens``.

Phases. Lane ``l`` of ``L`` starts dataset ``d`` at the offset
``o_{l,d} = -phi_{l,d} * cbar_d`` (``t_d`` itself starts at 0): as if it had
already served a fraction ``phi_{l,d}`` of a record of ``d``, where ``cbar_d``
is the mean estimated cost of ``d``'s training records. The phases place the
lanes on a circle of circumference 1 on which the datasets occupy consecutive
arcs of length ``w_d``, in name order; ``E_d`` is where ``d``'s arc ends (the
shares of the names up to ``d``)::

    rng = Generator(PCG64(SeedSequence([PHASE_STREAM, seed])))
    x_l = (rng.permutation(L)[l] + rng.random()) / L           lane l's point
    phi_{l,d} = (x_l - E_d) mod 1

* Out of phase: for each dataset the ``L`` phases are equally spaced, ``1/L``
  apart, so the lanes draw their records of ``d`` at staggered points and
  their rounding errors partly cancel in the global batch. In phase (all
  offsets 0, as in earlier versions) every lane drew the same datasets in
  the same steps and the errors of all lanes added up.
* Systematic start: the lane whose point lies in ``d``'s arc has
  ``phi_{l,d} >= 1 - w_d`` (``d``'s record is due), every other ``e`` has
  ``phi_{l,e} < 1 - w_e``. The lane draws its first record from that dataset,
  ``d0_l``, then follows the recurrence. So the first records of the ``L``
  lanes are a systematic sample of the token shares: each dataset starts
  ``floor(L*w_d)`` or ``ceil(L*w_d)`` lanes. (The recurrence alone draws
  ``d0_l`` first when records cost the same; not when ``d0_l``'s records are
  longer, since it finishes longer records later.) This is what the first
  global batch shows when a lane's step is shorter than a record: one document
  piece per lane.

The phases depend on the seed, the names, the shares and ``L`` (all part of
the data contract), never on the dataset order or the number of ranks;
``cbar_d`` is an exact integer sum over a count, from the calibration, which
states store. So a lane's offsets are a pure function of the plan: states keep
only ``t_d`` and the records drawn, and a restored plan recomputes the offsets
and continues exactly as the uninterrupted one.

Bound. For lane ``l`` and dataset ``d`` (normalised shares ``w``; ``cmax_e`` the
largest record cost of ``e``; ``s_e = phi_{l,e} * cbar_e``), while every
dataset with a share is active (always, with ``exhausted="repeat"``), at every
token of the lane's stream the estimated tokens of ``d`` minus ``w_d`` times the
lane's tokens lie in ``[-A_{l,d}, B_{l,d}]`` (proof in :mod:`pipeline.mixture`)::

    B_{l,d} = (1 - w_d) * s_d + w_d * sum_{e != d} (cmax_e - s_e)
    A_{l,d} = (1 - w_d) * (cmax_d - s_d) + w_d * sum_{e != d} s_e

widened by the lane's first record (from ``d0 = d0_l``, cost ``c0``):
``B_{l,d0} = max(B_{l,d0}, (1 - w_{d0}) * c0)`` and, for ``d != d0``,
``A_{l,d} += w_d * (max(c0, s_{d0}) - s_{d0})``. Any contiguous piece of the
stream (a packed sequence) deviates by at most
``A_{l,d} + B_{l,d} <= (1 - w_d) * cmax_d + w_d * sum_{e != d} cmax_e + c0``:
a few record costs, however long the lane has run. For a small share the
surplus is about ``s_d``, the part of a record the phase credits: over
stratified lanes about half a record per lane, where lanes all in phase were
each a whole record ahead after their first round of datasets.

What a step delivers, per lane:

* packing cuts the stream into sequences without reordering it, and pads at
  a flush point belong to no dataset (shares count real tokens); a flush
  drops a lone last token of a window (at most one token per window);
* a shuffle buffer of ``S`` sequences (``S <= 1``: none, ``S = 0``) holds at
  most ``S`` of them, so the lane's first ``n`` delivered sequences are its
  first ``m <= n + S`` packed ones (a prefix) less ``m - n`` of them (each a
  contiguous piece).

So over the first ``k`` global batches, with ``P`` their real tokens, ``X_d`` the
real tokens of ``d``, ``W_l`` the flush windows lane ``l`` closed until it
delivered its part of them and ``R_l = A_{l,d} + B_{l,d} + W_l``::

    X_d - w_d * P <= sum_l (B_{l,d} + w_d * W_l + S * R_l)
    w_d * P - X_d <= sum_l (A_{l,d} + (1 - w_d) * W_l + S * R_l)

plus the calibration error (real tokens differ from estimated costs by the
tokenizer's deviation from the measured tokens/byte). The bound does not grow
with ``k``: the share error falls like ``1 / P`` from the first step on.

Calibration. ``tokens_per_byte`` is measured once per dataset with the run's
tokenizer on a deterministic sample: its records in the order ``perm(name)``
until ``calibration_bytes``. Like the held-out records it depends on the
dataset, never on the seed or the mixture, so every seed of a contract
estimates costs alike, and a process measures each (dataset, tokenizer, sample
size) once: later plans of the same data (an agent's hundreds of dry runs)
reuse it. The values are part of the plan: they are stored in pipeline states
and adopted on restore, never re-measured.

Held-out records. With ``holdout_bytes = B > 0`` each dataset sets
``k = min(K, floor(n / 4))`` records aside for evaluation (``K = holdout_docs``,
``n`` its records; fewer than 2 is refused): the first ``k`` of ``perm(name)``,
an order seeded by the dataset name only, so every seed, mixture and lane count
holds out the same records. Training never sees them: the epoch permutations
above run over the remaining ``n_d`` records. ``B`` is the budget of scored
bytes per dataset, never exceeded (:func:`cut_to_budget`): every held-out
document is scored on its first ``min(len_i, c)`` bytes, with the largest cap
``c`` such that ``sum_i min(len_i, c) <= B`` (water filling: short documents
whole, long ones cut at the same length, at a character boundary), so an
eval's cost is set by ``B`` whatever the documents' lengths.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from pipeline.dataset import Dataset
from pipeline.errors import ConfigError, StateError
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
tokenizer fingerprint, sample bytes): a pure function of them (module docstring)."""
_MEASURED_LOCK = threading.Lock()


def cut_to_budget(texts: Sequence[str], budget: int) -> list[str]:
    """Each text's first ``min(len_i, c)`` UTF-8 bytes, ``c`` the largest cap keeping the total
    within ``budget`` (module docstring); a cut never splits a character."""
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
        self._mean_costs = None

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
        """Global ids of a dataset's held-out records, in their selection order (module docstring)."""
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

    def mean_cost(self, dataset_index: int) -> float:
        """Mean estimated cost of a dataset's training records, ``cbar_d`` (module docstring).

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
        """``phi_{l,d}`` of every dataset for lane ``lane`` of ``num_lanes`` (module docstring)."""
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
        """The dataset whose arc holds the lane's point: its first draw (module docstring)."""
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
        """Starting offsets ``o_{l,d} = -phi_{l,d} * cbar_d`` of a lane (module docstring)."""
        return [-phi * self.mean_cost(d) for d, phi in enumerate(self.lane_phases(lane, num_lanes))]


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
                        record = self._record(e, self._drawn[e])
                        pending = self._next[e] = (record, int(self._costs[e][record]))
                    next_costs[e] = pending[1]
            if self._fresh and self._start is not None and self._active[self._start]:
                d = self._start  # the lane's first record (module docstring)
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

    def _record(self, d: int, k: int) -> int:
        """The lane's ``k``-th record of dataset ``d``: stream position ``k*L + lane``."""
        epoch, i = divmod(k * self.num_lanes + self.lane, self._sizes[d])
        cached_epoch, perm = self._perms.get(d, (-1, None))
        if cached_epoch != epoch or perm is None:
            perm = self.source.permutation(d, epoch)
            self._perms[d] = (epoch, perm)
        return int(perm[i])
