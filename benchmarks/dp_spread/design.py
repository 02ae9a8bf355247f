"""The dp-spread study's fixed design: loaders, models, batch shape, and the names its parts share.

Imports nothing heavy: the CLI, the analysis and the report read it without loading
torch, and :mod:`benchmarks.dp_spread.configs` (inside the trainer) reads it too.
"""

from __future__ import annotations

from dataclasses import dataclass

LOADERS = ("stock", "zephon")
GLOBAL_BATCH = 8
"""Sequences per step, on every dp size."""
SEQ_LEN = 128
"""Tokens per sequence (``zephon_debug``'s and ``zephon_mini``'s)."""
LANES = 4
"""The lanes of ``zephon_debug`` and ``zephon_mini``: every dp size must divide them."""
ROWS_FILE = "rows.dp{rank}.jsonl"
"""Per-rank record of the sequences handed to the trainer, one line per pull."""


@dataclass(frozen=True)
class Model:
    """One ``--model`` choice: the base config both loaders' configs derive from."""

    base: str
    """Its config in :mod:`orchestrator.titan.configs`."""
    configs: dict[str, str]
    """Loader -> its config function in :mod:`benchmarks.dp_spread.configs`."""
    description: str
    """The model in words, for the report."""
    parameters: str
    """Its parameter count in words, for the report."""


MODELS = {
    "debug": Model(
        base="zephon_debug",
        configs={"stock": "stock_dp_spread", "zephon": "zephon_dp_spread"},
        description="TorchTitan's llama3 debugmodel with the gpt2 vocabulary",
        parameters="31M",
    ),
    "mini": Model(
        base="zephon_mini",
        configs={"stock": "stock_mini_dp_spread", "zephon": "zephon_mini_dp_spread"},
        description="a 64-wide, 2-layer llama3 (TorchTitan's debugmodel recipe) with the gpt2 "
        "vocabulary",
        parameters="6.6M",
    ),
}
"""``--model`` -> what it trains; ``debug`` is the benchmark's own, ``mini`` is for smoke runs."""
