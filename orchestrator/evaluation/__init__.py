"""Held-out evaluation: what is scored (metrics/), how an evaluation is recorded (record.py),
and the scorers that run inside TorchTitan (evaluator.py, row_scores.py, lm_eval_adapter.py,
with task_lookup.py checking task names at plan time).

Importing this package imports no torch: the guard, tracking and the CLI use the record and
the metric names; only the trainer imports the scorers.

Design: docs/design/orchestrator_evaluation.md.
"""

from orchestrator.evaluation.metrics import (
    DEFAULT_METRIC,
    METRICS,
    HeldOutMetric,
    held_out_metric,
)
from orchestrator.evaluation.record import DocumentScores, EvalRecord, EvalSource, MetricScores

__all__ = [
    "DEFAULT_METRIC",
    "METRICS",
    "DocumentScores",
    "EvalRecord",
    "EvalSource",
    "HeldOutMetric",
    "MetricScores",
    "held_out_metric",
]
