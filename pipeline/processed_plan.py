"""``ProcessedLanePlan``: a lane plan that draws only the records the processing chain keeps,
by their real token counts.

The plain plan draws records by estimated cost before any is read, so a filter run in the
workers would silently shift the token shares (a dataset whose half is dropped would get half
its share). This plan takes each dataset's records from a :class:`RecordFeed`, which has them
processed and tokenized ahead, skips the dropped ones (counting them by step) and charges the
scheduler each kept record's real tokens: the shares hold on the tokens that survive, within
a few records per lane, as the plain plan's hold on estimates. A dropped record still uses up
its stream position, so positions, states and restores work as in the plain plan.

Design: docs/design/pipeline_processing.md
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pipeline.errors import DataError
from pipeline.lane_plan import LanePlan, PlanSource
from pipeline.record_feed import RecordFeed
from pipeline.repeat_index import RepeatIndex
from pipeline.runners import Runner
from pipeline.stages.pack import TokenizedChunk
from pipeline.stages.process import FeedBatch, ProcessedRecords
from pipeline.stages.tokenize import WorkChunk
from pipeline.stats import PipelineCounters

MAX_DROPPED_IN_A_ROW = 100_000
"""Records of one dataset a lane may see dropped one after another before the pipeline stops
(a chain that keeps nothing would otherwise loop over a repeating dataset for ever)."""

_FEED_DEPTH = 2
"""Batches each feed keeps with the workers."""


class ProcessedLanePlan(LanePlan):
    """One lane's chunks of kept, already tokenized records (see the module docstring)."""

    _counters: PipelineCounters  # always given here

    def __init__(
        self,
        source: PlanSource,
        lane: int,
        num_lanes: int,
        state: Mapping[str, Any] | None,
        *,
        runner: Runner[FeedBatch, ProcessedRecords],
        step_names: Sequence[str],
        counters: PipelineCounters,
        repeats: Sequence[Sequence[tuple[int, RepeatIndex]]],
    ) -> None:
        super().__init__(source, lane, num_lanes, state, counters=counters)
        self._runner = runner
        self._step_names = list(step_names)
        self._repeats = repeats
        self._feeds: list[RecordFeed | None] = [None] * len(self._names)
        self._dropped_in_a_row = [0] * len(self._names)
        self._pieces: list[np.ndarray] = []
        self._text_bytes = 0
        self._busy_s = 0.0
        self._encoded = 0

    def _feed(self, d: int) -> RecordFeed:
        feed = self._feeds[d]
        if feed is None:
            mean = self.source.mean_cost(d)
            feed = self._feeds[d] = RecordFeed(
                self._orders[d],
                d,
                lane=self.lane,
                num_lanes=self.num_lanes,
                start=self._drawn[d],
                runner=self._runner,
                batch_records=min(1024, max(8, round(self.source.chunk_tokens / mean))),
                depth=_FEED_DEPTH,
                first_epoch_only=self._stops[d],
                repeats=self._repeats[d],
            )
        return feed

    def _upcoming(self, d: int) -> tuple[int, int] | None:
        """Dataset ``d``'s next kept record and its real token count; the dropped records
        before it are counted and passed."""
        feed = self._feed(d)
        while (peeked := feed.peek()) is not None:
            key, tokens, step, _ = peeked
            if tokens is not None:
                self._dropped_in_a_row[d] = 0
                return key, len(tokens)
            self._count_read(feed.pop())
            self._counters.count_removed(self._names[d], self._step_names[step])
            if self._is_repeat(d):
                self._counters.count_repeated(self._names[d])
            self._drawn[d] += 1
            self._dropped_in_a_row[d] += 1
            if self._dropped_in_a_row[d] >= MAX_DROPPED_IN_A_ROW:
                raise DataError(
                    f"the processing chain dropped {MAX_DROPPED_IN_A_ROW:,} records of dataset "
                    f"{self._names[d]!r} in a row (lane {self.lane}): it keeps (almost) nothing "
                    "of it; loosen the chain or give the dataset a share of 0"
                )
        self._end(d)  # a dataset that stops at its first epoch's end has ended
        return None

    def _take(self, d: int, record: int) -> None:
        feed = self._feed(d)
        peeked = feed.peek()
        assert peeked is not None and peeked[0] == record and peeked[1] is not None
        self._count_read(feed.pop())
        self._pieces.append(peeked[1])
        if peeked[3]:
            self._counters.count_overlapping(self._names[d])

    def _make_chunk(self, ds_ids: list[int], rec_ids: list[int]) -> WorkChunk:
        tokenized = TokenizedChunk(
            tokens=np.concatenate(self._pieces),
            doc_lengths=np.fromiter((len(p) for p in self._pieces), np.int64, len(self._pieces)),
            doc_sources=np.asarray(ds_ids, dtype=np.int16),
            text_bytes=self._text_bytes,
            encoded=self._encoded,
            busy_s=self._busy_s,
        )
        self._pieces, self._text_bytes, self._busy_s, self._encoded = [], 0, 0.0, 0
        chunk = super()._make_chunk(ds_ids, rec_ids)
        return WorkChunk(
            chunk.lane, chunk.index, chunk.datasets, chunk.records, tokenized, chunk.repeated
        )

    def _count_read(self, batch: ProcessedRecords | None) -> None:
        """A batch's bytes and seconds, counted with the chunk that takes its first record."""
        if batch is not None:
            self._text_bytes += batch.text_bytes
            self._busy_s += batch.busy_s
            self._encoded += batch.encoded
