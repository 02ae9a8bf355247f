"""How much error each look may spend: a comparison repeated as seeds are added.

An agent that reads ``cannot_tell`` adds a seed and compares again. Each comparison is one
more chance to decide on noise: deciding at 5% at every seed count from 2 to 8 decides
about one equal pair in six. The sequential design (the default) gives the whole sequence
one error budget, ``alpha`` (``1 - confidence``), spent over the seed counts up to
``max_seeds`` by Kim and DeMets' power spending function ``alpha(t) = alpha * t**3``,
``t = seeds / max_seeds`` (most of the budget kept for the later looks, as O'Brien and
Fleming's boundaries do). A look at ``n`` seeds
decides at level ``alpha(n / N) - alpha((n - 1) / N)`` (all that ``n <= 2`` spends at 2,
since one seed decides nothing). The levels of all seed counts sum to ``alpha``, so by the
union bound the chance that *any* look of the sequence decides an equal pair wrongly is at
most ``alpha`` whatever the policy of adding seeds, stopping, or looking twice at one seed
count (same seeds, same answer): the rule needs no record of earlier looks to hold. Past
``max_seeds`` nothing is left to spend and nothing more is decided.

The fixed design decides at ``alpha`` at its one look: for a seed count fixed in advance.

Design (why this procedure, its cost in power): docs/design/guard.md, "Repeated looks".
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

MIN_SEEDS = 2
"""Seeds a decision needs (design doc: one seed leaves training noise unmeasured)."""
DEFAULT_MAX_SEEDS = 8
"""Seeds a sequence may grow to by default: the error budget is spent by then."""
SPENDING_POWER = 3
"""``rho`` of the spending function ``alpha * t**rho``: 3 keeps most of the budget for the
later looks (O'Brien-Fleming's shape), where an agent's sequence mostly decides; Pocock's
shape, which spends more early, lost power at equal error in the same simulation
(``bash scripts/bench.sh --looks``)."""


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

    def spent(self, seeds: int) -> float:
        """The budget spent by the looks at ``seeds`` seeds or fewer."""
        if seeds < MIN_SEEDS:
            return 0.0
        if self.design is Design.FIXED:
            return self.alpha
        return self.alpha * (min(seeds, self.max_seeds) / self.max_seeds) ** SPENDING_POWER

    def level(self, seeds: int) -> float:
        """The two-sided error rate a look at ``seeds`` seeds decides at (0: decides
        nothing: one seed, or past ``max_seeds``)."""
        if self.design is Design.FIXED:
            return self.alpha if seeds >= MIN_SEEDS else 0.0
        return self.spent(seeds) - self.spent(seeds - 1)

    def to_json(self) -> dict[str, Any]:
        return {"design": str(self.design), "alpha": self.alpha, "max_seeds": self.max_seeds}


def design_of(name: str) -> Design:
    """The :class:`Design` named ``name``; ValueError listing the choices otherwise."""
    try:
        return Design(name)
    except ValueError:
        raise ValueError(
            f"design {name!r}: use one of {', '.join(d.value for d in Design)}"
        ) from None
