"""Zephon's lane pipeline on the benchmark workload: throughput and restore cost.

Calibration (``source.calibrate``) and dataset indexing happen before any timed
section; the timed section starts at ``iter(pipeline)`` (worker start-up included)
and ends when the iterator is closed (worker shutdown included).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.timing import Stopwatch, Throughput, time_batches
from benchmarks.workload import MICROBATCH, SEED, SEQ_LEN, TOKENIZER_ID, Workload, open_source
from pipeline import MicroBatch, Pipeline, WorkSource, global_batch_digest, load_tokenizer

SHUFFLE_BUFFER = 64
"""Sequences in each lane's shuffle buffer."""
GLOBAL_BATCH = 64
"""Sequences per step G (8 lanes x 8 sequences)."""


@dataclass(frozen=True)
class PipelineSpec:
    """One pipeline configuration (the performance knobs a benchmark varies)."""

    lanes: int = 8
    parallelism: int = 2
    runner: str = "threads"
    ordered: bool = True
    max_length: int = SEQ_LEN
    global_batch_size: int = GLOBAL_BATCH
    microbatch_size: int = MICROBATCH
    tokenizer: str = TOKENIZER_ID
    """Tokenizer spec (``pipeline.load_tokenizer``)."""

    @property
    def label(self) -> str:
        """Short name, e.g. ``threads p2 L8``."""
        order = "" if self.ordered else " unordered"
        return f"{self.runner} p{self.parallelism} L{self.lanes}{order}"


RESTORE_SPEC = PipelineSpec(max_length=128, global_batch_size=8, microbatch_size=8)
"""Restore benchmark: one 128-token sequence per lane per step, so that 10,000 steps
(10M tokens) are cheap to reach by iterating."""


def build_pipeline(source: WorkSource, spec: PipelineSpec) -> Pipeline:
    """The benchmark pipeline over ``source`` with ``spec``'s knobs (dp size 1)."""
    options: dict[str, Any] = {"lanes": spec.lanes, "runner": spec.runner, "prefetch": 0}
    if not spec.ordered:
        options["ordered"] = False  # passed only when used: older builds lack the option
    return (
        Pipeline(source)
        .options(**options)
        .tokenize(tokenizer_id=spec.tokenizer, field="text", parallelism=spec.parallelism)
        .pack_flat(max_length=spec.max_length, algorithm="wrap")
        .shuffle(buffer_size=SHUFFLE_BUFFER, seed=SEED)
        .batch(microbatch_size=spec.microbatch_size, global_batch_size=spec.global_batch_size)
    )


def calibrated_source(workload: Workload) -> WorkSource:
    """The workload's plan, indexed and calibrated (both untimed and reused by every pipeline)."""
    source = open_source(workload)
    source.calibrate(load_tokenizer(TOKENIZER_ID))
    return source


def consume(batch: MicroBatch) -> int:
    """Materialise a micro-batch's token array, as a trainer would; return its label tokens."""
    batch.tokens()
    return sum(max(0, seq.num_valid - 1) for seq in batch.sequences)


def measure_pipeline(workload: Workload, tokens: int, spec: dict[str, Any]) -> Throughput:
    """Iterate whole steps until at least ``tokens`` label tokens have been delivered."""
    pipeline_spec = PipelineSpec(**spec)
    pipeline = build_pipeline(calibrated_source(workload), pipeline_spec)
    result = time_batches(
        pipeline, consume, enough=lambda batch, total: batch.is_last and total >= tokens
    )
    stats = pipeline.stats()
    result.extra.update(spec=asdict(pipeline_spec), stats=_summarize_stats(stats))
    return result


def _summarize_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """The counters worth keeping from ``Pipeline.stats()`` (whatever this build provides)."""
    keep = ("steps", "microbatches", "consumer_wait_s", "padded_sequences", "data_wait_s")
    summary = {k: stats[k] for k in keep if k in stats}
    for stage in ("tokenize", "pack", "shuffle", "batch"):
        if isinstance(stats.get(stage), dict):
            counters = stats[stage]
            summary[stage] = {
                k: counters[k] for k in ("tokens", "busy_s", "wait_s") if k in counters
            }
    return summary


