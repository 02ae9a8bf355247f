"""Synthetic ground truths: mixture -> held-out scores with a known optimum.

Every truth has 6 training domains and 6 held-out scores, each a per-domain mixing law with
cross effects and a penalty for repeating one small domain past 4 epochs, observed with
noise that grows with the distance from the uniform mix. The objective is the mean of the 6
scores (lower is better); the flat truth observes noise only.

Design: docs/design/benchmarks_mix_search.md
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from scipy.optimize import minimize

DOMAINS = ("d1", "d2", "d3", "d4", "d5", "d6")
"""The training domains (sorted, as :class:`orchestrator.search.Observations` keeps them)."""
TARGETS = tuple(f"held_out_{d}" for d in DOMAINS)
"""The held-out scores, one per domain."""
BUDGET_TOKENS = 1e9
"""A run's token budget (only the ratio of a domain's tokens to it matters)."""
MAX_EPOCHS = 4.0
"""Repetitions of the small domain past which the penalty starts."""

CONSTANT_RANGE = (1.5, 3.0)
SCALE_RANGE = (0.5, 1.5)
SELF_EFFECT_RANGE = (-4.0, -2.0)
SMALL_SELF_EFFECT_RANGE = (-6.0, -4.0)
CROSS_EFFECT_SD = 0.6
CAP_RANGE = (0.04, 0.10)
PENALTY = 10.0
SIGMA0 = 0.02
LARGE_TOKENS_RANGE = (1.0, 8.0)
"""The other domains' tokens, in run budgets (log-uniform)."""
OPTIMUM_SAMPLES = 20_000
OPTIMUM_STARTS = 32


