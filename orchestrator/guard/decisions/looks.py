"""How much error each look may spend: a comparison repeated as seeds are added.

An agent that reads ``cannot_tell`` adds a seed and compares again. Each comparison is one
more chance to decide on noise: deciding at 5% at every seed count from 2 to 8 decides
about one equal pair in six. The sequential design (the default) gives the whole sequence
one error budget, ``alpha`` (``1 - confidence``), over the seed counts up to ``max_seeds``.
A look at ``n`` seeds decides at the larger of two levels:

* Kim and DeMets' power spending, ``alpha(n / N)**3 - alpha((n - 1) / N)**3`` (all that
  ``n <= 2`` spends at 2, since one seed decides nothing): most of the budget kept for the
  later looks, as O'Brien and Fleming's boundaries do;
* an **early floor** (:func:`early_floor`), so that a large difference is decided at the
  first look that can see it instead of waiting for seeds it does not need.

The levels then sum to more than ``alpha``: the union bound no longer holds the sequence,
the looks' correlation does. Looks at more seeds reuse the earlier seeds, so their
decisions overlap. The floor is the largest that keeps the chance that *any* look from 2 to
``max_seeds`` decides an equal pair at most ``CALIBRATION_SHARE * alpha``, computed for
the heaviest-tailed statistic the guard uses (a pair's own per-seed differences, Student t
on ``n - 1`` df, seeds nested) by a fixed-seed simulation. Every policy of adding seeds (one
or several at a time, stopping early, looking twice at one seed count: same seeds, same
answer) looks at a subset of those seed counts, so its error is at most that. Every level
is at least the power spending's, so no look decides less than before. Past ``max_seeds``
nothing is left to spend and nothing more is decided.

The fixed design decides at ``alpha`` at its one look: for a seed count fixed in advance.

Design (why this procedure, its power): docs/design/guard.md, "Repeated looks".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

MIN_SEEDS = 2
"""Seeds a decision needs (design doc: one seed leaves training noise unmeasured)."""
DEFAULT_MAX_SEEDS = 8
"""Seeds a sequence may grow to by default: the error budget is spent by then."""
SPENDING_POWER = 3
"""``rho`` of the spending function ``alpha * t**rho``: 3 keeps most of the budget for the
later looks (O'Brien-Fleming's shape), where an agent's sequence mostly decides; Pocock's
shape, which spends more early, lost power at equal error in the same simulation
(``bash scripts/bench.sh --looks``)."""
CALIBRATION_SHARE = 0.9
"""The share of ``alpha`` the early floor's simulated sequence may use: the rest is margin
for the statistics whose tails are lighter but whose looks differ (document term, pooling)."""
CALIBRATION_SEQUENCES = 100_000
"""Simulated sequences of equal pairs the floor is calibrated on (its error's standard error
is then about 0.07% at 5%)."""


class Design(StrEnum):
    """How a comparison's decisions are calibrated."""

    SEQUENTIAL = "sequential"
    """One error budget for every look as seeds are added (module docstring)."""
    FIXED = "fixed"
    """One look, at a seed count fixed in advance: decided at the full level."""


@dataclass(frozen=True)
class LookPlan:
    """The levels a comparison decides at, per seed count (module docstring)."""

    design: Design = Design.SEQUENTIAL
    alpha: float = 0.05
    """The whole sequence's chance of deciding an equal pair (``1 - confidence``)."""
    max_seeds: int = DEFAULT_MAX_SEEDS
    """Sequential: the seed count by which the budget is spent."""

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if not isinstance(self.max_seeds, int) or self.max_seeds < MIN_SEEDS:
            raise ValueError(f"max_seeds must be an integer >= {MIN_SEEDS}, got {self.max_seeds}")

    def level(self, seeds: int) -> float:
        """The two-sided error rate a look at ``seeds`` seeds decides at (0: decides
        nothing: one seed, or past ``max_seeds``)."""
        if self.design is Design.FIXED:
            return self.alpha if seeds >= MIN_SEEDS else 0.0
        if not MIN_SEEDS <= seeds <= self.max_seeds:
            return 0.0
        return max(
            spending_level(seeds, alpha=self.alpha, max_seeds=self.max_seeds),
            early_floor(self.alpha, self.max_seeds),
        )

    def to_json(self) -> dict[str, Any]:
        return {"design": str(self.design), "alpha": self.alpha, "max_seeds": self.max_seeds}


def spending_level(seeds: int, *, alpha: float, max_seeds: int) -> float:
    """Kim and DeMets' power spending's level for the look at ``seeds`` (0 outside 2..N)."""
    if not MIN_SEEDS <= seeds <= max_seeds:
        return 0.0

    def spent(n: int) -> float:
        return 0.0 if n < MIN_SEEDS else alpha * (n / max_seeds) ** SPENDING_POWER

    return spent(seeds) - spent(seeds - 1)


@functools.lru_cache(maxsize=64)
def early_floor(alpha: float, max_seeds: int) -> float:
    """The largest level every look from 2 to ``max_seeds`` seeds may decide at, with the
    power spending's levels where larger, such that the whole sequence of looks decides an
    equal pair at most ``CALIBRATION_SHARE * alpha`` of the time (module docstring).

    Simulated: equal pairs' per-seed differences (normal, seeds nested), each look's paired
    t on ``n - 1`` df; deterministic (a fixed generator), about 0.2 s, cached."""
    # deferred: scipy (see pair.decide_pair)
    from scipy.special import stdtr

    rng = np.random.default_rng(20261206)
    x = rng.standard_normal((CALIBRATION_SEQUENCES, max_seeds))
    looks = range(MIN_SEEDS, max_seeds + 1)
    cumulative = np.cumsum(x, axis=1)
    squares = np.cumsum(x**2, axis=1)
    # each look's two-sided p-value: smaller than a level means that look decides
    p_values = np.empty((CALIBRATION_SEQUENCES, len(looks)))
    for i, n in enumerate(looks):
        mean = cumulative[:, n - 1] / n
        variance = (squares[:, n - 1] - n * mean**2) / (n - 1)
        t = np.abs(mean) / np.sqrt(np.maximum(variance, 1e-300) / n)
        p_values[:, i] = 2 * stdtr(n - 1, -t)
    base = np.array([spending_level(n, alpha=alpha, max_seeds=max_seeds) for n in looks])

    def error(floor: float) -> float:
        return float(np.mean(np.any(p_values < np.maximum(base, floor), axis=1)))

    target = CALIBRATION_SHARE * alpha
    if error(0.0) > target:
        return 0.0
    lo, hi = 0.0, alpha
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if error(mid) <= target else (lo, mid)
    return lo
