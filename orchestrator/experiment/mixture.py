"""The canonical form of a data mix: normalised token shares rounded to fixed decimals
(largest remainder; equal mixes give identical units).

Design: docs/design/orchestrator_experiment.md.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

from orchestrator.errors import MixError

TOLERANCE = 1e-9
"""Slack of float comparisons: grid steps, bounds in units, perturbed weights."""
_SUBUNITS = 10**9
"""Exact shares are rounded to 1/_SUBUNITS of a unit before the largest-remainder step."""


def canonical(
    weights: Mapping[str, float], domains: Sequence[str], decimals: int
) -> dict[str, float]:
    """``weights`` normalised and rounded by the largest-remainder method to ``decimals``
    decimals, for every domain in sorted order (missing domains get 0).

    Equal mixes give identical results, e.g. ``{a: 1, b: 1}`` and ``{a: 0.5, b: 0.5}``.
    Raises :class:`MixError` for unknown domains, weights that are not finite and >= 0,
    weights summing to 0, empty or repeated ``domains`` and ``decimals`` outside 1..6.
    """
    problems = domain_problems(domains) + decimals_problems(decimals)
    problems += weight_problems(weights, set(domains), f"the mix {dict(weights)}")
    if problems:
        raise MixError(problems)
    ordered = sorted(domains)
    scale = 10**decimals
    return mix_from_units(mix_units([weights.get(d, 0.0) for d in ordered], scale), ordered, scale)


def mix_units(weights: Sequence[float], scale: int) -> tuple[int, ...]:
    """Largest-remainder rounding of valid ``weights`` to integer units summing to ``scale``."""
    ratios = [float(w).as_integer_ratio() for w in weights]
    denominator = max(d for _, d in ratios)  # powers of two: the largest is a common one
    numerators = [n * (denominator // d) for n, d in ratios]
    total = sum(numerators)
    # x_i in 1/_SUBUNITS of a unit, rounded half up: floor(n_i * scale * S / total + 1/2).
    subunits = [(2 * n * scale * _SUBUNITS + total) // (2 * total) for n in numerators]
    floors = [s // _SUBUNITS for s in subunits]
    leftover = scale - sum(floors)
    by_remainder = sorted(range(len(floors)), key=lambda i: (-(subunits[i] % _SUBUNITS), i))
    for i in by_remainder[:leftover]:
        floors[i] += 1
    return tuple(floors)


def mix_from_units(units: tuple[int, ...], ordered: Sequence[str], scale: int) -> dict[str, float]:
    return {domain: u / scale for domain, u in zip(ordered, units, strict=True)}


def domain_problems(domains: Sequence[str]) -> list[str]:
    if not domains:
        return ["no domains given: name at least one domain"]
    repeated = sorted(d for d, count in Counter(domains).items() if count > 1)
    if repeated:
        return [f"domains {repeated} are listed more than once; list each domain once"]
    return []


def decimals_problems(decimals: int) -> list[str]:
    if isinstance(decimals, bool) or not isinstance(decimals, int) or not 1 <= decimals <= 6:
        return [f"decimals={decimals!r}: use a whole number from 1 to 6"]
    return []


def is_share(value: object) -> bool:
    """Whether ``value`` is a number in [0, 1]."""
    return isinstance(value, int | float) and 0 <= value <= 1


def weight_problems(weights: Mapping[str, float], known: set[str], what: str) -> list[str]:
    """Why ``weights`` is not a mix over the ``known`` domains ([] if it is)."""
    problems = []
    unknown = sorted(set(weights) - known)
    if unknown:
        problems.append(
            f"{what} names unknown domains {unknown}; known domains: {sorted(known)}. "
            "Fix the names or add the domains."
        )
    bad = {
        d: w
        for d, w in weights.items()
        if not isinstance(w, int | float) or not math.isfinite(w) or w < 0
    }
    if bad:
        problems.append(f"{what} has weights {bad}; weights must be finite numbers >= 0")
    elif sum(weights.values()) <= 0:
        problems.append(f"{what} has weights summing to 0; give at least one domain a weight > 0")
    return problems
