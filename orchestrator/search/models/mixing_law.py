"""The per-domain data mixing law ``L_i(r) = c_i + exp(t_i . r)``, fitted with Huber loss."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from orchestrator.search.models.base import MixtureModel
from orchestrator.search.observations import Observations

_EXPONENT_LIMIT = 50.0
"""``t . r`` is clipped to +-this before ``exp``: a wild start must not overflow."""


@dataclass
class MixingLaw(MixtureModel):
    """One law per target score (held-out domain), the objective their mean.

    Each target is standardised, then fitted as ``c + exp(t . r)`` (Ye et al.'s
    ``c + k exp(t . r)`` with ``k`` folded into ``t``: the shares sum to 1) by
    ``scipy.optimize.least_squares`` with Huber loss from ``restarts`` random starts
    (the lowest loss wins) and a small ridge on ``t``.
    """

    @dataclass
    class Config:
        restarts: int = 12
        """Random starts per target law; the lowest Huber loss is kept."""
        huber_scale: float = 0.25
        """Residual (in standard deviations of the target) where the loss turns linear."""
        ridge: float = 1e-3
        """Weight of the squared exponents ``t``: keeps few-run fits away from extremes."""

    name = "mixing_law"
    config: Config = field(default_factory=Config)
    parameters: list[np.ndarray] = field(default_factory=list)
    """Per target: ``[c, t_1, ..., t_domains]`` on the standardised scale."""
    scales: list[tuple[float, float]] = field(default_factory=list)
    """Per target: the (mean, standard deviation) it was standardised with."""

    def unfit_reason(self, observations: Observations) -> str | None:
        needed = len(observations.domains) + 1  # a law's parameters (the ridge steadies them)
        distinct = len(observations.mixture_groups())
        if distinct < needed:
            return f"needs {needed} distinct mixtures (domains + 1), has {distinct}"
        return None

    def fit(self, observations: Observations, seed: int) -> MixingLaw:
        return self._fit_from_starts(observations, seed, starts_from=None)

    def refit(self, observations: Observations, seed: int) -> MixingLaw:
        return self._fit_from_starts(observations, seed, starts_from=self.parameters)

    def predict(self, mixtures: np.ndarray) -> np.ndarray:
        assert self.parameters, "fit the law before predicting"
        per_target = [
            mean + scale * _evaluate_law(params, mixtures)
            for params, (mean, scale) in zip(self.parameters, self.scales, strict=True)
        ]
        return np.mean(per_target, axis=0)

    def _fit_from_starts(
        self, observations: Observations, seed: int, starts_from: list[np.ndarray] | None
    ) -> MixingLaw:
        rng = np.random.default_rng(seed)
        parameters, scales = [], []
        for column in range(len(observations.targets)):
            scores = observations.scores[:, column]
            mean, scale = float(scores.mean()), float(scores.std()) or 1.0
            standardised = (scores - mean) / scale
            starts = [_random_start(rng, standardised, len(observations.domains))]
            starts += [
                _random_start(rng, standardised, len(observations.domains))
                for _ in range(self.config.restarts - 1 if starts_from is None else 1)
            ]
            if starts_from is not None:
                starts.insert(0, starts_from[column])
            parameters.append(
                self._best_of(starts, observations.mixtures, standardised, self.config)
            )
            scales.append((mean, scale))
        return replace(self, parameters=parameters, scales=scales)

    @staticmethod
    def _best_of(
        starts: list[np.ndarray], mixtures: np.ndarray, target: np.ndarray, config: Config
    ) -> np.ndarray:
        ridge = np.sqrt(config.ridge)

        def residuals(params: np.ndarray) -> np.ndarray:
            return np.concatenate([_evaluate_law(params, mixtures) - target, ridge * params[1:]])

        def jacobian(params: np.ndarray) -> np.ndarray:
            grown = np.exp(np.clip(mixtures @ params[1:], -_EXPONENT_LIMIT, _EXPONENT_LIMIT))
            top = np.hstack([np.ones((len(target), 1)), grown[:, None] * mixtures])
            bottom = np.hstack([np.zeros((len(params) - 1, 1)), ridge * np.eye(len(params) - 1)])
            return np.vstack([top, bottom])

        # Imported here: scipy.optimize takes ~0.3 s, which every zephon-run would pay
        # through the Hydra plugin (hydra_plugins/zephon) though only a search fits.
        from scipy.optimize import least_squares

        best = None
        for start in starts:
            result = least_squares(
                residuals, start, jac=jacobian, loss="huber", f_scale=config.huber_scale
            )
            if best is None or result.cost < best.cost:
                best = result
        assert best is not None
        return best.x


def _evaluate_law(params: np.ndarray, mixtures: np.ndarray) -> np.ndarray:
    return params[0] + np.exp(np.clip(mixtures @ params[1:], -_EXPONENT_LIMIT, _EXPONENT_LIMIT))


def _random_start(rng: np.random.Generator, target: np.ndarray, domains: int) -> np.ndarray:
    """``c`` below the lowest score, ``t`` around 0: the law starts near the data."""
    exponents = rng.normal(0.0, 1.0, domains)
    return np.concatenate([[float(target.min()) - rng.uniform(0.5, 2.0)], exponents])
