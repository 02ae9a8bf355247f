"""Mix search: fit mixture -> score models on observed runs, propose the next mixtures.

::

    observations.py   Observations (a mixture and target scores per run), read_tables
    runs.py           Observations from Zephon runs the comparison guard accepts
    models/           MixtureModel and its kinds: the per-domain mixing law, a Gaussian
                      process, LightGBM
    validation.py     k-fold out-of-sample Spearman and regret@1 per model
    fit.py            fit(): every model validated, the best refitted with bootstrap refits
    design.py         initial_design(): uniform, token-proportional, Dirichlet draws
    confirmation.py   the confirmation's confidence per decision (Bonferroni)
    propose.py        propose(): Thompson sampling over the refits within bounds and
                      repetition caps, the recommended mixture, the stop rule

Pure computation: no MLflow, no subprocess; only ``runs.py`` reads runs, through the guard.
Lower scores are better; the objective is the mean of the target scores.
"""

from __future__ import annotations

from orchestrator.search.design import initial_design
from orchestrator.search.fit import FitResult, Prediction, fit
from orchestrator.search.observations import Observations, read_tables
from orchestrator.search.propose import Bounds, Proposal, StopSignal, propose

__all__ = [
    "Bounds",
    "FitResult",
    "Observations",
    "Prediction",
    "Proposal",
    "StopSignal",
    "fit",
    "initial_design",
    "propose",
    "read_tables",
]
