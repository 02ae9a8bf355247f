"""Fit: every model validated out of sample, the best refitted on all runs, with bootstrap
refits for the uncertainty of its predictions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from orchestrator.errors import SearchError
from orchestrator.search.models import MODELS, MixtureModel
from orchestrator.search.observations import Observations
from orchestrator.search.validation import ModelScore, cross_validate

INTERVAL = (5.0, 95.0)
"""Percentiles of the bootstrap refits' predictions that bound an interval (90%)."""
EXTRAPOLATED_LEVEL = (
    "predicted beyond the largest model size observed: only the ranking of mixtures is "
    "extrapolated, not the level, so no interval is given. Runs at another size train on "
    "other token counts, which a law in parameters alone cannot place (RegMix's 1B runs, "
    "predicted from its 1M and 60M runs, were ranked well but their losses lay outside the "
    "bootstrap intervals); add runs at that size to predict its level"
)
"""Why predictions past the largest size observed carry no interval."""


@dataclass(frozen=True)
class Prediction:
    """A mixture, its predicted objective and the 90% bootstrap interval of that prediction."""

    mixture: dict[str, float]
    predicted: float
    interval: tuple[float, float] | None
    """None: predicted past the largest size observed (:data:`EXTRAPOLATED_LEVEL`)."""

    def to_json(self) -> dict[str, object]:
        """The prediction as plain data."""
        return {
            "mixture": self.mixture,
            "predicted": self.predicted,
            "interval": None if self.interval is None else list(self.interval),
        }


@dataclass
class FitResult:
    """The chosen model fitted on every observation, its bootstrap refits and every model's
    out-of-sample scores."""

    observations: Observations
    model: MixtureModel
    """The chosen model, fitted on all observations."""
    scores: list[ModelScore]
    """Every model's k-fold figures, in :data:`MODELS` order."""
    refits: list[MixtureModel] = field(default_factory=list)
    """The chosen model refitted on bootstrap samples of the runs."""
    at_size: float | None = None
    """The model size (parameters) predictions are for (None: the runs' only or largest)."""

    def predict(self, mixtures: np.ndarray) -> np.ndarray:
        """The chosen model's objective for each row of ``mixtures``."""
        return self.model.predict(mixtures)

    def refit_predictions(self, mixtures: np.ndarray) -> np.ndarray:
        """``(refits, len(mixtures))``: every bootstrap refit's objective per mixture."""
        return np.stack([refit.predict(mixtures) for refit in self.refits])

    @property
    def extrapolated(self) -> bool:
        """Whether predictions are for a model size beyond the largest observed."""
        sizes = self.observations.sizes
        return self.at_size is not None and bool(sizes) and self.at_size > max(sizes)

    def residuals(self) -> np.ndarray:
        """Observed minus predicted objective of the runs at the predicted size (all runs if
        it was not observed): the runs' own noise and the model's misfit, which the refits'
        spread does not hold."""
        obs = self.observations
        size = self.at_size if self.at_size is not None else max(obs.sizes, default=None)
        at = (
            np.flatnonzero(obs.params == size)
            if obs.params is not None and size in obs.sizes
            else np.arange(len(obs.ids))
        )
        return obs.objective[at] - self.model.predict(obs.mixtures[at])

    def predictions(self, mixtures: np.ndarray) -> list[Prediction]:
        """Each row of ``mixtures`` with its prediction and 90% interval for a run of it: the
        refits' spread and the residuals' at that size, added in quadrature (none when
        :attr:`extrapolated`: :data:`EXTRAPOLATED_LEVEL`)."""
        centre = self.predict(mixtures)
        domains = self.observations.domains
        rows = [dict(zip(domains, (float(w) for w in row), strict=True)) for row in mixtures]
        if self.extrapolated:
            return [Prediction(row, float(c), None) for row, c in zip(rows, centre, strict=True)]
        low, high = np.percentile(self.refit_predictions(mixtures), INTERVAL, axis=0)
        residuals = self.residuals()
        if residuals.size > 1:  # the two spreads added in quadrature, each side
            below, above = np.percentile(residuals, INTERVAL)
            low = centre - np.hypot(centre - low, below)
            high = centre + np.hypot(high - centre, above)
        return [
            Prediction(row, float(c), (float(min(lo, c)), float(max(hi, c))))
            for row, c, lo, hi in zip(rows, centre, low, high, strict=True)
        ]

    def to_json(self) -> dict[str, object]:
        """The fit as plain data: the chosen model and every model's figures."""
        observations = self.observations
        return {
            "model": self.model.name,
            "models": [score.to_json() for score in self.scores],
            "runs": len(observations.ids),
            "mixtures": len(observations.mixture_groups()),
            "domains": list(observations.domains),
            "targets": list(observations.targets),
            "objective": "mean of the targets, lower is better",
            "replicate_noise": observations.replicate_noise(),
            "sizes": observations.sizes,
            "at_size": self.at_size
            if self.at_size is not None
            else (observations.sizes[-1] if observations.sizes else None),
            "extrapolated": self.extrapolated,
            "level_note": EXTRAPOLATED_LEVEL if self.extrapolated else None,
        }