@dataclass(frozen=True)
class Truth:
    """One ground truth of the design doc: parameters, noise and its optimum."""

    name: str
    constants: np.ndarray
    """``c_i`` per held-out domain."""
    scales: np.ndarray
    """``k_i`` per held-out domain (0: flat)."""
    effects: np.ndarray
    """``t_ij``: row ``i`` held-out domain, column ``j`` training domain."""
    small: int
    """Index of the small domain."""
    cap: float
    """Share of the small domain past which it is repeated more than 4 epochs."""
    penalty: float
    """``beta``."""
    tokens: dict[str, float] = field(compare=False)
    """Tokens per domain (the small one: ``cap * budget / 4``)."""
    sigma0: float = SIGMA0

    @property
    def prior(self) -> dict[str, float]:
        """The token-proportional mix."""
        total = sum(self.tokens.values())
        return {domain: count / total for domain, count in self.tokens.items()}

    @property
    def is_flat(self) -> bool:
        """Whether every mixture has the same objective."""
        return not self.scales.any() and self.penalty == 0

    def scores(self, mixtures: np.ndarray) -> np.ndarray:
        """``(n, targets)``: the true held-out scores of each row of ``mixtures``."""
        shares = np.atleast_2d(mixtures)
        law = self.constants + self.scales * np.exp(shares @ self.effects.T)
        excess = np.maximum(0.0, shares[:, self.small] - self.cap)
        return law + (self.penalty * excess**2)[:, None]

    def objective(self, mixtures: np.ndarray) -> np.ndarray:
        """The true objective (mean held-out score, no noise) of each row of ``mixtures``."""
        return self.scores(mixtures).mean(axis=1)

    def noise_sd(self, mixtures: np.ndarray) -> np.ndarray:
        """``sigma(r)`` of the objective per row of ``mixtures``."""
        shares = np.atleast_2d(mixtures)
        distance = np.abs(shares - 1.0 / len(DOMAINS)).sum(axis=1)
        return self.sigma0 * (1.0 + 2.0 * distance)

    def run_noise(self, mixtures: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``(n, targets)``: one run's noise per row of ``mixtures`` (shared and own parts)."""
        sd = self.noise_sd(mixtures)[:, None]
        shared = rng.normal(0.0, 1.0, (len(sd), 1)) * sd / np.sqrt(2.0)
        own = rng.normal(0.0, 1.0, (len(sd), len(TARGETS))) * sd * np.sqrt(len(TARGETS) / 2.0)
        return shared + own

    def observe(self, mixtures: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``(n, targets)``: the scores one run of each row of ``mixtures`` reports."""
        return self.scores(mixtures) + self.run_noise(mixtures, rng)

    @cached_property
    def optimum(self) -> tuple[np.ndarray, float]:
        """The mixture with the lowest true objective, and that objective (design doc)."""
        rng = np.random.default_rng(0)
        samples = np.vstack(
            [
                rng.dirichlet(np.ones(len(DOMAINS)), OPTIMUM_SAMPLES),
                rng.dirichlet(np.full(len(DOMAINS), 0.3), OPTIMUM_SAMPLES),
                np.eye(len(DOMAINS)),
            ]
        )
        values = self.objective(samples)
        best_mixture, best_value = samples[int(np.argmin(values))], float(values.min())
        if self.is_flat:
            return np.full(len(DOMAINS), 1.0 / len(DOMAINS)), float(self.objective_uniform)
        simplex = [{"type": "eq", "fun": lambda x: x.sum() - 1.0}]
        for start in samples[np.argsort(values)[:OPTIMUM_STARTS]]:
            result = minimize(
                lambda x: float(self.objective(np.clip(x, 0.0, 1.0))[0]),
                start,
                method="SLSQP",
                bounds=[(0.0, 1.0)] * len(DOMAINS),
                constraints=simplex,
                options={"ftol": 1e-12, "maxiter": 500},
            )
            mixture = np.clip(result.x, 0.0, 1.0)
            mixture /= mixture.sum()
            value = float(self.objective(mixture)[0])
            if value < best_value:
                best_mixture, best_value = mixture, value
        return best_mixture, best_value

    @property
    def objective_uniform(self) -> float:
        """The true objective of the uniform mix."""
        return float(self.objective(np.full(len(DOMAINS), 1.0 / len(DOMAINS)))[0])

    @property
    def achievable_gain(self) -> float:
        """``f(uniform) - f(optimum)``: what the best mixture gains over the uniform one."""
        return self.objective_uniform - self.optimum[1]

    def regret(self, mixture: np.ndarray) -> float:
        """True objective of ``mixture`` minus the optimum's (no noise)."""
        return float(self.objective(mixture)[0]) - self.optimum[1]

    def share_of_gain(self, mixture: np.ndarray) -> float | None:
        """``(f(uniform) - f(mixture)) / achievable gain`` (None on a flat truth)."""
        if self.is_flat:
            return None
        return (self.objective_uniform - float(self.objective(mixture)[0])) / self.achievable_gain

    def describe(self) -> dict[str, object]:
        """The truth's parameters and optimum as plain data."""
        mixture, value = self.optimum
        return {
            "name": self.name,
            "flat": self.is_flat,
            "small_domain": DOMAINS[self.small],
            "cap": self.cap,
            "penalty": self.penalty,
            "sigma0": self.sigma0,
            "constants": self.constants.tolist(),
            "scales": self.scales.tolist(),
            "effects": self.effects.tolist(),
            "prior": self.prior,
            "optimum": dict(zip(DOMAINS, mixture.tolist(), strict=True)),
            "objective_optimum": value,
            "objective_uniform": self.objective_uniform,
            "objective_prior": float(self.objective(np.array(list(self.prior.values())))[0]),
            "achievable_gain": self.achievable_gain,
        }


def make_truth(seed: int) -> Truth:
    """The seeded ground truth number ``seed`` (design doc)."""
    rng = np.random.default_rng([seed, 2025])
    count = len(DOMAINS)
    small = int(rng.integers(count))
    effects = rng.normal(0.0, CROSS_EFFECT_SD, (count, count))
    np.fill_diagonal(effects, rng.uniform(*SELF_EFFECT_RANGE, count))
    effects[small, small] = rng.uniform(*SMALL_SELF_EFFECT_RANGE)
    cap = float(rng.uniform(*CAP_RANGE))
    return Truth(
        name=f"truth-{seed}",
        constants=rng.uniform(*CONSTANT_RANGE, count),
        scales=rng.uniform(*SCALE_RANGE, count),
        effects=effects,
        small=small,
        cap=cap,
        penalty=PENALTY,
        tokens=_draw_domain_tokens(rng, small, cap),
    )


def flat_truth() -> Truth:
    """The flat truth: every mixture scores the same; runs differ by noise only."""
    rng = np.random.default_rng([0, 2026])
    count = len(DOMAINS)
    small, cap = 0, float(np.mean(CAP_RANGE))
    return Truth(
        name="flat",
        constants=rng.uniform(*CONSTANT_RANGE, count),
        scales=np.zeros(count),
        effects=np.zeros((count, count)),
        small=small,
        cap=cap,
        penalty=0.0,
        tokens=_draw_domain_tokens(rng, small, cap),
    )


def _draw_domain_tokens(rng: np.random.Generator, small: int, cap: float) -> dict[str, float]:
    """Tokens per domain: the small one's ``cap`` share is 4 epochs of it, the others have
    1 to 8 run budgets (log-uniform), so no cap of theirs binds."""
    budgets = np.exp(rng.uniform(*np.log(LARGE_TOKENS_RANGE), len(DOMAINS)))
    budgets[small] = cap / MAX_EPOCHS
    return {domain: float(b * BUDGET_TOKENS) for domain, b in zip(DOMAINS, budgets, strict=True)}
