"""orchestrator.tracking.metric_units: which steps a sync sends, and in which batches; and the
lazy import."""

from __future__ import annotations

import subprocess
import sys

from orchestrator.experiment.run_record import PartialUnit
from orchestrator.tracking.metric_units import (
    EVAL_CURSOR,
    METRICS_CURSOR,
    TITAN_LOSS,
    Batch,
    Unit,
    batches,
    eval_units,
    metric_units,
)
from orchestrator.tracking.mlflow_names import (
    METRIC_DATA_WAIT,
    METRIC_EVAL_AGGREGATE,
    METRIC_EVAL_SECONDS,
    METRIC_LOSS,
    eval_metric,
)


def unit(step: int, points: int) -> Unit:
    return Unit(METRICS_CURSOR, step, {f"m{i}": float(i) for i in range(points)})


def test_metric_units_hold_back_steps_without_a_loss_until_final() -> None:
    metrics = {1: {TITAN_LOSS: 2.0, "step": 1}, 2: {TITAN_LOSS: 1.5}, 3: {"other": True}}
    steps = {1: {"data_wait_s": 0.25}, 2: {}, 3: {}, 4: {"data_wait_s": 1}}
    held = metric_units(metrics, steps, None, final=False)
    assert [u.step for u in held] == [1, 2]
    assert held[0].values == {METRIC_LOSS: 2.0, METRIC_DATA_WAIT: 0.25}  # "step", bools dropped
    assert [u.step for u in metric_units(metrics, steps, 1, final=True)] == [2, 3, 4]
    assert metric_units({}, steps, None, final=False) == []  # no loss yet: nothing is sent


def test_eval_units_average_the_datasets_when_no_aggregate_is_recorded() -> None:
    evals = {5: {"bpb": {"code": 1.0, "docs": 2.0, "bad": None}}, 9: {"aggregate_bpb": 3}}
    first, second = eval_units(evals, None)
    assert first.cursor == EVAL_CURSOR
    assert first.values == {
        eval_metric("code"): 1.0,
        eval_metric("docs"): 2.0,
        METRIC_EVAL_AGGREGATE: 1.5,
    }
    assert second.values == {METRIC_EVAL_AGGREGATE: 3.0}
    assert eval_units(evals, 5) == [second]


def test_the_held_out_eval_is_sent_from_eval_jsonl_whole_not_from_its_late_metrics_line() -> None:
    """The evaluator logs ``eval/...`` to metrics.jsonl after the step's loss line: a sync
    between the two sends the step without them, and its cursor passes the step. So the
    eval's numbers, its seconds too, come from its eval.jsonl line alone."""
    metrics = {2: {TITAN_LOSS: 1.5, "eval/seconds": 4.25, eval_metric("code"): 1.0}}
    (step,) = metric_units(metrics, {2: {}}, None, final=False)
    assert step.values == {METRIC_LOSS: 1.5}
    (scores,) = eval_units({2: {"bpb": {"code": 1.0}, "aggregate_bpb": 1.0, "seconds": 4.25}}, None)
    assert scores.values == {
        eval_metric("code"): 1.0,
        METRIC_EVAL_AGGREGATE: 1.0,
        METRIC_EVAL_SECONDS: 4.25,
    }


def sent(units: list[Unit], size: int) -> list[tuple[int, list[int], int | None]]:
    """Each batch as (points, steps of the units it completes, points of the unit it ends
    inside of that MLflow then holds)."""
    return [
        (len(b.points), [u.step for u in b.completed], b.partial and b.partial.points)
        for b in batches(units, size=size)
    ]


def test_batches_keep_a_unit_whole_when_it_fits() -> None:
    a, b, c = unit(1, 3), unit(2, 3), unit(3, 2)
    assert sent([a, b, c], size=5) == [(3, [1], None), (5, [2, 3], None)]


def test_a_unit_larger_than_a_batch_completes_with_its_last_point() -> None:
    empty, big, small = unit(1, 0), unit(2, 7), unit(3, 1)
    assert sent([empty, big, small], size=3) == [(3, [], 3), (3, [], 6), (2, [1, 2, 3], None)]
    (first, *_) = batches([empty, big, small], size=3)
    assert first.points == [("m0", 0.0, 2), ("m1", 1.0, 2), ("m2", 2.0, 2)]
    assert (first.partial.cursor, first.partial.step) == (METRICS_CURSOR, 2)
    assert list(batches([empty], size=3)) == [Batch([], [empty])]
    assert list(batches([], size=3)) == []


def test_a_unit_mlflow_holds_part_of_sends_the_rest_and_counts_on() -> None:
    """A sync killed inside a unit larger than a batch: the next one sends the points after
    those MLflow holds, and its batches say how far into the unit they reach."""
    big = unit(2, 7)
    held = PartialUnit.new(cursor=METRICS_CURSOR, step=2, points=3)
    rest = big.rest(held)
    assert list(rest.values) == ["m3", "m4", "m5", "m6"]
    assert sent([rest, unit(3, 1)], size=3) == [(3, [], 6), (2, [2, 3], None)]
    assert unit(3, 4).rest(held) == unit(3, 4)  # another unit's part: nothing held of this one
    eval_at_2 = Unit(EVAL_CURSOR, 2, big.values)
    assert eval_at_2.rest(held) == eval_at_2  # the same step of the other cursor


def test_importing_tracking_and_an_offline_check_do_not_import_mlflow() -> None:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from orchestrator.tracking import metric_units, provenance, store, store_reader, tracker\n"
        "from orchestrator.tracking import uris\n"
        "assert uris.reachable_uri('http://127.0.0.1:9', True, Path('.')) is None\n"
        "print('mlflow' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