# -- restore -------------------------------------------------------------------------------------


@dataclass
class _Checkpoint:
    """A state taken after ``step`` steps, and the digest of the step that follows it."""

    step: int
    state: dict[str, Any]
    next_digest: str = ""

    @property
    def mean_window(self) -> float:
        """Index of each lane's current flush window, on average."""
        return statistics.fmean(lane["window"] for lane in self.state["lanes"].values())

    @property
    def mean_offset(self) -> float:
        """Sequences each lane already delivered from its current flush window, on average."""
        return statistics.fmean(lane["delivered"] for lane in self.state["lanes"].values())


def _take_checkpoints(source: WorkSource, steps: Iterable[int]) -> tuple[list[_Checkpoint], float]:
    """Iterate from step 0, keeping the state after each of ``steps``; return them and the time
    from ``iter()`` to the last one (what replaying progress from the start would cost)."""
    wanted = sorted(set(steps))
    pipeline = build_pipeline(source, RESTORE_SPEC)
    taken: list[_Checkpoint] = []
    with Stopwatch() as watch:
        batches = iter(pipeline)
        for batch in batches:
            if taken and not taken[-1].next_digest:
                taken[-1].next_digest = global_batch_digest(batch.lane_digests)
                if len(taken) == len(wanted):
                    break
            if batch.is_last and batch.step + 1 == wanted[len(taken)]:
                taken.append(_Checkpoint(batch.step + 1, pipeline.state_dict()))
        batches.close()
    return taken, watch.seconds


def _time_restore(source: WorkSource, checkpoint: _Checkpoint) -> dict[str, Any]:
    """Seconds from ``load_state_dict`` on a fresh pipeline to its first micro-batch."""
    pipeline = build_pipeline(source, RESTORE_SPEC)
    with Stopwatch() as watch:
        pipeline.load_state_dict(checkpoint.state)
        batches = iter(pipeline)
        first = next(batches)
    tokenized = pipeline.stats().get("tokenize", {}).get("tokens")
    batches.close()
    return {
        "seconds": watch.seconds,
        "cpu_s": watch.cpu_s,
        "other_load_percent": watch.other_load_percent,
        "tokenized": tokenized,
        "matches": global_batch_digest(first.lane_digests) == checkpoint.next_digest,
    }


def measure_restore(
    workload: Workload, early_step: int, late_step: int, reps: int
) -> dict[str, Any]:
    """Restore cost at ``early_step``, ``late_step`` and a phase-matched early step.

    Replay after a restore covers the lane's current flush window up to the sequences
    already delivered from it (plus the shuffle buffer), so its cost depends on where in
    its window each lane stands, not on the step. At ``early_step`` (small) every lane
    is near the start of window 0; at ``late_step`` the lanes are spread over their
    windows. The third point, ``matched``, is the step in window 0 where each lane has
    delivered as many sequences of its window as the lanes have on average at
    ``late_step``: late/matched isolates progress from the position in the window.
    """
    source = calibrated_source(workload)
    (early, late), replay_s = _take_checkpoints(source, (early_step, late_step))
    matched_step = max(1, round(late.mean_offset))
    (matched,), _ = _take_checkpoints(source, (matched_step,))
    points = {"early": early, "matched": matched, "late": late}
    timings: dict[str, list[dict[str, Any]]] = {name: [] for name in points}
    for _ in range(reps):
        for name, checkpoint in points.items():
            timings[name].append(_time_restore(source, checkpoint))
    return {
        "spec": asdict(RESTORE_SPEC),
        "replay_from_start_s": replay_s,
        "points": {name: _describe_checkpoint(cp, timings[name]) for name, cp in points.items()},
    }


def _describe_checkpoint(checkpoint: _Checkpoint, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Where a checkpoint stands in its flush windows, and its restore runs."""
    return {
        "step": checkpoint.step,
        "mean_window": checkpoint.mean_window,
        "mean_offset": checkpoint.mean_offset,
        "runs": runs,
    }
