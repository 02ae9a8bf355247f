"""A mixing law across model sizes: ``L(r, N) = c + exp(t . r) + (N / N_0)^-alpha exp(s + u . r)``.

Per target score, a mixture-dependent floor ``c + exp(t . r)`` and a mixture-dependent
excess ``exp(s + u . r)`` that shrinks as a power of the model size ``N`` (``N_0`` the
smallest size observed): ``E(r) + A(r) / N^alpha`` of per-mixture scaling laws, with the
shapes of Ye et al.'s mixing law. With two sizes ``alpha`` is not identified (the excess's
level absorbs it) and is fixed at :attr:`Config.alpha` (Hoffmann et al.'s parameter
exponent); with three or more it is fitted. The fit starts from a :class:`MixingLaw` fitted
on the smallest size's runs, the sizes' runs weighted alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from orchestrator.search.models.base import MixtureModel
from orchestrator.search.models.mixing_law import MixingLaw
from orchestrator.search.observations import Observations

_EXPONENT_LIMIT = 50.0


@dataclass
class ScaledMixingLaw(MixtureModel):
    """The law of the module docstring, one per target; the objective is their mean at
    :attr:`at_size` (default: the largest size observed)."""

    @dataclass
    class Config:
        alpha: float = 0.34
        """The size exponent with two sizes observed (the start of its fit with three+)."""
        huber_scale: float = 0.25
        """Residual (standard deviations of the target) where the loss turns linear."""
        ridge: float = 1e-3
        """Weight of the squared exponents ``t`` and ``u``."""

    name = "scaled_mixing_law"
    scale_aware = True
    config: Config = field(default_factory=Config)
    parameters: list[np.ndarray] = field(default_factory=list)
    """Per target: ``[c, t (domains), s, u (domains), alpha]`` on the standardised scale."""
    scales: list[tuple[float, float]] = field(default_factory=list)
    reference_size: float = 0.0
    """``N_0``: the smallest size observed."""
    at_size: float | None = None
    """The size :meth:`predict` predicts at (None: the largest observed)."""
    largest_size: float = 0.0

    def unfit_reason(self, observations: Observations) -> str | None:
        sizes = observations.sizes
        if len(sizes) < 2:
            return "needs runs at two or more model sizes (a params column)"
        smallest = observations.subset(np.flatnonzero(observations.params == sizes[0]))
        reason = MixingLaw().unfit_reason(smallest)
        return None if reason is None else f"at the smallest size: {reason}"

    def at(self, size: float | None) -> ScaledMixingLaw:
        """This law predicting at model size ``size`` (None: the largest observed)."""
        return replace(self, at_size=size)

    def fit(self, observations: Observations, seed: int) -> ScaledMixingLaw:
        assert observations.params is not None, "a scaled law needs each run's model size"
        smallest = np.flatnonzero(observations.params == observations.sizes[0])
        start_law = MixingLaw().fit(observations.subset(smallest), seed)
        relative = observations.params / observations.sizes[0]
        starts = [
            self._start_from(law, (observations.scores[:, column] - mean) / scale, relative)
            for column, (law, (mean, scale)) in enumerate(
                zip(start_law.parameters, start_law.scales, strict=True)
            )
        ]
        return self._fit_from(observations, starts, start_law.scales)

    def refit(self, observations: Observations, seed: int) -> ScaledMixingLaw:
        """A bootstrap refit, started from this fitted law (no new mixing-law start)."""
        return self._fit_from(observations, self.parameters, self.scales)

    def _start_from(self, law: np.ndarray, target: np.ndarray, relative: np.ndarray) -> np.ndarray:
        """A start near the data: the smallest size's mixing law ``law`` as the floor, less
        the mean excess of the smallest size over the largest, a flat excess of that size."""
        alpha = self.config.alpha
        excess = float(
            np.mean(target[relative == 1.0]) - np.mean(target[relative == relative.max()])
        )
        level = np.log(max(excess / max(1.0 - relative.max() ** -alpha, 1e-6), 1e-3))
        domains = law.size - 1
        return np.concatenate(
            [[law[0] - np.exp(level)], law[1:], [level], np.zeros(domains), [alpha]]
        )

    def _fit_from(
        self,
        observations: Observations,
        starts: list[np.ndarray],
        scales: list[tuple[float, float]],
    ) -> ScaledMixingLaw:
        """The law fitted per target from ``starts`` on the standardised ``scales``."""
        assert observations.params is not None, "a scaled law needs each run's model size"
        sizes = observations.sizes
        relative = observations.params / sizes[0]
        # each size weighs as much as the others, however many runs it has
        counts = {n: int(np.sum(observations.params == n)) for n in sizes}
        weights = np.sqrt(
            len(relative) / (len(sizes) * np.array([counts[n] for n in observations.params]))
        )
        parameters = [
            self._fit_target(
                start,
                mixtures=observations.mixtures,
                relative=relative,
                target=(observations.scores[:, column] - mean) / scale,
                weights=weights,
                free_alpha=len(sizes) >= 3,
            )
            for column, (start, (mean, scale)) in enumerate(zip(starts, scales, strict=True))
        ]
        return replace(
            self,
            parameters=parameters,
            scales=list(scales),
            reference_size=sizes[0],
            largest_size=sizes[-1],
        )

    def _fit_target(
        self,
        start: np.ndarray,
        *,
        mixtures: np.ndarray,
        relative: np.ndarray,
        target: np.ndarray,
        weights: np.ndarray,
        free_alpha: bool,
    ) -> np.ndarray:
        domains = mixtures.shape[1]
        alpha = self.config.alpha
        ridge = np.sqrt(self.config.ridge)

        def residuals(params: np.ndarray) -> np.ndarray:
            full = params if free_alpha else np.concatenate([params, [alpha]])
            fitted = _evaluate(full, mixtures, relative)
            exponents = np.concatenate([full[1 : 1 + domains], full[2 + domains : 2 + 2 * domains]])
            return np.concatenate([(fitted - target) * weights, ridge * exponents])

        # Imported here, as the mixing law does: scipy.optimize takes ~0.3 s.
        from scipy.optimize import least_squares

        if free_alpha:
            lower = np.full(start.size, -np.inf)
            upper = np.full(start.size, np.inf)
            lower[-1], upper[-1] = 0.01, 2.0
            result = least_squares(
                residuals,
                start,
                bounds=(lower, upper),
                loss="huber",
                f_scale=self.config.huber_scale,
            )
            return result.x
        result = least_squares(residuals, start[:-1], loss="huber", f_scale=self.config.huber_scale)
        return np.concatenate([result.x, [alpha]])

    def predict(self, mixtures: np.ndarray) -> np.ndarray:
        size = self.largest_size if self.at_size is None else self.at_size
        return self.predict_at(mixtures, np.full(len(mixtures), size))

    def predict_at(self, mixtures: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """The objective of each row of ``mixtures`` at the model size of the same row."""
        assert self.parameters, "fit the law before predicting"
        relative = np.asarray(sizes, dtype=float) / self.reference_size
        per_target = [
            mean + scale * _evaluate(params, mixtures, relative)
            for params, (mean, scale) in zip(self.parameters, self.scales, strict=True)
        ]
        return np.mean(per_target, axis=0)


def _evaluate(params: np.ndarray, mixtures: np.ndarray, relative: np.ndarray) -> np.ndarray:
    domains = mixtures.shape[1]
    c, t = params[0], params[1 : 1 + domains]
    s, u, alpha = params[1 + domains], params[2 + domains : 2 + 2 * domains], params[-1]
    floor = c + np.exp(np.clip(mixtures @ t, -_EXPONENT_LIMIT, _EXPONENT_LIMIT))
    excess = np.exp(np.clip(s + mixtures @ u, -_EXPONENT_LIMIT, _EXPONENT_LIMIT))
    return floor + excess * relative**-alpha
