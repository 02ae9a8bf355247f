"""Mixture -> score models: the per-domain mixing law, a Gaussian process, LightGBM."""

from __future__ import annotations

from orchestrator.search.models.base import MixtureModel
from orchestrator.search.models.gaussian_process import GaussianProcess
from orchestrator.search.models.gradient_boosting import GradientBoosting
from orchestrator.search.models.mixing_law import MixingLaw

MODELS: dict[str, type[MixtureModel]] = {
    model.name: model for model in (MixingLaw, GaussianProcess, GradientBoosting)
}
"""Every model by name, in the order reports list them."""

__all__ = ["MODELS", "GaussianProcess", "GradientBoosting", "MixingLaw", "MixtureModel"]
