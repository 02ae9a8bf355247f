"""Known truths for the search tests: a mixing-law objective with an interior optimum."""

from __future__ import annotations

import numpy as np

from orchestrator.search import Observations

DOMAINS = ("a", "b", "c", "d")


def true_scores(mixtures: np.ndarray) -> np.ndarray:
    """``(n, 4)``: four held-out domains' laws ``1 + exp(t_i . r)``; each domain gains from
    its own share (t_ii = -3) and a little from one neighbour's (-0.5)."""
    exponents = -3.0 * np.eye(4) - 0.5 * np.roll(np.eye(4), 1, axis=1)
    return 1.0 + np.exp(mixtures @ exponents.T)


def true_objective(mixtures: np.ndarray) -> np.ndarray:
    """The mean of :func:`true_scores`: its optimum is inside the simplex."""
    return true_scores(mixtures).mean(axis=1)


def observed(
    count: int, seed: int, noise: float = 0.0, replicates: int = 1, flat: bool = False
) -> Observations:
    """``count`` Dirichlet mixtures scored by :func:`true_scores` (or a constant if
    ``flat``) plus Gaussian noise, each run ``replicates`` times."""
    rng = np.random.default_rng(seed)
    mixtures = np.repeat(rng.dirichlet(np.ones(4), count), replicates, axis=0)
    truth = np.full((len(mixtures), 4), 2.0) if flat else true_scores(mixtures)
    return Observations(
        ids=tuple(f"run{i}" for i in range(len(mixtures))),
        domains=DOMAINS,
        mixtures=mixtures,
        targets=tuple(f"heldout_{d}" for d in DOMAINS),
        scores=truth + rng.normal(0.0, noise, truth.shape),
    )
