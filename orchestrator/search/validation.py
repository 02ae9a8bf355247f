"""k-fold out-of-sample validation of a model: rank correlation and regret@1."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from orchestrator.search.models import MixtureModel
from orchestrator.search.observations import Observations


@dataclass(frozen=True)
class ModelScore:
    """How well a model ranked mixtures it was not fitted on (every figure out of sample).

    Folds split distinct mixtures, so a mixture's replicates are never on both sides.
    """

    name: str
    cv_spearman: float | None
    """Spearman correlation between each held-out mixture's predicted objective and its
    observed mean over replicates (1: ranked perfectly); None if the model was not fitted."""
    cv_regret: float | None
    """Observed mean objective of the mixture with the best held-out prediction, minus the
    best observed mean (0: the predicted best is the best; in the scores' units)."""
    folds: int
    """Folds validated (0 if the model was not fitted)."""
    note: str = ""
    """Why the model was not fitted, if it was not."""

    def to_json(self) -> dict[str, object]:
        """The score as plain data."""
        return asdict(self)

    @property
    def ranking_key(self) -> tuple[float, float]:
        """Larger is better: the Spearman correlation to two decimals (closer figures are
        noise at these sizes), then the smaller regret."""
        if self.cv_spearman is None or self.cv_regret is None:
            return (-np.inf, -np.inf)
        return (round(self.cv_spearman, 2), -self.cv_regret)


def cross_validate(
    model: MixtureModel, observations: Observations, folds: int, seed: int
) -> ModelScore:
    """``model`` validated on ``folds`` folds of the distinct mixtures of ``observations``.

    Runs of several model sizes: the folds are the largest size's mixtures, held out at
    that size while every smaller size's runs stay in training (what a ladder predicts)."""
    reason = model.unfit_reason(observations)
    if reason:
        return ModelScore(model.name, None, None, 0, reason)
    everything = np.arange(len(observations.ids))
    kept, evaluated = np.array([], dtype=int), everything  # kept: always in training
    if len(observations.sizes) > 1:
        assert observations.params is not None
        largest = observations.params == observations.sizes[-1]
        kept, evaluated = everything[~largest], everything[largest]
    groups = [evaluated[rows] for rows in observations.subset(evaluated).mixture_groups()]
    order = np.random.default_rng(seed).permutation(len(groups))
    fold_of_group = np.empty(len(groups), dtype=int)
    fold_of_group[order] = np.arange(len(groups)) % folds
    predicted = np.empty(len(groups))
    for fold in range(folds):
        held_out = np.flatnonzero(fold_of_group == fold)
        training_rows = np.concatenate(
            [kept, *(groups[g] for g in range(len(groups)) if fold_of_group[g] != fold)]
        )
        training = observations.subset(training_rows)
        reason = model.unfit_reason(training)
        if reason:
            return ModelScore(model.name, None, None, 0, f"in a training fold: {reason}")
        fitted = model.fit(training, seed + fold)
        first_rows = [groups[g][0] for g in held_out]
        predicted[held_out] = fitted.predict(observations.mixtures[first_rows])
    objective = observations.objective
    observed = np.array([objective[rows].mean() for rows in groups])
    # Imported here: scipy.stats takes ~0.5 s, which every zephon-run would pay through
    # the Hydra plugin (hydra_plugins/zephon) though only a search validates models.
    from scipy.stats import spearmanr

    correlation = spearmanr(predicted, observed).statistic
    regret = float(observed[int(np.argmin(predicted))] - observed.min())
    return ModelScore(
        model.name,
        float(correlation) if np.isfinite(correlation) else 0.0,  # a constant prediction
        regret,
        folds,
    )
