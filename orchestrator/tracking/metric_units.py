"""What a sync sends as metrics: a run folder's new steps and evals as units, and their batches.

A unit is the metric points of one training step (``metrics.jsonl`` and ``steps.jsonl``)
or of one eval (``eval.jsonl``). It goes whole into the cursor of ``run.json``: the
cursor passes a unit only once MLflow accepted the batch holding its last point.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from orchestrator.evaluation.record import EvalRecord, as_number
from orchestrator.tracking.mlflow_names import (
    METRIC_DATA_WAIT,
    METRIC_EVAL_PREFIX,
    METRIC_EVAL_SECONDS,
    METRIC_LOSS,
    METRIC_TOKENS_PER_S,
    eval_aggregate_metric,
    eval_metric,
    metric_key,
    task_metric,
)
from orchestrator.tracking.store import MAX_KEY, MAX_METRICS_PER_BATCH, Point

TITAN_LOSS = "loss_metrics/global_avg_loss"
TITAN_THROUGHPUT = "throughput_tps"
STEP_DATA_WAIT = "data_wait_s"

TITAN_RENAMED = {TITAN_LOSS: METRIC_LOSS, TITAN_THROUGHPUT: METRIC_TOKENS_PER_S}
"""TorchTitan's metric names that Zephon logs under names of its own."""

METRICS_CURSOR = "metrics_step"
"""The field of ``run.json["tracking"]`` holding the last training step sent."""
EVAL_CURSOR = "eval_step"
"""The field of ``run.json["tracking"]`` holding the last eval step sent."""


@dataclass(frozen=True)
class Unit:
    """The metrics of one step, sent together; ``cursor`` names the cursor field it advances."""

    cursor: str
    step: int
    values: dict[str, float]


def metric_units(
    metrics: dict[int, dict[str, Any]],
    steps: dict[int, dict[str, Any]],
    sent: int | None,
    *,
    final: bool,
) -> list[Unit]:
    """One unit per training step after ``sent``, from ``metrics.jsonl`` and ``steps.jsonl``.

    A step's data line comes before TorchTitan's loss line: unless ``final``, every step
    after the newest one whose loss is in is held back.
    """
    horizon = (
        None if final else max((s for s, m in metrics.items() if TITAN_LOSS in m), default=None)
    )
    return [
        Unit(METRICS_CURSOR, step, _step_values(metrics.get(step, {}), steps.get(step, {})))
        for step in sorted(set(metrics) | set(steps))
        if (sent is None or step > sent) and (final or (horizon is not None and step <= horizon))
    ]


def _step_values(logged: dict[str, Any], record: dict[str, Any]) -> dict[str, float]:
    """The metrics of one step: TorchTitan's ``logged`` numbers, and the data wait of its
    ``steps.jsonl`` ``record``.

    The held-out eval's numbers (``eval/...``) are left out: the evaluator logs them to
    ``metrics.jsonl`` after the step's loss, when a sync may have sent the step already, so
    they come from ``eval.jsonl`` (:func:`eval_units`), written whole before them.
    """
    values: dict[str, float] = {}
    for name, raw in logged.items():
        value = as_number(raw)
        if name == "step" or name.startswith(METRIC_EVAL_PREFIX) or value is None:
            continue
        key = TITAN_RENAMED.get(name, metric_key(name))
        if key:
            values[key[:MAX_KEY]] = value
    wait = as_number(record.get(STEP_DATA_WAIT))
    if wait is not None:
        values[METRIC_DATA_WAIT] = wait
    return values


def eval_units(evals: dict[int, dict[str, Any]], sent: int | None) -> list[Unit]:
    """One unit per eval step after ``sent`` of ``eval.jsonl``: bits per byte per dataset
    and their aggregate (the mean of the datasets' if the eval recorded none)."""
    return [
        Unit(EVAL_CURSOR, step, _eval_scores(step, evals[step]))
        for step in sorted(evals)
        if sent is None or step > sent
    ]


def _eval_scores(step: int, line: dict[str, Any]) -> dict[str, float]:
    """The metrics of one ``eval.jsonl`` line: each held-out metric per domain and its
    aggregate (the mean of the domains' if the line has none), the tasks' metrics, and the
    eval's seconds."""
    record = EvalRecord.from_json({**line, "step": step})
    values = {} if record.seconds is None else {METRIC_EVAL_SECONDS: record.seconds}
    for metric, scores in record.metrics.items():
        values.update({eval_metric(d, metric): x for d, x in scores.scores.items()})
        aggregate = scores.aggregate
        if aggregate is None and scores.scores:
            aggregate = math.fsum(scores.scores.values()) / len(scores.scores)
        if aggregate is not None:
            values[eval_aggregate_metric(metric)] = aggregate
    for task, task_scores in record.tasks.items():
        for metric, raw in task_scores.items():
            if (value := as_number(raw)) is not None:
                values[task_metric(task, metric)] = value
    return values


def batches(
    units: list[Unit], size: int = MAX_METRICS_PER_BATCH
) -> Iterator[tuple[list[Point], list[Unit]]]:
    """The points of ``units`` in batches of at most ``size``, each with the units it completes.

    A unit's points share a batch when they fit in one; a unit larger than a batch spans
    several, and only the batch holding its last point completes it. A unit without
    points completes with the next batch (possibly an empty one, last).
    """
    points: list[Point] = []
    completed: list[Unit] = []
    for unit in units:
        if points and len(points) + len(unit.values) > size:
            yield points, completed
            points, completed = [], []
        for key, value in unit.values.items():
            if len(points) == size:  # a unit larger than a batch
                yield points, []
                points = []
            points.append((key, value, unit.step))
        completed.append(unit)
    if points or completed:
        yield points, completed
