"""Mixture -> score models: the per-domain mixing law, a Gaussian process, LightGBM, and the
mixing law across model sizes."""

from __future__ import annotations

from orchestrator.search.models.base import MixtureModel
from orchestrator.search.models.gaussian_process import GaussianProcess
from orchestrator.search.models.gradient_boosting import GradientBoosting
from orchestrator.search.models.mixing_law import MixingLaw
from orchestrator.search.models.scaled_mixing_law import ScaledMixingLaw

MODELS: dict[str, type[MixtureModel]] = {
    model.name: model for model in (MixingLaw, GaussianProcess, GradientBoosting, ScaledMixingLaw)
}
"""Every model by name, in the order reports list them."""

__all__ = [
    "MODELS",
    "GaussianProcess",
    "GradientBoosting",
    "MixingLaw",
    "MixtureModel",
    "ScaledMixingLaw",
]
