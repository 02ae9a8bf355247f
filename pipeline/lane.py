"""``LaneStream``: one lane's sequences, flushed every ``flush_every`` chunks.

A lane's plan chunks go through the runner's tokenize workers, in chunk order, to the
packer and the shuffle buffer. Every ``K`` chunks (a flush window) both empty, so a window's
sequences are a pure function of the plan position at its start, and a restore replays at
most one window: its cost does not grow with training progress.

Design: docs/design/pipeline_lanes.md
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.errors import StageError
from pipeline.lane_plan import LanePlan
from pipeline.processing import StepKind
from pipeline.runners import Runner, Ticket
from pipeline.source import WorkSource
from pipeline.stages.pack import PackedSequence, TokenizedChunk, WrapPacker
from pipeline.stages.shuffle import ShuffleBuffer
from pipeline.stages.tokenize import WorkChunk, first_pointer
from pipeline.stats import PipelineCounters


class _Made:
    """The ticket of a chunk whose tokens a processed plan made already."""

    def __init__(self, tokenized: TokenizedChunk) -> None:
        self._tokenized = tokenized

    def result(self) -> TokenizedChunk:
        return self._tokenized


class LaneExhausted(Exception):
    """The lane's plan has ended and it cannot deliver the sequences asked for."""


@dataclass
class _Window:
    index: int
    plan_state: dict[str, Any]
    ready: deque[PackedSequence] = field(default_factory=deque)
    delivered: int = 0
    to_skip: int = 0
    complete: bool = False


@dataclass
class _InFlightChunk:
    window: int
    closes_window: bool
    chunk: WorkChunk
    ticket: Ticket[TokenizedChunk]


