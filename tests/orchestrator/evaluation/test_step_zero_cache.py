"""The step-0 eval cache: what its key covers, and that only a whole entry is ever read."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from orchestrator.evaluation import DEFAULT_METRIC, DocumentScores, EvalRecord, MetricScores
from orchestrator.evaluation.record import EvalSource
from orchestrator.evaluation.step_zero_cache import (
    InitialModel,
    InitialScoring,
    StepZeroCache,
    parallel_layout,
    rows_fingerprint,
    scoring_code,
)
from orchestrator.tracking.metric_units import eval_units
from orchestrator.tracking.mlflow_names import METRIC_EVAL_SECONDS
from pipeline import fingerprint


def rows(tokens: list[int], names: tuple[str, ...] = ("code", "docs")) -> str:
    inputs = np.array([tokens], dtype=np.int64)
    return rows_fingerprint(list(names), [inputs, np.array([0]), np.array([3])])


def scoring(**changes: object) -> InitialScoring:
    model = InitialModel(weights="a" * 64, config="model-1", precision="float32")
    base = InitialScoring(
        model=model,
        eval_set=rows([1, 2, 3]),
        rows_per_forward=8,
        metrics=("bpb", "accuracy"),
        device="cpu",
        layout=None,
        code=scoring_code(),
    )
    return dataclasses.replace(base, **changes)


def record(step: int = 0) -> EvalRecord:
    documents = {"code": DocumentScores([3.5, 1.25], [4.0, 2.0])}
    return EvalRecord(
        step=step,
        metrics={
            DEFAULT_METRIC: MetricScores.of_documents(documents),
            "accuracy": MetricScores.of_documents({"code": DocumentScores([1.0, 0.0], [2.0, 1.0])}),
        },
        tokens={"code": 3},
        bytes={"code": 6},
        seconds=9.5,
    )


def test_the_key_follows_the_weights_the_eval_set_and_the_model() -> None:
    base = scoring()
    model = base.model
    changed = [
        scoring(model=dataclasses.replace(model, weights="b" * 64)),  # another checkpoint
        scoring(model=dataclasses.replace(model, config="model-2")),  # another model config
        scoring(model=dataclasses.replace(model, precision="bfloat16")),
        scoring(eval_set=rows([1, 2, 4])),  # one token of the documents
        scoring(eval_set=rows([1, 2, 3], names=("code", "prose"))),  # the record's domains
        scoring(rows_per_forward=4),
        scoring(layout="dp2-tp1"),
    ]
    keys = {base.key, *(s.key for s in changed)}
    assert len(keys) == len(changed) + 1
    assert scoring().key == base.key  # content only: the same content, the same key
    assert len(base.key) == 64 and int(base.key, 16) >= 0


def test_the_dp_size_is_in_the_key_only_where_it_can_change_a_score() -> None:
    assert parallel_layout(device="cpu", precision="float32", dp=1, tp=1) is None
    assert parallel_layout(device="cpu", precision="float32", dp=2, tp=1) is None
    assert parallel_layout(device="cpu", precision="bfloat16", dp=2, tp=1) == "dp2-tp1"
    assert parallel_layout(device="cuda", precision="float32", dp=1, tp=1) == "dp1-tp1"
    assert parallel_layout(device="cpu", precision="float32", dp=1, tp=2) == "dp1-tp2"


def test_a_stored_record_is_reused_whole(tmp_path: Path) -> None:
    cache, key = StepZeroCache(tmp_path), scoring().key
    assert cache.load(key) is None  # a miss
    cache.store(key, record())
    assert cache.load(key) == record()
    assert [p.name for p in tmp_path.iterdir()] == [f"{key}.json"]  # no temporary file left


@pytest.mark.parametrize(
    "damage",
    ["truncated", "values changed", "another key", "another format", "not step 0", "not json"],
)
def test_a_damaged_entry_is_ignored_and_replaced(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cache, key = StepZeroCache(tmp_path), scoring().key
    cache.store(key, record())
    path = cache.path(key)
    text = path.read_text()
    entry = json.loads(text)
    if damage == "truncated":  # what a write without a rename leaves when killed
        path.write_text(text[: len(text) // 2])
    elif damage == "not json":
        path.write_bytes(b"\x00" * 16)
    else:
        if damage == "values changed":
            entry["record"]["bpb"]["code"] = 0.1
        elif damage == "another key":
            entry["key"] = scoring(rows_per_forward=2).key
        elif damage == "another format":
            entry["format"] = 0
        else:
            entry["record"]["step"] = 4
            entry["sha256"] = fingerprint(entry["record"])
        path.write_text(json.dumps(entry))
    assert cache.load(key) is None
    assert "ignoring step-0 eval cache entry" in capsys.readouterr().err
    cache.store(key, record())  # computed again, stored over it
    assert cache.load(key) == record()


def test_a_half_written_entry_is_never_read(tmp_path: Path) -> None:
    """The writer's temporary file (a kill mid-write) is not the entry: a reader misses."""
    cache, key = StepZeroCache(tmp_path), scoring().key
    (tmp_path / f".{key}.json.123.tmp").write_text('{"format": 1, "key": "')
    assert cache.load(key) is None


def test_a_reused_record_reaches_mlflow_as_the_computed_one() -> None:
    """The run records the reused scores in eval.jsonl marked ``made: reused``; tracking
    sends the same metrics from it, the seconds (what this run spent) aside."""
    computed = record()
    reused = dataclasses.replace(computed, seconds=0.05, made=EvalSource.REUSED)
    line = json.loads(json.dumps(reused.to_json()))
    assert line["made"] == "reused" and "made" not in computed.to_json()
    assert EvalRecord.from_json(line) == reused
    (sent_computed,) = eval_units({0: computed.to_json()}, None)
    (sent_reused,) = eval_units({0: line}, None)
    assert sent_reused.values.pop(METRIC_EVAL_SECONDS) == 0.05
    assert sent_computed.values.pop(METRIC_EVAL_SECONDS) == 9.5
    assert sent_reused.values == sent_computed.values and len(sent_reused.values) == 4
