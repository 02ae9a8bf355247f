"""Token-share mixtures and the "furthest behind" scheduler.

A mixture gives each dataset a share of *tokens*. Shares are normalised to sum
to one and printed canonically (fixed decimals) so equal mixes have equal
fingerprints.

Scheduling recurrence (per lane). With target shares ``w_d`` and estimated
tokens drawn so far ``t_d`` (record bytes x measured tokens/byte, + 1 for EOS)::

    d* = argmin_{d active, w_d > 0}  t_d / w_d      (ties: lowest dataset index)
    t_{d*} += cost(next record of d*)

The dataset furthest behind its target is always drawn next, so the realised
shares stay within one record's cost of the target at every point.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pipeline.errors import ConfigError

SHARE_DECIMALS = 6


class Mixture:
    """Validated, normalised token shares aligned with a dataset order."""

    def __init__(self, weights: Mapping[str, float], dataset_names: Sequence[str]) -> None:
        unknown = sorted(set(weights) - set(dataset_names))
        if unknown:
            raise ConfigError(
                f"mixture names unknown dataset(s) {unknown}; known datasets are "
                f"{sorted(dataset_names)}. Fix the name or add the dataset."
            )
        missing = [name for name in dataset_names if name not in weights]
        if missing:
            raise ConfigError(
                f"dataset(s) {missing} have no mixture weight; give each a weight "
                "(0 leaves a dataset out)."
            )
        for name, weight in weights.items():
            if not isinstance(weight, int | float) or not math.isfinite(weight) or weight < 0:
                raise ConfigError(
                    f"mixture weight of '{name}' is {weight!r}; weights must be finite and >= 0."
                )
        total = float(sum(weights.values()))
        if total <= 0:
            raise ConfigError(
                "mixture weights sum to zero; give at least one dataset a weight > 0."
            )
        self.names = tuple(dataset_names)
        self.shares = tuple(round(weights[name] / total, SHARE_DECIMALS) for name in dataset_names)

    def canonical(self) -> dict[str, str]:
        """Shares as fixed-decimal strings keyed by dataset name (stable for hashing)."""
        return {
            name: f"{share:.{SHARE_DECIMALS}f}"
            for name, share in zip(self.names, self.shares, strict=True)
        }


def furthest_behind(
    tokens: Sequence[int], shares: Sequence[float], active: Sequence[bool]
) -> int | None:
    """Return the index of the active dataset furthest behind its share, or None if none is."""
    best, best_ratio = None, math.inf
    for d, (t, w, a) in enumerate(zip(tokens, shares, active, strict=True)):
        if a and w > 0:
            ratio = t / w
            if ratio < best_ratio:
                best, best_ratio = d, ratio
    return best
