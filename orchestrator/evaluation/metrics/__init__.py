"""The held-out metrics every evaluation computes: one file per metric, registered here.

A new metric is a :class:`HeldOutMetric` in its own file, added to :data:`METRICS`: the
evaluator computes it, ``eval.jsonl`` and MLflow record it (``eval/<domain>_<name>``), and
``zephon compare --decide-on NAME`` decides on it.
"""

from orchestrator.evaluation.metrics.base import DocumentWeight, HeldOutMetric
from orchestrator.evaluation.metrics.bits_per_byte import BitsPerByte
from orchestrator.evaluation.metrics.token_accuracy import TokenAccuracy

DEFAULT_METRIC = BitsPerByte.name
"""What runs are ranked and decided on unless told otherwise."""
METRICS: tuple[HeldOutMetric, ...] = (BitsPerByte(), TokenAccuracy())
"""Every held-out metric, the default first."""


def held_out_metric(name: str) -> HeldOutMetric:
    """The registered metric ``name``; ``ValueError`` listing the registered ones if unknown."""
    for metric in METRICS:
        if metric.name == name:
            return metric
    known = ", ".join(m.name for m in METRICS)
    raise ValueError(f"unknown held-out metric {name!r}: use one of {known}")


__all__ = [
    "DEFAULT_METRIC",
    "METRICS",
    "BitsPerByte",
    "DocumentWeight",
    "HeldOutMetric",
    "TokenAccuracy",
    "held_out_metric",
]
