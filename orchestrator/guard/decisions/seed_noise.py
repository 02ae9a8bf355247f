"""Training noise per variant: each variant's seed-to-seed spread, and a pair's seed term.

Mixtures differ in training noise (a variant that gives a domain a small share is noisier on
it), so a pair's seed term comes from its own two variants and borrows the rest of the
comparison's spread only where a test says the pair is not noisier than the rest
(docs/design/guard.md, "Each variant's own noise"):

* **each variant's spread** (:meth:`SeedNoise.variant_variance`): its scores' deviations from
  its mean under each seed, net of the seed's effect on every variant (measured on the
  *other* variants, so the pair's own noise does not set its yardstick);
* **the pair's own term** (:attr:`SeedSource.VARIANTS`): the two variants' spreads summed, on
  Welch-Satterthwaite degrees of freedom (two variants alone: their per-seed differences'
  spread, :attr:`SeedSource.PAIR`);
* **pooled** (:attr:`SeedSource.POOLED`): the variants x seeds table's residual mean square,
  on ``(k - 1)(n - 1)`` degrees of freedom, taken only when the pair's spread is not larger
  than the rest's at the gate's level (:data:`GATE_LEVEL`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from orchestrator.guard.decisions.variance import Scores, aggregate_checked, bytes_arrays

GATE_LEVEL = {2: 0.80, 3: 0.12}
"""Seeds -> level of the test "this pair is noisier than the rest" below which the pair keeps
its own term (:data:`GATE_LEVEL_DEFAULT` from 4 seeds). The test rests on about 2(n - 1)
degrees of freedom: at 2 seeds it misses a 5x spread too often, so the pair pools only when
its spread is well within the rest's; from 4 seeds it sees a 5x spread nearly always and
pools unless the evidence is strong. The levels are the simulation's
(``bash scripts/bench.sh --variant-noise``): the most pooling that kept an equal noisy pair
at or under 5% at 1x, 5x and 25x spreads, one look and the sequence of looks."""
GATE_LEVEL_DEFAULT = 0.05
NOISIER_LEVEL = 0.05
"""A variant whose spread exceeds the rest's at this level, Bonferroni-corrected for the
comparison's variants, is named noisier in the report (a report tests every variant on every
yardstick: uncorrected, a 3-variant comparison would name a false one on most reports)."""


class SeedSource(StrEnum):
    """Where a pair's seed term comes from."""

    PAIR = "pair"
    """Its per-seed differences' spread: a comparison of two variants."""
    VARIANTS = "variants"
    """Its two variants' own spreads, net of the seed effects the other variants measure."""
    POOLED = "pooled"
    """The whole table's residual: the pair is not noisier than the rest."""


@dataclass(frozen=True)
class SeedTerm:
    """A pair's training-noise term: the variance of one seed's difference and its df."""

    variance: float
    """Of one seed's difference ``D_s`` (the seed term is ``variance / seeds``)."""
    degrees_of_freedom: float
    source: SeedSource
    variants: int
    """Variants it rests on (2, or the whole comparison's when pooled)."""
    gate_p_value: float | None = None
    """The test "the pair is noisier than the rest" (None: no rest to test against)."""

    def describe(self) -> str:
        """Its part of a decision's method text."""
        df = f"the seed term on {self.degrees_of_freedom:.3g} df"
        p = "" if self.gate_p_value is None else f"p = {self.gate_p_value:.2g}"
        if self.source is SeedSource.POOLED:
            alike = f" (the pair is not noisier than the rest: {p})" if p else ""
            return f"{df} pooled over {self.variants} variants{alike}"
        if self.source is SeedSource.VARIANTS:
            noisier = f", noisier than the rest ({p})" if p else ""
            return f"{df} from the pair's own spreads{noisier}"
        return df


def seed_table(
    order: list[str], scores: dict[str, Scores], doc_bytes: dict[str, np.ndarray]
) -> np.ndarray:
    """The variants x seeds table of aggregates (``order`` rows, sorted seed columns)."""
    seeds = sorted(scores[order[0]]) if order else []
    n_bytes = bytes_arrays(doc_bytes)
    return np.array([[aggregate_checked(scores[v][s], n_bytes) for s in seeds] for v in order])


def residual_mean_square(table: np.ndarray) -> tuple[float, float]:
    """A two-way (variants x seeds) table's residual mean square and its df."""
    k, n = table.shape
    residual = (
        table - table.mean(axis=1, keepdims=True) - table.mean(axis=0, keepdims=True) + table.mean()
    )
    df = (k - 1) * (n - 1)
    return float(np.sum(residual**2)) / df, float(df)


