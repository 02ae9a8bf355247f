"""What the ``Pipeline`` builder's calls set: lane layout and performance options, and the
configuration of each stage (the data contract's part is named in each field's docstring)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from pipeline.choice import parse_choice
from pipeline.errors import ConfigError
from pipeline.runners import RunnerKind
from pipeline.stages.pack import PackingAlgorithm


@dataclass
class LaneOptions:
    """Lane layout and performance knobs (``.options``)."""

    lanes: int = 8
    """Number of lanes L; a common multiple of every dp size the run may use."""
    dp_rank: int = 0
    """This rank's data-parallel index."""
    dp_size: int = 1
    """Number of data-parallel ranks; must divide ``lanes``."""
    flush_every: int = 16
    """Chunks per flush window; bounds restore replay (data contract)."""
    prefetch: int = 0
    """Chunks each lane keeps submitted to the tokenize workers; 0 picks enough to keep
    every worker busy (performance only)."""
    runner: RunnerKind = RunnerKind.THREADS
    """Tokenize runner (a :class:`RunnerKind` or its name; performance only)."""
    prefetch_steps: int = 2
    """Steps assembled ahead on a background thread; 0 assembles in ``next()`` (performance only)."""
    ordered: bool = True
    """False takes chunks in completion order: only to measure what ordering costs; it
    breaks determinism, and such a pipeline refuses ``state_dict()``."""
    overlap_ngram: int = 0
    """Count the training records that share a word n-gram of this length with a scored
    document (13: GPT-3's and DCLM's check; 0: off). Counted, not removed: the data stay
    the same (observability only)."""
    token_cache_dir: str | None = None
    """Folder of the token cache (docs/design/pipeline_token_cache.md): records' tokens
    kept by content, read back by every later run; None: no cache (performance only)."""
    token_cache_bytes: int = 20 << 30
    """The token cache's bound: least recently used entries are evicted beyond it."""
    io_options: dict[str, Any] | None = None
    """Remote shard IO for every dataset of the source, e.g. ``{"cache": {"enabled": True}}``
    (:class:`pipeline.Dataset`'s ``io_options``); None keeps each dataset's own."""

    def __post_init__(self) -> None:
        self.runner = parse_choice(RunnerKind, self.runner, "runner")


@dataclass
class TokenizeConfig:
    """``.tokenize`` stage."""

    tokenizer_id: str = "gpt2"
    """Tokenizer name (tiktoken encoding provisioned at set-up)."""
    field: str = "text"
    """Record field holding the text; must match every Dataset's ``field``."""
    parallelism: int = 1
    """Tokenize workers; 0 runs inline in the consumer (performance only)."""


@dataclass
class PackConfig:
    """``.pack_flat`` stage."""

    max_length: int = 2048
    """Sequence length T (inputs per sequence)."""
    algorithm: PackingAlgorithm = PackingAlgorithm.WRAP
    """Packing algorithm (a :class:`PackingAlgorithm` or its name)."""

    def __post_init__(self) -> None:
        self.algorithm = parse_choice(PackingAlgorithm, self.algorithm, "packing algorithm")


@dataclass
class ShuffleConfig:
    """``.shuffle`` stage."""

    buffer_size: int = 0
    """Shuffle buffer size per lane; 0 or 1 keeps the packed order."""
    seed: int = 0
    """Seed of the shuffle (combined with lane and flush window)."""


@dataclass
class BatchConfig:
    """``.batch`` stage."""

    microbatch_size: int = 1
    """Sequences per micro-batch; must divide the local batch G/dp (performance only)."""
    global_batch_size: int | None = None
    """Sequences per step over all ranks, G; a multiple of ``lanes``. None: one micro-batch
    per lane, ``microbatch_size * lanes`` (independent of dp, as G must be)."""


def with_updates(config: Any, changes: Mapping[str, Any], where: str) -> Any:
    """A copy of the dataclass ``config`` with ``changes``; ConfigError naming ``where``
    (the builder call) and the known fields for an unknown one."""
    known = set(asdict(config))
    unknown = sorted(set(changes) - known)
    if unknown:
        raise ConfigError(f"{where}() got unknown option(s) {unknown}; known: {sorted(known)}")
    return type(config)(**{**asdict(config), **changes})
