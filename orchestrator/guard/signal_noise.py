"""Signal and noise per yardstick: which score of a comparison can decide between its variants.

A yardstick is one score every run has at the eval step: a held-out dataset's (or fixed
evaluation set's) bits per byte, another held-out metric on one domain, a task's metric, or
the aggregate the comparison decides on. As AI2's Signal and Noise defines it, a yardstick's
**signal** is the spread of the variants' mean scores (their sample standard deviation) and
its **noise** the spread of one variant's score over seeds (the root mean of the variants'
seed variances); their ratio says whether the variants differ by more than retraining moves
them. A yardstick with a ratio well below 1 needs many seeds to decide anything.

Each variant's own seed standard deviation is given too, and a variant much noisier than the
rest is named (:meth:`~orchestrator.guard.decisions.SeedNoise.noisier`): the decisions give
its pairs their own seed term (docs/design/guard.md, "Each variant's own noise").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestrator.guard.decisions import SeedNoise

DECIDED_ON = "decided-on"
"""The yardstick of the comparison's own aggregate (what it ranks and decides on)."""


@dataclass(frozen=True)
class YardstickNoise:
    """One yardstick's signal, noise and each variant's seed spread."""

    yardstick: str
    """``bpb:DOMAIN``, ``METRIC:DOMAIN``, ``task:NAME:METRIC`` or ``decided-on``."""
    signal: float
    """Sample standard deviation of the variants' mean scores (mean over seeds)."""
    noise: float | None
    """Root mean of the variants' seed variances (None: one seed measures none)."""
    seed_sd: dict[str, float] = field(default_factory=dict)
    """Variant (12-hex id) -> its score's sample standard deviation over seeds."""
    noisier: dict[str, float] = field(default_factory=dict)
    """Variant -> p-value, for each variant whose spread exceeds the others' (at 5%, corrected
    for the number of variants)."""

    @property
    def ratio(self) -> float | None:
        """``signal / noise`` (None without noise; inf when seeds do not move the score)."""
        if self.noise is None:
            return None
        return math.inf if self.noise == 0 else self.signal / self.noise

    def to_json(self) -> dict[str, Any]:
        ratio = self.ratio
        return {
            "yardstick": self.yardstick,
            "signal": self.signal,
            "noise": self.noise,
            "signal_to_noise": None if ratio is None or math.isinf(ratio) else ratio,
            "seed_sd": self.seed_sd,
            "noisier": self.noisier,
        }


def yardstick_noise(yardstick: str, table: dict[str, dict[str, float]]) -> YardstickNoise:
    """``table``: variant -> seed -> score (every variant under the same seeds, two or more
    variants)."""
    variants = list(table)
    seeds = sorted(table[variants[0]])
    values = np.array([[table[v][s] for s in seeds] for v in variants], dtype=np.float64)
    signal = float(np.std(values.mean(axis=1), ddof=1)) if len(variants) > 1 else 0.0
    if len(seeds) < 2:
        return YardstickNoise(yardstick, signal, None)
    spreads = values.std(axis=1, ddof=1)
    noisier = SeedNoise(tuple(variants), values).noisier()
    return YardstickNoise(
        yardstick,
        signal,
        float(np.sqrt(np.mean(spreads**2))),
        seed_sd={v: float(sd) for v, sd in zip(variants, spreads, strict=True)},
        noisier=noisier,
    )
