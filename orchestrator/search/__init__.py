"""Mix search: fit mixture -> score models on observed runs, propose the next mixtures.

:func:`fit` validates every model (k-fold) and refits the best with bootstrap refits;
:func:`propose` samples the next mixtures from those refits and says when to stop.
Pure computation: no MLflow, no subprocess; only ``run_observations.py`` reads runs,
through the guard. Lower scores are better; the objective is the mean of the target scores.

Design: docs/design/search.md
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
