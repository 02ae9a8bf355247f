"""orchestrator.tracking.metric_units: which steps a sync sends, and in which batches; and the
lazy import."""

from __future__ import annotations

import subprocess
import sys

from orchestrator.tracking.metric_units import (
    EVAL_CURSOR,
    METRICS_CURSOR,
    TITAN_LOSS,
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


def test_batches_keep_a_unit_whole_when_it_fits() -> None:
    a, b, c = unit(1, 3), unit(2, 3), unit(3, 2)
    assert [(len(p), [u.step for u in done]) for p, done in batches([a, b, c], size=5)] == [
        (3, [1]),
        (5, [2, 3]),
    ]


def test_a_unit_larger_than_a_batch_completes_with_its_last_point() -> None:
    empty, big, small = unit(1, 0), unit(2, 7), unit(3, 1)
    sent = [(len(p), [u.step for u in done]) for p, done in batches([empty, big, small], size=3)]
    assert sent == [(3, []), (3, []), (2, [1, 2, 3])]
    assert list(batches([empty], size=3)) == [([], [empty])]
    assert list(batches([], size=3)) == []


def test_importing_tracking_and_an_offline_check_do_not_import_mlflow() -> None:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from orchestrator.tracking import metric_units, provenance, store, stored_runs, tracker\n"
        "from orchestrator.tracking import uris\n"
        "assert uris.reachable_uri('http://127.0.0.1:9', True, Path('.')) is None\n"
        "print('mlflow' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
