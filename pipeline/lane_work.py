"""What a pipeline's lanes draw their records through: the workers that tokenize (or run the
processing chain, then tokenize) and each lane's plan over them.

The one place that chooses between the plain path and the processed one, so that a new
stage is assembled here rather than in :class:`pipeline.pipeline.Pipeline`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.builder_config import LaneOptions, TokenizeConfig
from pipeline.io.token_store import TokenStore
from pipeline.lane_plan import LanePlan
from pipeline.processed_plan import ProcessedLanePlan
from pipeline.processing import Decontaminator, ProcessChain
from pipeline.repeat_index import RepeatIndex, repeat_indexes
from pipeline.runners import Runner
from pipeline.source import WorkSource
from pipeline.stages.encode import Encoder, TextEncoder
from pipeline.stages.process import ProcessWork
from pipeline.stages.token_cache import TokenCache
from pipeline.stages.tokenize import TokenizeWork
from pipeline.stats import PipelineCounters


@dataclass(frozen=True)
class LaneWork:
    """The workers of a pipeline and how each lane plans its records over them."""

    runner: Runner
    chain: ProcessChain | None
    """The processing chain, decontamination first; None: records are tokenized only."""
    repeats: Sequence[Sequence[tuple[int, RepeatIndex]]] = ()
    """Per order, the repeat indexes of the processed path (:mod:`pipeline.repeat_index`)."""

    def plan(
        self,
        source: WorkSource,
        lane: int,
        num_lanes: int,
        state: Mapping[str, Any] | None,
        *,
        counters: PipelineCounters,
    ) -> LanePlan:
        """Lane ``lane``'s plan (restored from ``state`` if given)."""
        if self.chain is None:
            return source.lane_plan(lane, num_lanes, state, counters=counters)
        return ProcessedLanePlan(
            source,
            lane,
            num_lanes,
            state,
            runner=self.runner,
            step_names=self.chain.names,
            counters=counters,
            repeats=self.repeats,
        )


def lane_work(
    source: WorkSource,
    tokenize: TokenizeConfig,
    options: LaneOptions,
    process_chain: ProcessChain,
) -> LaneWork:
    """The workers for ``source``'s records: decontamination against its never-trained
    text, then ``process_chain`` if it has steps, then ``tokenize``; each record's outcome
    answered by the token cache where ``options`` name one."""
    decontaminator = Decontaminator(source.never_trained(), options.overlap_ngram)
    chain = ProcessChain([decontaminator]).then(process_chain)
    encoder: Encoder = TextEncoder(tokenize.tokenizer_id, chain)
    if options.token_cache_dir is not None:
        store = TokenStore(Path(options.token_cache_dir).expanduser(), options.token_cache_bytes)
        encoder = TokenCache(encoder, store)
    if not process_chain:
        work = TokenizeWork(source.datasets, encoder)
        return LaneWork(Runner(options.runner, tokenize.parallelism, "tokenize", work), None)
    runner = Runner(
        options.runner, tokenize.parallelism, "process", ProcessWork(source.datasets, encoder)
    )
    return LaneWork(runner, chain, repeat_indexes(chain, source.orders))
