"""What a sync sends as metrics: a run folder's new steps and evals as units, their batches,
and the sending, each batch recorded in ``run.json`` before MLflow gets it.

A unit is the metric points of one training step (``metrics.jsonl`` and ``steps.jsonl``)
or of one eval (``eval.jsonl``). It goes whole into the cursor of ``run.json``: the
cursor passes a unit only once MLflow accepted the batch holding its last point. A unit
larger than a batch goes over several; ``run.json`` records how much of it MLflow holds
(``tracking.partial``), so that no point of it is sent twice either.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator import failpoints
from orchestrator.evaluation.record import EvalRecord, as_number
from orchestrator.experiment.run_record import InFlight, PartialUnit, TrackingCursor
from orchestrator.failpoints import Failpoint
from orchestrator.tracking.mirrored_run import MirroredRun
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
from orchestrator.tracking.store import (
    MAX_KEY,
    MAX_METRICS_PER_BATCH,
    Point,
    log_points,
    now_ms,
)

if TYPE_CHECKING:  # annotations only; the store imports MLflow at run time
    from mlflow import MlflowClient

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
    held: int = 0
    """How many of the unit's first points MLflow held already: ``values`` are the rest."""

    def rest(self, partial: PartialUnit | None) -> Unit:
        """This unit less the points that ``partial`` says MLflow holds, if it is this unit."""
        if partial is None or (partial.cursor, partial.step) != (self.cursor, self.step):
            return self
        rest = dict(list(self.values.items())[partial.points :])
        return Unit(self.cursor, self.step, rest, held=partial.points)


@dataclass(frozen=True)
class Batch:
    """Metric points sent in one call, and what MLflow holds once it accepts them."""

    points: list[Point]
    completed: list[Unit] = field(default_factory=list)
    """The units whose last point is in this batch (or that have none)."""
    partial: PartialUnit | None = None
    """The unit larger than a batch that this batch ends inside of, with the points of it
    MLflow then holds."""


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


def batches(units: list[Unit], size: int = MAX_METRICS_PER_BATCH) -> Iterator[Batch]:
    """The points of ``units`` in batches of at most ``size``, each with the units it completes.

    A unit's points share a batch when they fit in one; a unit larger than a batch spans
    several, and only the batch holding its last point completes it (the others say how
    far into it they reach). A unit without points completes with the next batch (possibly
    an empty one, last).
    """
    points: list[Point] = []
    completed: list[Unit] = []
    for unit in units:
        if points and len(points) + len(unit.values) > size:
            yield Batch(points, completed)
            points, completed = [], []
        for i, (key, value) in enumerate(unit.values.items()):
            if len(points) == size:  # a unit larger than a batch: these are its points alone
                reached = PartialUnit.new(cursor=unit.cursor, step=unit.step, points=unit.held + i)
                yield Batch(points, partial=reached)
                points = []
            points.append((key, value, unit.step))
        completed.append(unit)
    if points or completed:
        yield Batch(points, completed)


def send_metrics(
    client: MlflowClient, run: MirroredRun, run_id: str, *, final: bool
) -> dict[str, int]:
    """Send ``run``'s steps and evals after its cursor to the MLflow run ``run_id``, batch
    by batch (see :meth:`~orchestrator.tracking.tracker.Tracker.sync`); return what was sent."""
    tracking = _settle_in_flight(client, run, run_id)
    folder = run.folder
    units = [
        *metric_units(folder.metrics(), folder.steps(), tracking.metrics_step, final=final),
        *eval_units(folder.evals(), tracking.eval_step),
    ]
    counts = {"metrics": 0, "steps": 0, "evals": 0}
    now = now_ms()
    for batch in batches([unit.rest(tracking.partial) for unit in units]):
        cursors = {u.cursor: u.step for u in batch.completed}
        if batch.points:  # recorded first: a kill after MLflow accepts it loses nothing
            key, _, step = batch.points[-1]
            flight = InFlight.new(cursors=cursors, probe=key, step=step)
            if batch.partial is not None:
                flight = flight.with_(partial=batch.partial)
            run.commit(tracking=tracking.with_(in_flight=flight))
            log_points(client, run_id, batch.points, now)
            failpoints.reach(Failpoint.TRACKING_SENT, step)
            counts["metrics"] += len(batch.points)
        tracking = _accepted(tracking, cursors, batch.partial)
        run.commit(tracking=tracking)
        for unit in batch.completed:
            counts["steps" if unit.cursor == METRICS_CURSOR else "evals"] += 1
    return counts


def _settle_in_flight(client: MlflowClient, run: MirroredRun, run_id: str) -> TrackingCursor:
    """The cursor, once a batch a killed sync left in flight is settled: passed if MLflow
    holds its last point (it accepts a batch whole), else to be sent again."""
    tracking = run.state.tracking
    flight = tracking.in_flight
    if flight is None:
        return tracking
    held = {m.step for m in client.get_metric_history(run_id, flight.probe)}
    if flight.step in held:
        tracking = _accepted(tracking, flight.cursors, flight.partial)
    tracking = tracking.without("in_flight")
    run.commit(tracking=tracking)
    return tracking


def _accepted(
    tracking: TrackingCursor, cursors: Mapping[str, int], partial: PartialUnit | None
) -> TrackingCursor:
    """``tracking`` once MLflow accepted a batch that takes the ``cursors`` to the steps
    given and, if ``partial``, ends inside that unit."""
    tracking = tracking.with_(**cursors).without("in_flight")
    if partial is not None:
        return tracking.with_(partial=partial)
    done = tracking.partial
    if done is not None and cursors.get(done.cursor, done.step - 1) >= done.step:
        return tracking.without("partial")  # its last point went in this batch
    return tracking
