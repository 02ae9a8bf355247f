"""``WorkSource``: the plan. Decides what is trained on, in which order, per lane.

No record contents are read here except the small calibration sample. Lane ``l`` of ``L``
takes stream positions ``l, l+L, ...`` of each dataset's seeded epoch permutations and draws
records by estimated token cost from the dataset whose next record finishes first
(:mod:`pipeline.mixture`), out of phase with the other lanes: token shares hold within a few
records per lane from the first step, and a lane's offsets are a pure function of the plan.

Design: docs/design/pipeline_plan.md
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pipeline.calibration import MAX_CALIBRATION_RECORDS, measure_tokens_per_byte
from pipeline.choice import parse_choice
from pipeline.dataset import Dataset
from pipeline.errors import ConfigError, StateError
from pipeline.lane_plan import LanePlan
from pipeline.mixture import MixturePhase, checked_phases
from pipeline.order import DatasetOrder, GlobalPermutationOrder, OrderVersion, ShardWindowOrder
from pipeline.order.base import MIN_HOLDOUT_DOCS, OrderSettings
from pipeline.stats import PipelineCounters
from pipeline.tokenizer import Tokenizer

_PHASE_STREAM = 0x9A5E
_DEFAULT_SHARD_WINDOW = 64


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


class WorkSource:
    r"""The data plan: datasets, token-share mixture, seeded order and lane split.

    ``order`` chooses how each dataset's records are ordered (:class:`OrderVersion`; v2,
    the default, reads only the shards a run reaches; v1 is kept for runs made with it);
    ``shard_window`` is v2's number of shards whose records are mixed together.
    ``mixture`` is one set of token shares, or a staged mixture, a list of ``MixturePhase``:
    each lane entering the next phase once it has drawn its part (``until_tokens`` over the
    number of lanes) of the phase's bound, so each phase keeps its own shares over its own
    tokens (docs/design/pipeline_plan.md).
    """

    def __init__(
        self,
        datasets: Sequence[Dataset],
        mixture: Mapping[str, float] | Sequence[MixturePhase],
        *,
        seed: int = 0,
        chunk_tokens: int = 8192,
        calibration_bytes: int = 1 << 20,
        holdout_bytes: int = 0,
        holdout_docs: int = 64,
        order: OrderVersion | str = OrderVersion.V2,
        shard_window: int = _DEFAULT_SHARD_WINDOW,
        eval_sets: Sequence[Dataset] = (),
    ) -> None:
        if not datasets:
            raise ConfigError("WorkSource needs at least one Dataset.")
        names = [ds.name for ds in datasets]
        clashing = sorted({e.name for e in eval_sets} & set(names))
        if clashing:
            raise ConfigError(
                f"evaluation set(s) {clashing} have a training dataset's name; name them apart "
                "(scores are reported by name)"
            )
        names_scored = names + [e.name for e in eval_sets]
        if len(set(names_scored)) != len(names_scored):
            raise ConfigError(
                f"evaluation set names must be unique; got {names_scored[len(names) :]}"
            )
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"dataset names must be unique; repeated: {duplicates}")
        if not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"seed must be an integer >= 0, got {seed!r}")
        if chunk_tokens < 1 or calibration_bytes < 1:
            raise ConfigError("chunk_tokens and calibration_bytes must be >= 1")
        if not isinstance(holdout_bytes, int) or holdout_bytes < 0:
            raise ConfigError(f"holdout_bytes must be an integer >= 0, got {holdout_bytes!r}")
        if not isinstance(holdout_docs, int) or holdout_docs < MIN_HOLDOUT_DOCS:
            raise ConfigError(
                f"holdout_docs must be an integer >= {MIN_HOLDOUT_DOCS} (the sampling error "
                f"of a held-out score needs two documents), got {holdout_docs!r}"
            )
        if not isinstance(shard_window, int) or shard_window < 1:
            raise ConfigError(f"shard_window must be an integer >= 1, got {shard_window!r}")
        self.datasets = list(datasets)
        self.eval_sets = list(eval_sets)
        """Fixed evaluation corpora: every record scored, none trained on."""
        self.phases = checked_phases(mixture, names)
        """``(until_tokens, Mixture)`` per phase; one phase without a bound for a plain mixture."""
        self.mixture = self.phases[0][1]
        """The first phase's mixture (the only one of a plain mixture)."""
        self.seed = seed
        self.chunk_tokens = chunk_tokens
        self.calibration_bytes = calibration_bytes
        self.holdout_bytes = holdout_bytes
        self.holdout_docs = holdout_docs
        self.order = parse_choice(OrderVersion, order, "order")
        self.shard_window = shard_window
        settings = OrderSettings(
            seed=seed,
            holdout_docs=holdout_docs,
            holds_out=holdout_bytes > 0,
            calibration_bytes=calibration_bytes,
            max_calibration_records=MAX_CALIBRATION_RECORDS,
            shard_window=shard_window,
        )
        kind = GlobalPermutationOrder if self.order is OrderVersion.V1 else ShardWindowOrder
        self.orders: list[DatasetOrder] = [kind(ds, settings) for ds in self.datasets]
        self._tokens_per_byte: dict[str, float] | None = None
        self._mean_costs: list[float] | None = None
        self._lock = threading.Lock()

    # -- plan contract -------------------------------------------------------------------------

    def contract(self) -> dict[str, Any]:
        """The plan's part of the data contract (v1 indexes the datasets; v2 reads metadata).

        Order v1's contract is exactly what it was before orders had versions, so runs made
        with it keep their fingerprints.
        """
        contract: dict[str, Any] = {
            "datasets": [
                {
                    "name": ds.name,
                    "fingerprint": order.contract_fingerprint(),
                    "field": ds.field,
                    "exhausted": ds.exhausted,
                    # A text dataset's entry is what it always was.
                    **({"tokens": ds.token_contract()} if ds.pretokenized else {}),
                }
                for ds, order in zip(self.datasets, self.orders, strict=True)
            ],
            "mixture": self.mixture.canonical(),
            "seed": self.seed,
            "chunk_tokens": self.chunk_tokens,
            "holdout_bytes": self.holdout_bytes,
            "holdout_docs": self.holdout_docs,
        }
        if self.eval_sets:  # content, as order v1 fingerprints datasets (they are small)
            contract["eval_sets"] = [
                {
                    "name": e.name,
                    "fingerprint": e.fingerprint,
                    "field": e.field,
                    **({"tokens": e.token_contract()} if e.pretokenized else {}),
                }
                for e in self.eval_sets
            ]
        if len(self.phases) > 1:  # a plain mixture keeps the contract it always had
            contract["phases"] = [
                {"until_tokens": until, "mixture": mixture.canonical()}
                for until, mixture in self.phases
            ]
        if self.order is not OrderVersion.V1:
            # v2's lane phases use the calibration sample's mean cost: its size is contract.
            contract["order"] = {
                "version": str(self.order),
                "shard_window": self.shard_window,
                "calibration_bytes": self.calibration_bytes,
            }
        return contract

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
                    ds.name: measure_tokens_per_byte(order, tokenizer, self.calibration_bytes)
                    for ds, order in zip(self.datasets, self.orders, strict=True)
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
        self._mean_costs = None
        self._check_phase_shares()

    def _check_phase_shares(self) -> None:
        """A bounded phase must give each dataset it names at least one record's tokens:
        a share smaller than that would silently never be drawn."""
        start = 0
        for k, (until, mixture) in enumerate(self.phases):
            if until is None:
                break
            for d, share in enumerate(mixture.shares):
                cost = self._mean_cost_unlocked(d)
                if share > 0 and share * (until - start) < cost:
                    raise ConfigError(
                        f"phase {k} ({until - start} tokens) gives dataset "
                        f"{self.datasets[d].name!r} a share of {share}: "
                        f"{share * (until - start):.0f} tokens, less than one of its records "
                        f"({cost:.0f} tokens on average), so it would get no data; raise its "
                        "share, lengthen the phase, or set the share to 0"
                    )
            start = until

    # -- held-out records --------------------------------------------------------------------

    def heldout_records(self, dataset_index: int) -> np.ndarray:
        """Keys of a dataset's held-out records, in their selection order (design doc)."""
        return self.orders[dataset_index].heldout_keys()

    def heldout_documents(self, dataset_index: int) -> list[str]:
        """The scored text of a dataset's held-out records: cut to ``holdout_bytes`` in all."""
        ds = self.datasets[dataset_index]
        return cut_to_budget(
            ds.read_records(self.heldout_records(dataset_index)), self.holdout_bytes
        )

    def scored_documents(self) -> list[tuple[str, list[str]]]:
        """What evaluation scores, by name: each dataset's held-out documents, then each
        evaluation set's records, each cut to ``holdout_bytes`` in all."""
        scored = [(ds.name, self.heldout_documents(d)) for d, ds in enumerate(self.datasets)]
        for e in self.eval_sets:
            scored.append(
                (e.name, cut_to_budget(e.read_texts(range(e.num_records)), self.holdout_bytes))
            )
        return scored

    def never_trained(self) -> list[str]:
        """Every document evaluation scores, whole (not cut to the scoring budget): the
        datasets' held-out records and the evaluation sets' records."""
        texts = [t for e in self.eval_sets for t in e.read_texts(range(e.num_records))]
        for d, ds in enumerate(self.datasets):
            keys = self.heldout_records(d)
            if len(keys):
                texts += ds.read_records(keys)
        return texts

    def training_records(self, dataset_index: int) -> np.ndarray:
        """Keys of every record training draws from (all but the held-out), sorted.

        Enumerates the dataset (every shard is indexed): for tests and benchmarks, never
        needed by a run.
        """
        return self.orders[dataset_index].training_keys()

    # -- lane plans ----------------------------------------------------------------------------

    def lane_plan(
        self,
        lane: int,
        num_lanes: int,
        state: Mapping[str, Any] | None = None,
        *,
        counters: PipelineCounters | None = None,
    ) -> LanePlan:
        """The chunk stream of one lane, from the beginning or from a saved plan state
        (counting into ``counters`` the lanes in which a dataset ran out)."""
        assert self._tokens_per_byte is not None, "calibrate() or set_calibration() before planning"
        assert 0 <= lane < num_lanes, f"lane must be in [0, {num_lanes}), got {lane}"
        return LanePlan(self, lane, num_lanes, state, counters=counters)

    def record_cost(self, dataset_index: int, key: int) -> int:
        """Estimated token cost of one record: ``round(bytes * tokens/byte) + 1``."""
        assert self._tokens_per_byte is not None, "calibrate() or set_calibration() before planning"
        order = self.orders[dataset_index]
        return order.record_cost(key, self._tokens_per_byte[order.dataset.name])

    def chunk_costs(self, dataset_index: int) -> np.ndarray:
        """Estimated token cost of every record of a dataset, in global record order
        (indexes every shard: for tests and benchmarks)."""
        assert self._tokens_per_byte is not None, "calibrate() or set_calibration() before planning"
        ds = self.datasets[dataset_index]
        return np.rint(ds.record_bytes * self._tokens_per_byte[ds.name]).astype(np.int64) + 1

    def estimated_tokens(self, dataset_index: int) -> float:
        """Tokens of a whole dataset: its text bytes (v2: estimated from shard sizes) times
        the measured tokens per byte."""
        assert self._tokens_per_byte is not None, "calibrate() or set_calibration() first"
        order = self.orders[dataset_index]
        return order.estimated_text_bytes() * self._tokens_per_byte[order.dataset.name]

    def mean_cost(self, dataset_index: int) -> float:
        """Mean estimated record cost of a dataset, ``cbar_d`` (design doc): an exact integer
        sum over a count, so it is the same float on every machine."""
        assert self._tokens_per_byte is not None, "calibrate() or set_calibration() before planning"
        with self._lock:
            return self._mean_cost_unlocked(dataset_index)

    def _mean_cost_unlocked(self, dataset_index: int) -> float:
        assert self._tokens_per_byte is not None
        if self._mean_costs is None:
            self._mean_costs = [math.nan] * len(self.datasets)
        if math.isnan(self._mean_costs[dataset_index]):
            order = self.orders[dataset_index]
            self._mean_costs[dataset_index] = order.mean_cost(
                self._tokens_per_byte[order.dataset.name]
            )
        return self._mean_costs[dataset_index]

    def lane_phases(self, lane: int, num_lanes: int, phase: int = 0) -> list[float]:
        """``phi_{l,d}`` of every dataset for lane ``lane`` of ``num_lanes`` in mixture phase
        ``phase`` (design doc)."""
        rng = np.random.default_rng([_PHASE_STREAM, self.seed])
        x = (int(rng.permutation(num_lanes)[lane]) + float(rng.random())) / num_lanes
        shares = self.phases[phase][1].shares
        total = math.fsum(shares)
        ends, end = [0.0] * len(shares), 0.0
        for d in sorted(range(len(shares)), key=lambda d: self.datasets[d].name):
            end += shares[d] / total
            ends[d] = end
        return [(x - e) % 1.0 for e in ends]

    def lane_start(self, lane: int, num_lanes: int, phase: int = 0) -> int | None:
        """The dataset whose arc holds the lane's point: its first draw in mixture phase
        ``phase`` (design doc)."""
        shares = self.phases[phase][1].shares
        total = math.fsum(shares)
        due = [
            (phi + w / total - 1.0, -d)
            for d, (phi, w) in enumerate(
                zip(self.lane_phases(lane, num_lanes, phase), shares, strict=True)
            )
            if w > 0
        ]
        return -max(due)[1] if due else None

    def lane_offsets(self, lane: int, num_lanes: int, phase: int = 0) -> list[float]:
        """Starting offsets ``o_{l,d} = -phi_{l,d} * cbar_d`` of a lane in mixture phase
        ``phase`` (design doc)."""
        phis = self.lane_phases(lane, num_lanes, phase)
        return [-phi * self.mean_cost(d) for d, phi in enumerate(phis)]
