"""The comparison guard: a table of scores only for runs that differ in their data mixture.

::

    MLflow runs ── runs.py (load_runs, through the tracker) ──> RunSummary per run
                                                                   │
                        rules.py: check / compare (refusals with reasons, or rows)
                                                                   │
                        decisions.py: every pair of variants decided (paired t over
                        held-out documents and seeds: a_better / b_better / cannot_tell)
                                                                   │
    runs.py (log_comparison) <── plot.py (comparison.png) <── Comparison

The rules themselves are in :mod:`orchestrator.guard.rules`, the statistics in
:mod:`orchestrator.guard.decisions`.
"""

from orchestrator.guard.plot import plot
from orchestrator.guard.rules import (
    AGGREGATE,
    CONTRACT_MISMATCH,
    DIVERGED_DATA,
    NO_COMMON_EVAL,
    NO_DATA,
    TOO_FEW_RUNS,
    UNPAIRED_SEEDS,
    Comparison,
    Refusal,
    RunSummary,
    check,
    compare,
    mixture_label,
)
from orchestrator.guard.runs import comparison_name, load_runs, log_comparison

__all__ = [
    "AGGREGATE",
    "CONTRACT_MISMATCH",
    "DIVERGED_DATA",
    "NO_COMMON_EVAL",
    "NO_DATA",
    "TOO_FEW_RUNS",
    "UNPAIRED_SEEDS",
    "Comparison",
    "Refusal",
    "RunSummary",
    "check",
    "compare",
    "comparison_name",
    "load_runs",
    "log_comparison",
    "mixture_label",
    "plot",
]
