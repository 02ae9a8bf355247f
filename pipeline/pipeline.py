"""``Pipeline``: the lane pipeline's builder, iterator and state.

Every step takes ``G/L`` sequences from each owned lane, in lane order, so the global batch
is the same whatever ``dp``, micro-batch, parallelism or runner.
Design: docs/design/pipeline_overview.md, "The builder".
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Generator, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from pipeline.batch import MicroBatch
from pipeline.builder_config import (
    BatchConfig,
    LaneOptions,
    PackConfig,
    ShuffleConfig,
    TokenizeConfig,
    with_updates,
)
from pipeline.digest import lane_digest
from pipeline.errors import ConfigError, StateError
from pipeline.lane import LaneExhausted, LaneStream
from pipeline.lane_work import lane_work
from pipeline.prefetch import BackgroundIterator
from pipeline.processing import (
    NORMALIZATION,
    ProcessChain,
    ProcessStep,
    parse_chain,
)
from pipeline.runners import Runner
from pipeline.source import WorkSource
from pipeline.stages.pack import PackedSequence, PackingAlgorithm, WrapPacker
from pipeline.stages.shuffle import ShuffleBuffer
from pipeline.state import STATE_FORMAT, check_state, fingerprint
from pipeline.stats import PipelineCounters
from pipeline.tokenizer import Tokenizer, load_tokenizer


@dataclass
class _Step:
    """One step's local batch, assembled by the producer."""

    index: int
    sequences: list[PackedSequence]
    lanes: list[int]
    digests: dict[int, bytes]
    lane_states: dict[str, Any]
    """Every owned lane's restore position once this step is delivered."""


