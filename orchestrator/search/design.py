"""The initial design of a search: the uniform mix, the prior (token-proportional) mix and
seeded Dirichlet draws, canonical and within the bounds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from orchestrator.errors import SearchError
from orchestrator.search.propose import Bounds, canonical_within_bounds

_ATTEMPTS_PER_DRAW = 1000
"""Dirichlet draws allowed per requested new mixture before giving up."""


def initial_design(
    domains: Sequence[str],
    *,
    prior: Mapping[str, float] | None,
    draws: int,
    seed: int,
    bounds: Bounds | None = None,
    decimals: int = 3,
) -> list[dict[str, float]]:
    """The uniform mix, ``prior`` (when given and not uniform), then ``draws`` new
    Dirichlet(1) draws from ``numpy.random.default_rng(seed)``; each moved into the bounds
    and rounded canonically. Aioli found that no mixing method reliably beats the first
    two, so a search always measures them."""
    ordered = tuple(sorted(domains))
    fixed = [np.full(len(ordered), 1.0 / len(ordered))]
    if prior is not None:
        shares = np.array([float(prior.get(d, 0.0)) for d in ordered])
        if shares.sum() <= 0:
            raise SearchError([f"prior {dict(prior)} gives no domain a share"])
        fixed.append(shares / shares.sum())
    design: list[dict[str, float]] = []
    for mixture in canonical_within_bounds(np.stack(fixed), ordered, bounds, decimals):
        if mixture not in design:
            design.append(mixture)
    wanted = len(design) + draws
    rng = np.random.default_rng(seed)
    for _ in range(_ATTEMPTS_PER_DRAW * draws):
        if len(design) >= wanted:
            break
        drawn = rng.dirichlet(np.ones(len(ordered)))[None]
        for mixture in canonical_within_bounds(drawn, ordered, bounds, decimals):
            if mixture not in design:
                design.append(mixture)
    if len(design) < wanted:
        raise SearchError(
            [
                f"found {len(design)} distinct mixtures within the bounds, wanted {wanted}: widen "
                "the bounds, add decimals or draw fewer"
            ]
        )
    return design
