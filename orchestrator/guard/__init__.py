"""The comparison guard: a table of scores only for runs that differ in their data mixture.

tracker_io.py loads the runs from MLflow, rules/ refuses with reasons (:class:`RefusalCode`),
scoring.py compares the variants under a :class:`DecisionPolicy` (decision_policy.py; each
pair decided by decisions/), and the verdict goes back to MLflow with its Markdown report
(report.py) and plot. The rules: ``docs/design/guard.md``.

Design: docs/design/guard.md
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
from orchestrator.guard.decision_policy import DecisionPolicy
from orchestrator.guard.plot import plot
from orchestrator.guard.report import comparison_markdown
from orchestrator.guard.rules import check
from orchestrator.guard.scoring import compare
from orchestrator.guard.tracker_io import comparison_name, load_runs, log_comparison

__all__ = [
    "AGGREGATE",
    "SEED_FIELDS",
    "SEED_SETTINGS",
    "Comparison",
    "ComparisonRow",
    "DecisionPolicy",
    "Refusal",
    "RefusalCode",
    "RunSummary",
    "check",
    "compare",
    "comparison_markdown",
    "comparison_name",
    "load_runs",
    "log_comparison",
    "mixture_label",
    "plot",
]
