"""The comparison guard: a table of scores only for runs that differ in their data mixture.

::

    MLflow runs ── runs.py (load_runs, through the tracker) ──> RunSummary per run
                                                                   │
                        rules.py: check (refusals with reasons, coded by RefusalCode)
                                                                   │
                        scoring.py: compare (one row per variant; every pair of variants
                        decided by decisions.py: paired t over held-out documents and
                        seeds: a_better / b_better / cannot_tell)
                                                                   │
    runs.py (log_comparison) <── plot.py (comparison.png) <── Comparison (comparison.py,
                                                              report.py: its Markdown)

How the guard decides, rule by rule: ``docs/design/guard.md``.
"""

from orchestrator.guard.comparison import (
    AGGREGATE,
    SEED_FIELDS,
    SEED_SETTINGS,
    Comparison,
    ComparisonRow,
    Refusal,
    RefusalCode,
    RunSummary,
    mixture_label,
)
from orchestrator.guard.plot import plot
from orchestrator.guard.rules import check
from orchestrator.guard.runs import comparison_name, load_runs, log_comparison
from orchestrator.guard.scoring import compare

__all__ = [
    "AGGREGATE",
    "SEED_FIELDS",
    "SEED_SETTINGS",
    "Comparison",
    "ComparisonRow",
    "Refusal",
    "RefusalCode",
    "RunSummary",
    "check",
    "compare",
    "comparison_name",
    "load_runs",
    "log_comparison",
    "mixture_label",
    "plot",
]
