"""``LanePlan``: one lane's stream of work chunks, drawn by the plan's rules (design doc)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from pipeline.dataset import Dataset, ExhaustedPolicy
from pipeline.mixture import Mixture, earliest_finish
from pipeline.order import DatasetOrder
from pipeline.stages.tokenize import WorkChunk
from pipeline.stats import PipelineCounters


class PlanSource(Protocol):
    """What a lane plan reads of the plan that makes it (:class:`pipeline.source.WorkSource`)."""

    datasets: Sequence[Dataset]
    orders: Sequence[DatasetOrder]
    phases: Sequence[tuple[int | None, Mixture]]
    """``(until_tokens, Mixture)`` of each mixture phase."""
    chunk_tokens: int

    def lane_offsets(self, lane: int, num_lanes: int, phase: int = 0) -> list[float]: ...

    def lane_start(self, lane: int, num_lanes: int, phase: int = 0) -> int | None: ...

    def record_cost(self, dataset_index: int, key: int) -> int: ...

    def mean_cost(self, dataset_index: int) -> float: ...


class LanePlan:
    """Emits one lane's work chunks; its state is a handful of integers per dataset."""

    def __init__(
        self,
        source: PlanSource,
        lane: int,
        num_lanes: int,
        state: Mapping[str, Any] | None,
        *,
        counters: PipelineCounters | None = None,
    ) -> None:
        self.source = source
        self._counters = counters
        self.lane = lane
        self.num_lanes = num_lanes
        names = [ds.name for ds in source.datasets]
        self._orders = source.orders
        self._stops = [ds.exhausted is ExhaustedPolicy.STOP for ds in source.datasets]
        self._staged = len(source.phases) > 1
        if state is None:
            self._chunk = 0
            self._drawn = [0] * len(names)
            self._tokens = [0] * len(names)
            self._phase = 0
            self._lane_tokens = 0
        else:
            self._chunk = int(state["chunk"])
            self._drawn = [int(state["drawn"][n]) for n in names]
            self._tokens = [int(state["tokens"][n]) for n in names]
            self._phase = int(state.get("phase", 0))
            self._lane_tokens = int(state.get("lane_tokens", 0))
            for name, order in zip(names, self._orders, strict=True):
                if name in state.get("cursors", {}):  # order v2: no counting of passed shards
                    order.adopt_cursor(state["cursors"][name])
        self._names = names
        self._offsets = source.lane_offsets(lane, num_lanes, self._phase)
        self._start = source.lane_start(lane, num_lanes, self._phase)
        self._fresh = not any(self._tokens)  # no draw yet in this phase
        # (record, cost) of the record each dataset would give next; recomputed after a draw.
        self._next: list[tuple[int, int] | None] = [None] * len(names)
        self._active = [
            not stop or order.in_first_epoch(drawn * num_lanes + lane)
            for stop, drawn, order in zip(self._stops, self._drawn, self._orders, strict=True)
        ]
        self._repeating = [False] * len(names)  # set once a dataset's draws pass epoch 0
        self._repeated: list[int] = []  # datasets of this chunk's draws past epoch 0

    def state(self) -> dict[str, Any]:
        """JSON-serialisable position of the plan (before the next chunk), with each order's
        cursor where it has one (v2: the block of the next draw, so a restore indexes no
        shard it has passed)."""
        state: dict[str, Any] = {
            "chunk": self._chunk,
            "drawn": dict(zip(self._names, self._drawn, strict=True)),
            "tokens": dict(zip(self._names, self._tokens, strict=True)),
        }
        if self._staged:  # a plain mixture's state is what it always was
            state["phase"] = self._phase
            state["lane_tokens"] = self._lane_tokens
        cursors = {}
        for name, order, drawn in zip(self._names, self._orders, self._drawn, strict=True):
            cursor = order.cursor(drawn * self.num_lanes + self.lane)
            if cursor is not None:
                cursors[name] = cursor
        if cursors:
            state["cursors"] = cursors
        return state

    def next_chunk(self) -> WorkChunk | None:
        """Plan the next chunk, or return None when every dataset of the lane is exhausted."""
        chunk_tokens = self.source.chunk_tokens
        ds_ids: list[int] = []
        rec_ids: list[int] = []
        estimated = 0
        next_costs = [0] * len(self._names)
        while estimated < chunk_tokens:
            if self._staged:
                self._enter_due_phase()
            shares = self.source.phases[self._phase][1].shares
            for e, w in enumerate(shares):
                if self._active[e] and w > 0:
                    pending = self._next[e]
                    if pending is None:
                        pending = self._next[e] = self._upcoming(e)
                    if pending is not None:  # None: the dataset ended while looking ahead
                        next_costs[e] = pending[1]
            if self._fresh and self._start is not None and self._active[self._start]:
                d = self._start  # the lane's first record (design doc)
            else:
                d = earliest_finish(
                    self._tokens,
                    self._offsets,
                    next_costs=next_costs,
                    shares=shares,
                    active=self._active,
                )
            self._fresh = False
            if d is None:
                break
            pending = self._next[d]
            assert pending is not None
            record, cost = pending
            self._next[d] = None
            self._take(d, record)
            if self._is_repeat(d):
                self._repeated.append(d)
            self._drawn[d] += 1
            self._tokens[d] += cost
            self._lane_tokens += cost
            estimated += cost
            ds_ids.append(d)
            rec_ids.append(record)
            if self._stops[d] and not self._orders[d].in_first_epoch(
                self._drawn[d] * self.num_lanes + self.lane
            ):
                self._end(d)
        if not ds_ids:
            return None
        chunk = self._make_chunk(ds_ids, rec_ids)
        self._chunk += 1
        return chunk

    # -- what a processed plan (pipeline/processed_plan.py) changes ----------------------------

    def _upcoming(self, d: int) -> tuple[int, int] | None:
        """The record dataset ``d`` gives next and its token cost (here: estimated from its
        bytes); None if the dataset has ended."""
        record = self._find_lane_record(d, self._drawn[d])
        return record, self.source.record_cost(d, record)

    def _take(self, d: int, record: int) -> None:
        """Called when the plan draws ``record``, dataset ``d``'s upcoming record."""

    def _make_chunk(self, ds_ids: list[int], rec_ids: list[int]) -> WorkChunk:
        """The work chunk of the records drawn, in draw order."""
        repeated, self._repeated = self._repeated, []
        return WorkChunk(
            lane=self.lane,
            index=self._chunk,
            datasets=np.asarray(ds_ids, dtype=np.int16),
            records=np.asarray(rec_ids, dtype=np.int64),
            repeated=np.asarray(repeated, dtype=np.int16),
        )

    def _is_repeat(self, d: int) -> bool:
        """Whether dataset ``d``'s next position lies past its first epoch (a record read
        again; none ever is in a dataset that stops there)."""
        if not self._repeating[d] and not self._stops[d]:
            position = self._drawn[d] * self.num_lanes + self.lane
            self._repeating[d] = not self._orders[d].in_first_epoch(position)
        return self._repeating[d]

    def _end(self, d: int) -> None:
        """Dataset ``d`` has ended for this lane (``exhausted: stop``): counted, once."""
        self._active[d] = False
        if self._counters is not None:
            self._counters.count_ran_out(self._names[d])

    def _enter_due_phase(self) -> None:
        """Enter the next phase once this lane has drawn its part of the current phase's
        bound: its own shares from then on, on token counts and offsets of its own."""
        until = self.source.phases[self._phase][0]
        if until is None or self._lane_tokens * self.num_lanes < until:
            return
        self._phase += 1
        self._tokens = [0] * len(self._names)
        self._offsets = self.source.lane_offsets(self.lane, self.num_lanes, self._phase)
        self._start = self.source.lane_start(self.lane, self.num_lanes, self._phase)
        self._fresh = True

    def _find_lane_record(self, d: int, k: int) -> int:
        """The lane's ``k``-th record of dataset ``d``: stream position ``k*L + lane``."""
        return self._orders[d].key_at(k * self.num_lanes + self.lane)
