"""The base class of a mixture -> score model: fit on observations, predict the objective."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from orchestrator.search.observations import Observations


class MixtureModel(ABC):
    """A regressor from token shares to the objective (the mean of the target scores).

    Subclasses fit with :meth:`fit`, predict with :meth:`predict` and give bootstrap
    refits with :meth:`refit`, which may reuse what the full fit learned (a GP's kernel,
    a law's parameters as a start) to stay cheap.
    """

    name: ClassVar[str]
    """The model's name in reports and on the command line."""
    scale_aware: ClassVar[bool] = False
    """Whether it fits runs of several model sizes (a ``params`` column) and predicts at
    one (:meth:`at`); the others fit runs of one size only."""

    def at(self, size: float | None) -> MixtureModel:
        """This model predicting at model size ``size``; a model of one size ignores it."""
        del size
        return self

    @abstractmethod
    def unfit_reason(self, observations: Observations) -> str | None:
        """Why this model cannot be fitted on ``observations`` (None: it can)."""

    @abstractmethod
    def fit(self, observations: Observations, seed: int) -> MixtureModel:
        """A fitted copy of this model (``self`` is left as it was)."""

    @abstractmethod
    def predict(self, mixtures: np.ndarray) -> np.ndarray:
        """The objective predicted for each row of ``mixtures`` ``(n, domains)``."""

    def refit(self, observations: Observations, seed: int) -> MixtureModel:
        """A fitted copy on other observations (a bootstrap sample) of this fitted model."""
        return self.fit(observations, seed)
