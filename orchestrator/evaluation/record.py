"""``EvalRecord``: one held-out evaluation of a run, as ``eval.jsonl`` holds it (one per line).

Bits per byte keep the keys runs have always written (``bpb``, ``aggregate_bpb``,
``documents`` of ``bits`` and ``bytes``); every other metric of
:data:`~orchestrator.evaluation.metrics.METRICS` is under ``metrics``. Records written
before a metric existed simply lack it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from orchestrator.evaluation.metrics import DEFAULT_METRIC


class EvalSource(StrEnum):
    """How an evaluation's scores were made."""

    COMPUTED = "computed"
    """Scored by this run's model."""
    REUSED = "reused"
    """The initial model's scores, taken from an earlier run of the same initial weights and
    evaluation (:mod:`orchestrator.evaluation.step_zero_cache`)."""


@dataclass(frozen=True)
class DocumentScores:
    """One domain's held-out documents under one metric, in document order."""

    values: list[float]
    """Each document's value: the sum of the metric's position values (bits, correct tokens)."""
    weights: list[float]
    """Each document's weight: its bytes or its scored tokens (the metric's ``per``)."""

    @property
    def score(self) -> float:
        """The domain's score: its documents' values over their weights."""
        return math.fsum(self.values) / max(1.0, math.fsum(self.weights))


@dataclass(frozen=True)
class MetricScores:
    """One metric at one evaluation: each domain's score and their mean."""

    scores: dict[str, float]
    """Held-out domain -> score."""
    aggregate: float | None
    """The mean of the domains' scores (None: a record that has none, damaged or partial)."""
    documents: dict[str, DocumentScores] = field(default_factory=dict)
    """Held-out domain -> its documents' values (empty in records written without them)."""

    @classmethod
    def of_documents(cls, documents: dict[str, DocumentScores]) -> MetricScores:
        """The scores of ``documents`` (module docstring of :mod:`.metrics.base`)."""
        scores = {domain: docs.score for domain, docs in documents.items()}
        return cls(scores, math.fsum(scores.values()) / max(1, len(scores)), documents)


@dataclass(frozen=True)
class EvalRecord:
    """One evaluation of a run at one step (module docstring)."""

    step: int
    metrics: dict[str, MetricScores]
    """Metric name -> its scores; bits per byte (``bpb``) always."""
    tokens: dict[str, int] = field(default_factory=dict)
    """Held-out domain -> tokens scored."""
    bytes: dict[str, int] = field(default_factory=dict)
    """Held-out domain -> UTF-8 bytes of its documents."""
    seconds: float | None = None
    tasks: dict[str, dict[str, float]] = field(default_factory=dict)
    """Downstream task -> metric -> score (``eval.tasks``)."""
    higher_is_better: dict[str, dict[str, bool]] = field(default_factory=dict)
    """Downstream task -> metric -> whether higher is better (lm-eval's flags)."""
    made: EvalSource = EvalSource.COMPUTED
    """Computed or reused; ``seconds`` is what this run spent either way."""

    def to_json(self) -> dict[str, Any]:
        """The ``eval.jsonl`` line (module docstring)."""
        bpb = self.metrics[DEFAULT_METRIC]
        line: dict[str, Any] = {
            "step": self.step,
            "bpb": bpb.scores,
            "aggregate_bpb": bpb.aggregate,
            "tokens": self.tokens,
            "bytes": self.bytes,
            "documents": {
                domain: {"bits": docs.values, "bytes": [int(w) for w in docs.weights]}
                for domain, docs in bpb.documents.items()
            },
            "metrics": {
                name: {
                    "scores": scores.scores,
                    "aggregate": scores.aggregate,
                    "documents": {
                        domain: {"values": docs.values, "weights": docs.weights}
                        for domain, docs in scores.documents.items()
                    },
                }
                for name, scores in self.metrics.items()
                if name != DEFAULT_METRIC
            },
        }
        if self.seconds is not None:
            line["seconds"] = round(self.seconds, 3)
        if self.tasks:
            line["tasks"] = self.tasks
            line["higher_is_better"] = self.higher_is_better
        if self.made is not EvalSource.COMPUTED:  # computed lines keep the keys they had
            line["made"] = self.made.value
        return line

    @classmethod
    def from_json(cls, line: dict[str, Any]) -> EvalRecord:
        """The record of an ``eval.jsonl`` line; values that are not numbers are left out
        (a record damaged in transit loses them, not the rest). ``KeyError`` without a step."""
        metrics = {DEFAULT_METRIC: _bits_per_byte(line)}
        for name, raw in (line.get("metrics") or {}).items():
            documents = {
                str(domain): DocumentScores(list(docs["values"]), list(docs["weights"]))
                for domain, docs in (raw.get("documents") or {}).items()
            }
            scores = _numbers(raw.get("scores"))
            aggregate = as_number(raw.get("aggregate"))
            metrics[str(name)] = MetricScores(scores, aggregate, documents)
        seconds = as_number(line.get("seconds"))
        return cls(
            step=int(line["step"]),
            metrics=metrics,
            tokens={str(k): int(v) for k, v in (line.get("tokens") or {}).items()},
            bytes={str(k): int(v) for k, v in (line.get("bytes") or {}).items()},
            seconds=seconds,
            tasks={str(t): dict(m) for t, m in (line.get("tasks") or {}).items()},
            higher_is_better={
                str(t): dict(f) for t, f in (line.get("higher_is_better") or {}).items()
            },
            made=EvalSource.REUSED
            if line.get("made") == EvalSource.REUSED
            else EvalSource.COMPUTED,
        )


def _bits_per_byte(line: dict[str, Any]) -> MetricScores:
    scores = _numbers(line.get("bpb"))
    aggregate = as_number(line.get("aggregate_bpb"))
    documents = {
        str(domain): DocumentScores(list(docs["bits"]), [float(b) for b in docs["bytes"]])
        for domain, docs in (line.get("documents") or {}).items()
    }
    return MetricScores(scores, aggregate, documents)


def as_number(value: object) -> float | None:
    """``value`` as a float if it is a number (not a bool), else None (tracking reads every
    metric of a run's records through it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _numbers(values: dict[str, Any] | None) -> dict[str, float]:
    """The entries of ``values`` that are numbers."""
    numbers = {str(k): as_number(v) for k, v in (values or {}).items()}
    return {k: v for k, v in numbers.items() if v is not None}