def _satterthwaite(variances: list[float], df_each: float) -> float:
    """Degrees of freedom of a sum of independent variance estimates, each on ``df_each``."""
    total = sum(variances)
    if total <= 0:
        return df_each * len(variances)
    return 1.0 / sum((v / total) ** 2 / df_each for v in variances)


@dataclass(frozen=True)
class SeedNoise:
    """A comparison's variants x seeds table of scores, and the noise terms read from it."""

    variants: tuple[str, ...]
    table: np.ndarray
    """Variants x seeds: each variant's score (the decided-on aggregate) under each seed."""

    @classmethod
    def of(
        cls, order: list[str], scores: dict[str, Scores], doc_bytes: dict[str, np.ndarray]
    ) -> SeedNoise:
        """From each variant's per-document :data:`Scores` (same seeds for every variant)."""
        return cls(tuple(order), seed_table(order, scores, doc_bytes))

    @property
    def seeds(self) -> int:
        return int(self.table.shape[1]) if self.table.ndim == 2 else 0

    def _others(self, *names: str) -> np.ndarray:
        keep = [i for i, v in enumerate(self.variants) if v not in names]
        return self.table[keep]

    def variant_variance(self, variant: str, *, without: tuple[str, ...] = ()) -> float:
        """``variant``'s seed-to-seed variance around the seed effects that the variants
        other than it (and ``without``) measure; NaN under one seed or with no other."""
        n = self.seeds
        others = self._others(variant, *without)
        if n < 2 or len(others) == 0:
            return math.nan
        row = self.table[self.variants.index(variant)]
        block = others.mean(axis=0)
        residual = (row - row.mean()) - (block - block.mean())
        return float(np.sum(residual**2)) / (n - 1)

    def pair_term(self, a: str, b: str) -> SeedTerm | None:
        """``a`` against ``b``'s seed term (module docstring); None under one seed, or for two
        variants alone (:func:`~orchestrator.guard.decisions.pair.decide_pair` then measures
        the pair's per-seed differences itself: :attr:`SeedSource.PAIR`)."""
        n, k = self.seeds, len(self.variants)
        if n < 2 or k < 3:
            return None
        parts = [self.variant_variance(v, without=(a, b)) for v in (a, b)]
        own = SeedTerm(sum(parts), _satterthwaite(parts, n - 1), SeedSource.VARIANTS, 2)
        if k < 4:  # one other variant: no spread of the rest to test the pair against
            return own

        rest, rest_df = residual_mean_square(self._others(a, b))
        # the others' seed effects carry their own noise into the pair's spreads:
        # E[own] = 2 sigma^2 (1 + 1/(k - 2)) when every variant has sigma^2
        expected = 2 * rest * (1 + 1 / (k - 2))
        p = self._noisier_p(own.variance, expected, own.degrees_of_freedom, rest_df)
        if p < GATE_LEVEL.get(n, GATE_LEVEL_DEFAULT):
            return SeedTerm(own.variance, own.degrees_of_freedom, SeedSource.VARIANTS, 2, p)
        pooled, df = residual_mean_square(self.table)
        return SeedTerm(2 * pooled, df, SeedSource.POOLED, k, p)

    def _noisier_p(self, own: float, expected: float, df: float, rest_df: float) -> float:
        """One-sided p-value of "a spread ``own`` (on ``df``) exceeds ``expected`` (the rest's,
        on ``rest_df``)"; spreads within rounding of 0 count as 0."""
        from scipy.special import fdtrc  # deferred: scipy (see pair.decide_pair)

        rounding = (1e-12 * float(np.max(np.abs(self.table)))) ** 2
        own, expected = (x if x > rounding else 0.0 for x in (own, expected))
        if expected == 0:
            return 1.0 if own == 0 else 0.0
        return float(fdtrc(df, rest_df, own / expected))

    def noisier(self) -> dict[str, float]:
        """Variant -> p-value, for each variant whose spread exceeds the others' (each
        tested against the residual of the rest at :data:`NOISIER_LEVEL` over the number of
        variants; 3+ variants)."""
        k, n = len(self.variants), self.seeds
        if k < 3 or n < 2:
            return {}
        out: dict[str, float] = {}
        for v in self.variants:
            rest, rest_df = residual_mean_square(self._others(v))
            expected = rest * (1 + 1 / (k - 1))
            p = self._noisier_p(self.variant_variance(v), expected, n - 1, rest_df)
            if p < NOISIER_LEVEL / k:
                out[v] = p
        return out
