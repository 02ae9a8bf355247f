"""Zephon's models on RegMix's published runs: 512 training and 256 test mixtures of 17 Pile
domains (1M-parameter models, 1B tokens each), target the Pile-CC validation loss.

For the first ``n`` training runs (``n`` = 32, 64, 512): ``orchestrator.search.fit`` (every
model's 5-fold out-of-sample Spearman and regret@1, the chosen model), then every model
fitted on the ``n`` runs and its Spearman correlation on the 256 test runs, next to
LightGBM with RegMix's exact settings (gbdt, learning rate 0.01, 1000 iterations,
LightGBM's default ``min_child_samples=20``) validated and tested the same way.

The data: ``tests/data/regmix/`` (``tests/data/README.md``).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import ConstantInputWarning, spearmanr

from benchmarks.machine import REPO_ROOT
from orchestrator.search import Observations, fit, read_tables
from orchestrator.search.models import MODELS, GradientBoosting, MixtureModel
from orchestrator.search.validation import cross_validate

DATA = REPO_ROOT / "tests" / "data" / "regmix"
TARGET = "metric/the_pile_pile_cc_val_loss"
FOLDS = 5
"""``fit``'s default folds, used for RegMix's LightGBM too."""
REGMIX_LIGHTGBM = "lightgbm (RegMix's settings)"
CHOSEN = "chosen"
"""The row of the model ``fit`` chose."""


def read_runs(data: Path = DATA) -> tuple[Observations, Observations]:
    """RegMix's (training, test) runs with :data:`TARGET` as the one score."""
    train = read_tables(data / "train_mixture_1m.csv", data / "train_pile_loss_1m.csv", [TARGET])
    test = read_tables(data / "test_mixture_1m.csv", data / "test_pile_loss_1m.csv", [TARGET])
    return train, test


def spearman_on_test(model: MixtureModel, test: Observations) -> float | None:
    """Spearman correlation of ``model``'s predictions for the test runs with their losses
    (None: a constant prediction, which ranks nothing)."""
    with warnings.catch_warnings():  # a constant prediction is reported as None, below
        warnings.simplefilter("ignore", ConstantInputWarning)
        correlation = spearmanr(model.predict(test.mixtures), test.objective).statistic
    return float(correlation) if math.isfinite(correlation) else None


def evaluate(runs: int, data: Path = DATA, seed: int = 0) -> dict[str, object]:
    """Every model's figures on the first ``runs`` training runs (module docstring)."""
    train, test = read_runs(data)
    observations = train.subset(range(runs))
    # Two refits: the bootstrap refits only give proposals their intervals, nothing here
    # uses them, and on 512 runs each costs seconds.
    result = fit(observations, seed=seed, refits=2)
    rows: list[dict[str, object]] = []
    for score in result.scores:
        model = MODELS[score.name]()
        fitted = None if model.unfit_reason(observations) else model.fit(observations, seed)
        rows.append(
            {
                **score.to_json(),
                "test_spearman": spearman_on_test(fitted, test) if fitted else None,
            }
        )
    chosen = next(row for row in rows if row["name"] == result.model.name)
    rows.append({**chosen, "name": CHOSEN, "model": result.model.name})
    regmix = GradientBoosting(GradientBoosting.Config(min_child_samples=20, min_runs=0))
    regmix_spearman = spearman_on_test(regmix.fit(observations, seed), test)
    rows.append(
        {
            **cross_validate(regmix, observations, FOLDS, seed).to_json(),
            "name": REGMIX_LIGHTGBM,
            "test_spearman": regmix_spearman,
            "note": ""
            if regmix_spearman is not None
            else "a constant prediction (every tree one leaf); its CV figures rank the folds' "
            "training means, not mixtures",
        }
    )
    return {
        "runs": runs,
        "test_runs": len(test.ids),
        "domains": len(train.domains),
        "chosen": result.model.name,
        "models": rows,
        "test_loss_range": [float(np.min(test.objective)), float(np.max(test.objective))],
    }