class Pipeline:
    """The lane pipeline of one data-parallel rank (see module docstring)."""

    def __init__(self, source: WorkSource) -> None:
        self.source = source
        self.lane_options = LaneOptions()
        self.tokenize_config: TokenizeConfig | None = None
        self.pack_config: PackConfig | None = None
        self.shuffle_config = ShuffleConfig()
        self.batch_config: BatchConfig | None = None
        self.process_chain = ProcessChain([])
        self._restore: Mapping[str, Any] | None = None
        self._lanes: list[LaneStream] = []
        self._runner: Runner | None = None
        self._started = False
        self._delivered: tuple[int, dict[str, Any]] = (0, {})  # (steps done, lane states)
        self._microbatches_left = 0
        self._counters = PipelineCounters(label_tokens={ds.name: 0 for ds in source.datasets})

    # -- builder -------------------------------------------------------------------------------

    def options(self, **kwargs: Any) -> Pipeline:
        """Set lane layout and performance knobs (fields of :class:`LaneOptions`)."""
        self._check_not_started()
        self.lane_options = with_updates(self.lane_options, kwargs, "options")
        if "io_options" in kwargs:
            for dataset in self.source.datasets:
                dataset.set_io_options(kwargs["io_options"])
        return self

    def tokenize(
        self, tokenizer_id: str = "gpt2", field: str = "text", parallelism: int = 1
    ) -> Pipeline:
        """Add the tokenize stage."""
        self._check_not_started()
        self.tokenize_config = TokenizeConfig(tokenizer_id, field, parallelism)
        return self

    def process(self, *steps: ProcessStep | str | Mapping[str, Any]) -> Pipeline:
        """Add per-record processing before tokenizing (steps, or ``data.process`` entries):
        the plan then draws kept records by their real tokens (docs/curation.md)."""
        self._check_not_started()
        names = [ds.name for ds in self.source.datasets]
        self.process_chain = ProcessChain([s for s in steps if isinstance(s, ProcessStep)]).then(
            parse_chain([s for s in steps if not isinstance(s, ProcessStep)], names)
        )
        return self

    def pack_flat(
        self, max_length: int, algorithm: PackingAlgorithm | str = PackingAlgorithm.WRAP
    ) -> Pipeline:
        """Add fixed-length packing."""
        self._check_not_started()
        self.pack_config = PackConfig(max_length, algorithm)
        return self

    def shuffle(self, buffer_size: int, seed: int = 0) -> Pipeline:
        """Add the seeded per-lane shuffle buffer."""
        self._check_not_started()
        self.shuffle_config = ShuffleConfig(buffer_size, seed)
        return self

    def batch(self, microbatch_size: int, global_batch_size: int | None = None) -> Pipeline:
        """Set micro-batch and global batch sizes (in sequences); the global batch defaults
        to ``microbatch_size * lanes``, the same on every dp size."""
        self._check_not_started()
        self.batch_config = BatchConfig(microbatch_size, global_batch_size)
        return self

    # -- validation and description -------------------------------------------------------------

    def validate(self) -> None:
        """Raise ConfigError, saying what to change, if the configuration cannot work."""
        o, t, p, b = self.lane_options, self.tokenize_config, self.pack_config, self.batch_config
        if t is None or p is None or b is None:
            absent = [n for n, c in (("tokenize", t), ("pack_flat", p), ("batch", b)) if c is None]
            raise ConfigError(f"the pipeline lacks stage(s) {absent}; add them before iterating")
        _require_setting(o.lanes >= 1, f"lanes must be >= 1, got {o.lanes}")
        _require_setting(o.dp_size >= 1, f"dp_size must be >= 1, got {o.dp_size}")
        _require_setting(
            0 <= o.dp_rank < o.dp_size, f"dp_rank must be in [0, {o.dp_size}), got {o.dp_rank}"
        )
        _require_setting(
            o.lanes % o.dp_size == 0,
            f"lanes (L={o.lanes}) must be a multiple of dp_size ({o.dp_size}); choose L as a common "
            f"multiple of the dp sizes you will run on, e.g. L={np.lcm(o.lanes, o.dp_size)}",
        )
        _require_setting(
            self.global_batch_size >= o.lanes and self.global_batch_size % o.lanes == 0,
            f"global_batch_size (G={self.global_batch_size}) must be a positive multiple of lanes "
            f"(L={o.lanes}): every lane gives G/L sequences per step",
        )
        local = self.global_batch_size // o.dp_size
        _require_setting(
            b.microbatch_size >= 1 and local % b.microbatch_size == 0,
            f"microbatch_size ({b.microbatch_size}) must divide the local batch G/dp = "
            f"{self.global_batch_size}/{o.dp_size} = {local}",
        )
        _require_setting(o.flush_every >= 1, f"flush_every must be >= 1, got {o.flush_every}")
        _require_setting(o.overlap_ngram >= 0, f"overlap_ngram must be >= 0, got {o.overlap_ngram}")
        _require_setting(
            t.parallelism >= 0, f"tokenize parallelism must be >= 0, got {t.parallelism}"
        )
        _require_setting(p.max_length >= 1, f"max_length must be >= 1, got {p.max_length}")
        _require_setting(self.shuffle_config.buffer_size >= 0, "shuffle buffer_size must be >= 0")
        for ds in self.source.datasets:
            _require_setting(
                ds.field == t.field,
                f"dataset '{ds.name}' reads field '{ds.field}' but tokenize(field='{t.field}'); "
                "make them the same",
            )

    @property
    def owned_lanes(self) -> range:
        """Lanes of this rank: ``[r*L/dp, (r+1)*L/dp)``."""
        o = self.lane_options
        per_rank = o.lanes // o.dp_size
        return range(o.dp_rank * per_rank, (o.dp_rank + 1) * per_rank)

    def contract(self) -> dict[str, Any]:
        """The data contract: everything that must stay fixed across resumes."""
        self.validate()
        tokenizer = self._load_tokenizer()
        assert self.pack_config is not None and self.batch_config is not None
        contract = {
            **self.source.contract(),
            "tokenizer": {"name": tokenizer.name, "fingerprint": tokenizer.fingerprint},
            "max_length": self.pack_config.max_length,
            "packing": self.pack_config.algorithm,
            "shuffle": asdict(self.shuffle_config),
            "global_batch_size": self.global_batch_size,
            "lanes": self.lane_options.lanes,
            "flush_every": self.lane_options.flush_every,
        }
        # Without a chain or extra scored documents the contract is what it always was.
        if self.process_chain:
            contract["process"] = {
                "steps": self.process_chain.contract(),
                "decontaminate": NORMALIZATION,
                "costs": "processed-tokens",
            }
        return contract

    def contract_fingerprint(self) -> str:
        """SHA-256 of the canonical data contract."""
        return fingerprint(self.contract())

    def explain(self) -> str:
        """Describe stages, parallelism and lane layout in a few lines."""
        self.validate()
        o, t, p, b = self.lane_options, self.tokenize_config, self.pack_config, self.batch_config
        assert t is not None and p is not None and b is not None
        lanes = self.owned_lanes
        local = self.global_batch_size // o.dp_size
        tpb = self.source.tokens_per_byte
        lines = [
            f"Pipeline (contract {self.contract_fingerprint()[:16]})",
            f"  plan      WorkSource seed={self.source.seed} chunk_tokens={self.source.chunk_tokens}"
            f" order={self.source.order}",
        ]
        if len(self.source.phases) > 1:  # a staged mixture: the shares below are phase 0's
            begin = 0
            for k, (until, mixture) in enumerate(self.source.phases):
                shares = " ".join(f"{n}={w}" for n, w in mixture.canonical().items())
                end = "the end" if until is None else f"{until} tokens"
                lines.append(f"    phase {k}: from {begin} tokens to {end}: {shares}")
                begin = until or begin
        for ds, share in zip(self.source.datasets, self.source.mixture.shares, strict=True):
            report = ds.report()
            skipped = sum(report["skipped"].values())
            measured = f" tokens/byte={tpb[ds.name]:.4f}" if tpb else ""
            lines.append(
                f"    {ds.name:<12} share={share:.4f} shards={report['shards']} "
                f"(indexed {report['shards_indexed']}, {report['records']} records) "
                f"skipped={skipped} "
                f"exhausted={ds.exhausted}{measured}"
            )
        if self.process_chain:
            lines.append(
                f"  process   {' -> '.join(self.process_chain.names)} (in the workers; the plan "
                "draws kept records by their real tokens)"
            )
        lines += [
            f"  tokenize  {t.tokenizer_id} field={t.field!r} runner={o.runner} parallelism={t.parallelism}"
            f" prefetch={o.prefetch or 'auto'}/lane",
            f"  pack_flat {p.algorithm} max_length={p.max_length} (accumulator per lane)",
            f"  shuffle   buffer={self.shuffle_config.buffer_size} seed={self.shuffle_config.seed}"
            f" (accumulator per lane, flush every {o.flush_every} chunks)",
            f"  batch     G={self.global_batch_size} -> {self.global_batch_size // o.lanes}/lane/step, "
            f"local={local} = {local // b.microbatch_size} x micro-batch {b.microbatch_size}",
            f"  lanes     L={o.lanes}, dp={o.dp_size}: rank {o.dp_rank} owns lanes "
            f"[{lanes.start}, {lanes.stop})",
        ]
        return "\n".join(lines)

    # -- iteration -----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[MicroBatch]:
        self._start_lanes()
        producer = self._produce_steps()
        prefetch = self.lane_options.prefetch_steps
        steps = BackgroundIterator(producer, prefetch, "zephon-steps") if prefetch else producer
        m = self._require_batch().microbatch_size
        try:
            while True:
                began = time.perf_counter()
                step = next(steps, None)
                if step is None:
                    return
                wait = time.perf_counter() - began
                count = len(step.sequences) // m
                for index in range(count):
                    self._microbatches_left = count - index - 1
                    if self._microbatches_left == 0:
                        # The step is complete once its last micro-batch is handed over.
                        self._delivered = (step.index + 1, step.lane_states)
                    self._counters.count_microbatch(
                        wait if index == 0 else 0.0, is_last=self._microbatches_left == 0
                    )
                    yield MicroBatch(
                        step=step.index,
                        index=index,
                        count=count,
                        sequences=tuple(step.sequences[index * m : (index + 1) * m]),
                        lanes=tuple(step.lanes[index * m : (index + 1) * m]),
                        lane_digests=step.digests,
                    )
        finally:
            steps.close()
            self.close()

    def _produce_steps(self) -> Generator[_Step, None, None]:
        """Assemble steps: G/L sequences from every owned lane, in lane order."""
        per_lane = self.global_batch_size // self.lane_options.lanes
        index = self._delivered[0]
        while True:
            began = time.perf_counter()
            taken = []
            try:
                for stream in self._lanes:
                    taken.append((stream.lane, stream.take(per_lane)))
            except LaneExhausted as exhausted:
                self._end_of_data(exhausted, taken, index)
                return
            self._counters.batch.wait_s += time.perf_counter() - began
            for stream in self._lanes:
                stream.submit_ahead()  # keep every lane's next chunks with the workers
            sequences = [seq for _, seqs in taken for seq in seqs]
            self._counters.count_step(sequences, [ds.name for ds in self.source.datasets])
            yield _Step(
                index=index,
                sequences=sequences,
                lanes=[lane for lane, seqs in taken for _ in seqs],
                digests={lane: lane_digest(lane, seqs) for lane, seqs in taken},
                lane_states={str(s.lane): s.state() for s in self._lanes},
            )
            index += 1

    def _end_of_data(self, exhausted: LaneExhausted, taken: list, step: int) -> None:
        """Report the end of a finite plan (all datasets ``exhausted="stop"``), never silently."""
        undelivered = sum(len(seqs) for _, seqs in taken) + sum(s.drain() for s in self._lanes)
        self._counters.undelivered_at_end = undelivered
        warnings.warn(
            f"data exhausted before step {step}: {exhausted}; {undelivered} sequences of this "
            "rank's other lanes were not delivered (a step needs G/L sequences from every lane)",
            stacklevel=2,
        )

    def _start_lanes(self) -> None:
        if self._started:
            raise ConfigError(
                "a Pipeline is iterated once; build a new one (and load_state_dict) to resume"
            )
        contract = self.contract()  # validates the configuration first
        tokenizer = self._load_tokenizer()
        first_step = 0
        if self._restore is not None:
            check_state(self._restore, contract, self.owned_lanes)
            self.source.set_calibration(self._restore["tokens_per_byte"])
            first_step = int(self._restore["step"])
        else:
            self.source.calibrate(tokenizer)
        self._contract = contract
        o, t, p = self.lane_options, self.tokenize_config, self.pack_config
        assert t is not None and p is not None
        work = lane_work(self.source, t, o, self.process_chain)
        self._runner = work.runner
        for lane in self.owned_lanes:
            restore = None if self._restore is None else self._restore["lanes"][str(lane)]
            plan_state = None if restore is None else restore["plan"]
            plan = work.plan(self.source, lane, o.lanes, plan_state, counters=self._counters)
            self._lanes.append(
                LaneStream(
                    self.source,
                    plan,
                    runner=self._runner,
                    packer=WrapPacker(p.max_length, tokenizer.eos_id),
                    shuffle=ShuffleBuffer(
                        self.shuffle_config.buffer_size, self.shuffle_config.seed
                    ),
                    flush_every=o.flush_every,
                    prefetch=o.prefetch or self._auto_prefetch(),
                    counters=self._counters,
                    state=restore,
                    ordered=o.ordered,
                )
            )
        self._delivered = (first_step, {str(s.lane): s.state() for s in self._lanes})
        for stream in self._lanes:
            stream.submit_ahead()
        self._started = True

    def _auto_prefetch(self) -> int:
        """Chunks per lane to keep in flight: a whole step's worth plus one, so the workers
        tokenize the next step while this one is assembled, and at least two per worker."""
        t, p, b = self.tokenize_config, self.pack_config, self.batch_config
        assert t is not None and p is not None and b is not None
        lanes_here = len(self.owned_lanes)
        step_tokens = self.global_batch_size // self.lane_options.lanes * p.max_length
        per_step = -(-step_tokens // self.source.chunk_tokens)
        return max(per_step + 1, -(-2 * t.parallelism // lanes_here), 2)

    def close(self) -> None:
        """Stop the workers and the orders' background indexing. Safe to call more than once."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        for order in self.source.orders:
            order.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- state ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """This rank's lanes' restore positions after the last completed step (JSON-serialisable)."""
        if not self._started:
            raise StateError(
                "state_dict() before iteration has started; there is nothing to save yet"
            )
        if not self.lane_options.ordered:
            raise StateError(
                "a pipeline with ordered=False has no reproducible state; use ordered=True"
            )
        step, lane_states = self._delivered
        if self._microbatches_left:
            raise StateError(
                f"state_dict() in the middle of step {step} ({self._microbatches_left} "
                "micro-batches not yet taken); save after a step's last micro-batch"
            )
        return {
            "format": STATE_FORMAT,
            "contract": self._contract,
            "contract_fingerprint": fingerprint(self._contract),
            "step": step,
            "tokens_per_byte": self.source.tokens_per_byte,
            "lanes": copy.deepcopy(lane_states),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from a state (merged with ``merge_states`` if saved on several ranks).

        Raises StateError now, naming what differs, unless the state has the same data
        contract and every lane of this rank (checked again when iteration starts, in case
        options change in between).
        """
        self._check_not_started()
        check_state(state, self.contract(), self.owned_lanes)
        self._restore = state

    # -- observability -------------------------------------------------------------------------

    def shards_read(
        self, since: Mapping[str, int] | None = None
    ) -> dict[str, dict[str, dict[str, str]]]:
        """The shards this process has read, by dataset and shard index: each one's file
        name and the SHA-256 of its content (hashed when first read; the run records them
        and the guard checks that compared runs read the same content), or of its remote
        version for a shard read by range, marked ``"identity": "remote-version"``.
        ``since``: per dataset, how many reads a caller has already seen (it gets only the
        later ones)."""
        read = {
            ds.name: ds.read_shard_entries((since or {}).get(ds.name, 0))
            for ds in self.source.datasets
        }
        return {name: entries for name, entries in read.items() if entries}

    def stats(self) -> dict[str, Any]:
        """Counters per stage (records, tokens, bytes, busy/wait seconds), label tokens per
        dataset, skipped records per dataset and reason, and the consumer's wait for data."""
        snapshot = self._counters.snapshot()
        snapshot["skipped"] = {ds.name: ds.report()["skipped"] for ds in self.source.datasets}
        return snapshot

    @property
    def global_batch_size(self) -> int:
        """Sequences per step over all ranks (``.batch``'s, or its default)."""
        b = self._require_batch()
        if b.global_batch_size is not None:
            return b.global_batch_size
        return b.microbatch_size * self.lane_options.lanes

    def _require_batch(self) -> BatchConfig:
        assert self.batch_config is not None, "validate() first"
        return self.batch_config

    def _load_tokenizer(self) -> Tokenizer:
        assert self.tokenize_config is not None
        return load_tokenizer(self.tokenize_config.tokenizer_id)

    def _check_not_started(self) -> None:
        if self._started:
            raise ConfigError("the pipeline has started; configure it before iterating")


def _require_setting(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)
