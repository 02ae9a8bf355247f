"""The strategies that spend a budget of runs on a truth and pick a mixture.

``zephon`` (initial design, then 2 rounds of fit -> propose), ``random`` (Dirichlet(1)
draws), ``grid`` (the coarsest sweep grid with enough points) and ``regmix`` (RegMix's
recipe in one shot). Every run observes the truth with fresh noise from the strategy's own
seeded generator.

Design: docs/design/benchmarks_mix_search.md
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from benchmarks.mix_search.truths import BUDGET_TOKENS, DOMAINS, MAX_EPOCHS, TARGETS, Truth
from orchestrator.search import Bounds, Observations, fit, initial_design, propose
from orchestrator.search.models import GradientBoosting
from orchestrator.search.observations import MIN_DISTINCT_MIXTURES
from sweeps.mixes import MixSpace, variants

REGMIX_CANDIDATES = 100_000
"""Mixtures RegMix's regressor predicts to choose from."""
REGMIX_TOP = 128
"""RegMix's pick is the mean of this many best predicted mixtures."""
REGMIX_TEMPERATURE = 0.5
"""RegMix flattens the prior to ``prior ** 0.5`` before drawing around it."""
REGMIX_STRENGTHS = np.logspace(np.log10(0.1), np.log10(5.0), 15)
"""RegMix's Dirichlet concentrations (times the flattened prior), one drawn per mixture."""
GRID_STEPS = (1, 2, 4, 5, 8, 10)
"""Grid steps ``n`` (resolution ``1/n``) a sweep at 3 decimals accepts."""
ZEPHON = "zephon"
"""The strategy name of Zephon's search."""
ZEPHON_ROUNDS = 2
"""Rounds of proposals after the initial design: each costs a fit (~5 s on 16-64 runs),
and the benchmark must stay well under 15 minutes on 2 cores."""


@dataclass(frozen=True)
class SearchTrace:
    """What a strategy ran and picked."""

    strategy: str
    budget: int
    pick: np.ndarray
    """The mixture the strategy would train at scale (``DOMAINS`` order)."""
    observations: Observations
    """Every run, in the order run."""
    design_size: int = 0
    """Runs of the initial design (Zephon's search; 0 for the others)."""
    stop_at: int | None = None
    """Runs observed when the stop rule first said stop (None: it never did)."""
    model: str | None = None
    """The model the last fit chose (Zephon's search)."""

    @property
    def best_observed(self) -> np.ndarray:
        """The run with the best observed objective."""
        return self.observations.best_observed()[0]

    @property
    def design_best(self) -> np.ndarray:
        """The best observed run of the initial design."""
        return self.observations.subset(range(self.design_size)).best_observed()[0]


def repetition_bounds(truth: Truth) -> Bounds:
    """Every domain seen at most :data:`MAX_EPOCHS` times in a run."""
    return Bounds().with_repetition_cap(truth.tokens, BUDGET_TOKENS, MAX_EPOCHS)


def as_array(mixture: dict[str, float]) -> np.ndarray:
    """A mixture dict as shares in ``DOMAINS`` order."""
    return np.array([mixture[d] for d in DOMAINS])


def run(truth: Truth, mixtures: np.ndarray, rng: np.random.Generator, first: int) -> Observations:
    """One noisy run of ``truth`` per row of ``mixtures``, ids counting from ``first``."""
    return Observations(
        ids=tuple(f"run-{first + i}" for i in range(len(mixtures))),
        domains=DOMAINS,
        mixtures=mixtures,
        targets=TARGETS,
        scores=truth.observe(mixtures, rng),
    )