def fit(
    observations: Observations,
    *,
    models: Sequence[str] | None = None,
    folds: int = 5,
    refits: int = 32,
    seed: int = 0,
    at_size: float | None = None,
) -> FitResult:
    """Validate ``models`` (default: all of :data:`MODELS`) on ``folds`` folds, refit the
    best on every run and on ``refits`` bootstrap samples of them.

    The best model has the highest out-of-sample Spearman correlation (to two decimals),
    then the lowest regret@1. Seed blocks' effects, when known, are removed first (estimated
    on all runs: they are set-up effects, not what the folds validate). Deterministic for a given ``seed``. Raises
    :class:`SearchError` before any fitting if the request cannot work.

    Runs of several model sizes (``observations.params``) are fitted by the scale-aware
    models only, validated on the largest size's mixtures held out, and predicted at
    ``at_size`` parameters (default: the largest size observed).
    """
    names = list(models) if models else list(MODELS)
    problems = [
        f"unknown model {n!r}; choose from {sorted(MODELS)}" for n in names if n not in MODELS
    ]
    if len(observations.sizes) > 1:
        unaware = [n for n in names if n in MODELS and not MODELS[n].scale_aware]
        if models and unaware:
            problems.append(
                f"models {unaware} fit one model size, and these runs are of "
                f"{len(observations.sizes)}: fit one size's runs, or use "
                f"{[n for n, m in MODELS.items() if m.scale_aware]}"
            )
        names = [n for n in names if n in MODELS and MODELS[n].scale_aware]
    else:
        aware = [n for n in names if n in MODELS and MODELS[n].scale_aware]
        if (models and aware) or at_size is not None:
            problems.append(
                f"{'at_size=' + format(at_size, 'g') if at_size is not None else aware}: "
                "predicting across model sizes needs runs at two or more sizes (a params "
                "column in the scores table)"
            )
        names = [n for n in names if n in MODELS and not MODELS[n].scale_aware]
    if at_size is not None and not at_size > 0:
        problems.append(f"at_size={at_size}: give a positive parameter count, e.g. 1e9")
    if folds < 2:
        problems.append(f"folds={folds}: k-fold validation needs at least 2 folds")
    if refits < 2:
        problems.append(f"refits={refits}: an interval needs at least 2 bootstrap refits")
    if problems:
        raise SearchError(problems)
    observations.check_fittable()
    # Seed blocks shift every mixture alike; taken off, they stop looking like mixture effects.
    observations = observations.without_block_effects()
    folds = min(folds, len(observations.mixture_groups()))
    scores = [cross_validate(MODELS[name](), observations, folds, seed) for name in names]
    fitted = [s for s in scores if s.cv_spearman is not None]
    if not fitted:
        raise SearchError(
            [f"no model can be fitted: {s.name}: {s.note}" for s in scores]
            + ["run more distinct mixtures"]
        )
    best = max(fitted, key=lambda s: s.ranking_key)
    model = MODELS[best.name]().fit(observations, seed).at(at_size)
    rng = np.random.default_rng(seed)
    runs = len(observations.ids)
    samples = [rng.integers(0, runs, runs) for _ in range(refits)]
    return FitResult(
        observations,
        model,
        scores,
        [
            model.refit(observations.subset(rows), seed + 1 + k).at(at_size)
            for k, rows in enumerate(samples)
        ],
        at_size=at_size,
    )
