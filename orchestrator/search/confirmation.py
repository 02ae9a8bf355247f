"""The confirmation's rule: how sure each of its pairwise decisions must be, so that a
search names a false winner at most as often as one comparison would."""

from __future__ import annotations

FALSE_WINNER_RATE = 0.05
"""The most often a confirmation may name a winner where the mixtures are equally good."""


def confirmation_confidence(comparisons: int) -> float:
    """The confidence of each of ``comparisons`` decisions about the recommended mixture
    (against the best initial mixture, against the token-proportional mix): Bonferroni's
    ``1 - FALSE_WINNER_RATE / comparisons``. At 95% each, two comparisons would name a
    false winner up to twice as often (measured: 10.9% on a flat truth, benchmarks/)."""
    assert comparisons >= 1, f"a confirmation makes at least one comparison, got {comparisons}"
    return 1.0 - FALSE_WINNER_RATE / comparisons