class LaneStream:
    """Produces one lane's packed, shuffled sequences in a deterministic order."""

    def __init__(
        self,
        source: WorkSource,
        plan: LanePlan,
        *,
        runner: Runner[WorkChunk, TokenizedChunk],
        packer: WrapPacker,
        shuffle: ShuffleBuffer[PackedSequence],
        flush_every: int,
        prefetch: int,
        counters: PipelineCounters,
        state: Mapping[str, Any] | None = None,
        ordered: bool = True,
    ) -> None:
        assert flush_every >= 1, f"flush_every must be >= 1, got {flush_every}"
        self.lane = plan.lane
        self._datasets = source.datasets
        self._runner = runner
        self._counters = counters
        self._ordered = ordered
        self._packer = packer
        self._shuffle = shuffle
        self._flush_every = flush_every
        self._prefetch = max(1, prefetch)
        start_window = 0 if state is None else int(state["window"])
        self._plan = plan
        self._windows: deque[_Window] = deque()
        self._inflight: deque[_InFlightChunk] = deque()
        self._plan_done = False
        self._next_window = start_window  # window of the next chunk to submit
        self._chunks_in_window = 0
        self._open_window = start_window  # window the packer/shuffle are working on
        self._shuffle.start_window(self.lane, start_window)
        skip = 0 if state is None else int(state["delivered"])
        self._pending_skip = (start_window, skip)

    # -- consumer side -------------------------------------------------------------------------

    def take(self, n: int) -> list[PackedSequence]:
        """Return the next ``n`` sequences of the lane; raise LaneExhausted if it ends first."""
        while self.available() < n:
            if not self._process_next_chunk():
                raise LaneExhausted(f"lane {self.lane} has no more data")
        out: list[PackedSequence] = []
        while len(out) < n:
            head = self._windows[0]
            while head.ready and len(out) < n:
                out.append(head.ready.popleft())
                head.delivered += 1
            if head.complete and not head.ready:
                self._windows.popleft()
        self.submit_ahead()
        return out

    def state(self) -> dict[str, Any]:
        """The lane's restore position (see the design doc)."""
        for window in self._windows:
            if not (window.complete and not window.ready):
                return {
                    "window": window.index,
                    "plan": window.plan_state,
                    "delivered": window.delivered,
                }
        return {"window": self._next_window, "plan": self._plan.state(), "delivered": 0}

    def drain(self) -> int:
        """Process the rest of a finite plan; return how many sequences were left undelivered."""
        while self._process_next_chunk():
            pass
        left = self.available()
        self._windows.clear()
        return left

    def available(self) -> int:
        """Sequences ready to be taken without more work."""
        return sum(len(w.ready) for w in self._windows)

    # -- producer side -------------------------------------------------------------------------

    def submit_ahead(self) -> None:
        """Keep ``prefetch`` chunks submitted to the tokenize workers."""
        while len(self._inflight) < self._prefetch and not self._plan_done:
            if self._chunks_in_window == 0:
                plan_state = self._plan.state()
            chunk = self._plan.next_chunk()
            if chunk is None:
                self._plan_done = True
                break
            if self._chunks_in_window == 0:
                window = _Window(self._next_window, plan_state)
                if self._pending_skip[0] == window.index:
                    window.to_skip = window.delivered = self._pending_skip[1]
                self._windows.append(window)
            self._chunks_in_window += 1
            closes = self._chunks_in_window == self._flush_every
            try:
                ticket = (
                    self._runner.submit(chunk)
                    if chunk.tokenized is None
                    else _Made(chunk.tokenized)
                )
            except Exception as exc:  # e.g. BrokenProcessPool: a worker died since the last chunk
                raise self._stage_error(chunk, exc) from exc
            self._inflight.append(_InFlightChunk(self._next_window, closes, chunk, ticket))
            self._counters.tokenize.items_in += 1
            if closes:
                self._next_window += 1
                self._chunks_in_window = 0

    def _process_next_chunk(self) -> bool:
        """Process one chunk in order (or close the last window); False when nothing is left."""
        self.submit_ahead()
        if not self._inflight:
            if self._chunks_in_window == 0:
                return False
            # The plan ended inside a window: close it.
            self._close_window(self._find_window(self._open_window))
            self._chunks_in_window = 0
            self._next_window += 1
            return True
        item = self._next_in_flight()
        window = self._find_window(item.window)
        tokenized = self._wait_for_tokens(item)
        began = time.perf_counter()
        packed = self._packer.add(tokenized)
        self._counters.pack.busy_s += time.perf_counter() - began
        self._push_to_shuffle(window, packed)
        if item.closes_window:
            self._close_window(window)
        return True

    def _next_in_flight(self) -> _InFlightChunk:
        """The oldest chunk in flight; with ``ordered=False``, the first finished one of its window."""
        if self._ordered or not isinstance(self._inflight[0].ticket, Future):
            return self._inflight.popleft()
        head_window = self._inflight[0].window
        candidates = [i for i in self._inflight if i.window == head_window]
        done, _ = wait([i.ticket for i in candidates], return_when=FIRST_COMPLETED)  # type: ignore[misc]
        item = next(i for i in candidates if i.ticket in done)
        if item.closes_window and len(candidates) > 1:
            # The window's closing chunk must come last; take another finished one first.
            item = candidates[0]
        self._inflight.remove(item)
        return item

    def _wait_for_tokens(self, item: _InFlightChunk) -> TokenizedChunk:
        """Wait for a chunk's tokens; count them; name the chunk's records if its worker failed."""
        began = time.perf_counter()
        try:
            tokenized = item.ticket.result()
        except StageError:
            raise
        except Exception as exc:  # e.g. BrokenProcessPool when a worker process was killed
            raise self._stage_error(item.chunk, exc) from exc
        c = self._counters.tokenize
        c.wait_s += time.perf_counter() - began
        c.items_out += 1
        c.records += len(tokenized.doc_lengths)
        c.tokens += len(tokenized.tokens)
        c.bytes += tokenized.text_bytes
        c.encoded += tokenized.encoded
        c.busy_s += tokenized.busy_s
        self._counters.pack.tokens += len(tokenized.tokens)
        for d in tokenized.removed.tolist():
            self._counters.count_removed(self._datasets[d].name, str(StepKind.DECONTAMINATE))
        for d in tokenized.overlapping.tolist():
            self._counters.count_overlapping(self._datasets[d].name)
        for d, count in enumerate(np.bincount(tokenized.doc_sources).tolist()):
            if count:
                self._counters.count_read(self._datasets[d].name, count)
        for d, count in enumerate(np.bincount(item.chunk.repeated).tolist()):
            if count:
                self._counters.count_repeated(self._datasets[d].name, count)
        return tokenized

    def _stage_error(self, chunk: WorkChunk, exc: BaseException) -> StageError:
        """The runner's failure on ``chunk``, naming its first record."""
        dataset, pointer = first_pointer(chunk, self._datasets)
        return StageError(self._runner.name, dataset, pointer, exc)

    def _close_window(self, window: _Window) -> None:
        tail = self._packer.flush()
        self._counters.padded_sequences += len(tail)
        self._push_to_shuffle(window, tail)
        began = time.perf_counter()
        self._queue_ready_sequences(window, self._shuffle.flush())
        self._counters.shuffle.busy_s += time.perf_counter() - began
        window.complete = True
        self._open_window = window.index + 1
        self._shuffle.start_window(self.lane, self._open_window)

    def _push_to_shuffle(self, window: _Window, sequences: list[PackedSequence]) -> None:
        self._counters.pack.items_out += len(sequences)
        self._counters.shuffle.items_in += len(sequences)
        began = time.perf_counter()
        self._queue_ready_sequences(window, self._shuffle.push_many(sequences))
        self._counters.shuffle.busy_s += time.perf_counter() - began

    def _queue_ready_sequences(self, window: _Window, sequences: list[PackedSequence]) -> None:
        self._counters.shuffle.items_out += len(sequences)
        skipped = min(window.to_skip, len(sequences))
        window.to_skip -= skipped  # those were delivered before the state was taken
        window.ready.extend(sequences[skipped:])

    def _find_window(self, index: int) -> _Window:
        for window in self._windows:
            if window.index == index:
                return window
        raise AssertionError(f"window {index} of lane {self.lane} is not tracked")
