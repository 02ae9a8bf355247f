"""LightGBM's gradient-boosted trees on the token shares (RegMix's regressor)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from orchestrator.search.models.base import MixtureModel
from orchestrator.search.observations import Observations


@dataclass
class GradientBoosting(MixtureModel):
    """``lightgbm.LGBMRegressor`` (gbdt) on the objective; RegMix's settings by default, with
    ``min_child_samples`` scaled to the number of runs unless set (RegMix's fixed 20 makes
    every tree a single leaf below about 40 runs: a constant prediction)."""

    @dataclass
    class Config:
        learning_rate: float = 0.01
        """Shrinkage per tree (RegMix: 0.01)."""
        iterations: int = 1000
        """Trees (RegMix: 1000)."""
        min_child_samples: int | None = None
        """Fewest runs in a leaf; None: runs // 8, between 2 and 20 (RegMix: LightGBM's 20)."""
        min_runs: int = 32
        """Fewest runs it is fitted on; trees on fewer runs predict little but steps."""

    name = "lightgbm"
    config: Config = field(default_factory=Config)
    regressor: Any = None
    """The fitted ``LGBMRegressor``."""

    def unfit_reason(self, observations: Observations) -> str | None:
        runs = len(observations.ids)
        if runs < self.config.min_runs:
            return f"needs {self.config.min_runs} runs, has {runs}"
        return None

    def fit(self, observations: Observations, seed: int) -> GradientBoosting:
        import lightgbm

        runs = len(observations.ids)
        leaf = self.config.min_child_samples or max(2, min(20, runs // 8))
        regressor = lightgbm.LGBMRegressor(
            boosting_type="gbdt",
            learning_rate=self.config.learning_rate,
            n_estimators=self.config.iterations,
            min_child_samples=leaf,
            random_state=seed,
            deterministic=True,
            force_row_wise=True,
            n_jobs=1,
            verbose=-1,
        )
        regressor.fit(observations.mixtures, observations.objective)
        return replace(self, regressor=regressor)

    def predict(self, mixtures: np.ndarray) -> np.ndarray:
        assert self.regressor is not None, "fit the model before predicting"
        return np.asarray(self.regressor.predict(mixtures), dtype=float)