def zephon_search(truth: Truth, budget: int, seed: int) -> SearchTrace:
    """Zephon's search of the design doc; the stop rule is recorded, not obeyed."""
    rng = np.random.default_rng([seed, budget, 0])
    bounds = repetition_bounds(truth)
    # At least 3 draws: the first fit needs 4 distinct mixtures, and the uniform mix may
    # be missing (initial_design drops it when the cap is not a multiple of 0.001).
    draws = max(budget // 4, MIN_DISTINCT_MIXTURES - 1)
    design = initial_design(DOMAINS, prior=truth.prior, draws=draws, seed=seed, bounds=bounds)
    design = design[:budget]
    per_round = max(1, math.ceil((budget - len(design)) / ZEPHON_ROUNDS))
    observations = run(truth, np.stack([as_array(m) for m in design]), rng, 0)
    stop_at: int | None = None
    round_ = 0
    while True:
        runs = len(observations.ids)
        result = fit(observations, seed=seed + round_)
        proposal = propose(
            result,
            count=min(per_round, budget - runs) or 1,
            bounds=bounds,
            seed=seed + round_,
            prior=truth.prior,
        )
        if stop_at is None and proposal.stop.stop:
            stop_at = runs
        if runs >= budget:
            break
        chosen = np.stack([as_array(p.mixture) for p in proposal.proposals])
        observations = observations.concatenate(run(truth, chosen, rng, runs))
        round_ += 1
    return SearchTrace(
        ZEPHON,
        budget,
        as_array(proposal.recommended.mixture),
        observations,
        design_size=len(design),
        stop_at=stop_at,
        model=result.model.name,
    )


def random_search(truth: Truth, budget: int, seed: int) -> SearchTrace:
    """``budget`` Dirichlet(1) draws; the best observed is the pick."""
    rng = np.random.default_rng([seed, budget, 1])
    observations = run(truth, rng.dirichlet(np.ones(len(DOMAINS)), budget), rng, 0)
    return SearchTrace("random", budget, observations.best_observed()[0], observations)


def grid_points(budget: int) -> np.ndarray:
    """``budget`` points of the coarsest sweep grid with at least that many, evenly strided
    in the grid's (lexicographic) order.

    Strided, not the first ``budget``: in lexicographic order the first 70 of the 126
    points of the 1/4 grid all give ``d1`` nothing, a worse baseline than a grid is.
    """
    steps = next(
        n for n in GRID_STEPS if math.comb(n + len(DOMAINS) - 1, len(DOMAINS) - 1) >= budget
    )
    size = math.comb(steps + len(DOMAINS) - 1, len(DOMAINS) - 1)
    grid = variants(MixSpace(grid_resolution=1 / steps, max_variants=size), list(DOMAINS))
    chosen = np.round(np.linspace(0, len(grid) - 1, budget)).astype(int)
    return np.stack([as_array(grid[i]) for i in chosen])


def grid_search(truth: Truth, budget: int, seed: int) -> SearchTrace:
    """:func:`grid_points` run once each; the best observed is the pick."""
    rng = np.random.default_rng([seed, budget, 2])
    observations = run(truth, grid_points(budget), rng, 0)
    return SearchTrace("grid", budget, observations.best_observed()[0], observations)


def regmix_draws(
    prior: np.ndarray, upper: np.ndarray, count: int, rng: np.random.Generator
) -> np.ndarray:
    """``count`` mixtures from RegMix's sampler: Dirichlet(strength * prior ** 0.5 /
    sum), strength one of 15 log-spaced values in [0.1, 5] per draw, draws past ``upper``
    rejected."""
    flattened = prior**REGMIX_TEMPERATURE
    flattened /= flattened.sum()
    kept: list[np.ndarray] = []
    while sum(len(k) for k in kept) < count:
        strengths = rng.choice(REGMIX_STRENGTHS, count)
        # Dirichlet rows with per-row concentrations: normalised gamma draws.
        gammas = rng.standard_gamma(strengths[:, None] * flattened, (count, len(prior)))
        totals = gammas.sum(axis=1)
        draws = gammas[totals > 0] / totals[totals > 0, None]
        kept.append(draws[(draws <= upper).all(axis=1)])
    return np.vstack(kept)[:count]


def regmix_search(truth: Truth, budget: int, seed: int) -> SearchTrace:
    """RegMix's one-shot recipe of the design doc."""
    rng = np.random.default_rng([seed, budget, 3])
    prior = as_array(truth.prior)
    upper = repetition_bounds(truth).arrays(DOMAINS)[1]
    observations = run(truth, regmix_draws(prior, upper, budget, rng), rng, 0)
    # RegMix's LightGBM: LightGBM's default 20 runs per leaf, fitted on any number of runs
    # (below ~40 runs every tree is one leaf: a constant prediction, then the "top 128"
    # are simply the first 128 candidates).
    model = GradientBoosting(GradientBoosting.Config(min_child_samples=20, min_runs=0))
    fitted = model.fit(observations, seed)
    candidates = regmix_draws(prior, upper, REGMIX_CANDIDATES, rng)
    best = np.argsort(fitted.predict(candidates), kind="stable")[:REGMIX_TOP]
    return SearchTrace("regmix", budget, candidates[best].mean(axis=0), observations)


STRATEGIES = {
    ZEPHON: zephon_search,
    "random": random_search,
    "grid": grid_search,
    "regmix": regmix_search,
}
"""Every strategy by name, in the order reports list them."""
