"""The run folder's records as types: files of any release read, and written back as they were."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.experiment.run_record import (
    ExperimentRecord,
    RunState,
    RunStatus,
    Segment,
    TrackingCursor,
)
from orchestrator.experiment.runfolder import RunFolder

RUN_JSON: dict[str, Any] = {
    "launch_process_groups": [30615],
    "mlflow_experiment": "zephon-curation",
    "mlflow_run_id": "84dbffa9019c4d039448b289c88796ce",
    "parent_run_id": None,
    "segments": [
        {"device": "cpu", "dp_size": 2, "end_step": 6, "returncode": -2, "start_step": 0},
        {"dp_size": 1, "start_step": 4, "started_at": 1796433065.1},
    ],
    "slurm_job_id": "17",
    "status": "running",
    "sweep": None,
    "tracking": {
        "artifacts": {"zephon/steps.jsonl": [45249, 1796433095868173378]},
        "eval_step": 4,
        "inputs_logged": True,
        "metrics_step": 6,
        "params_logged": True,
        "parent_run_id": None,
        "tags": {"zephon.device": "cpu"},
    },
    "tracking_enabled": True,
    "tracking_uri": "sqlite:////runs/mlflow.db",
    "written_by_a_later_release": {"kept": [1, 2]},
}
"""A ``run.json`` with every field this release knows, and one it does not."""


def test_a_run_json_reads_typed_and_writes_back_byte_for_byte(tmp_path: Path) -> None:
    state = RunState.from_dict(RUN_JSON)
    assert state.status is RunStatus.RUNNING and state.dp_sizes == [2, 1]
    assert state.segments[0].returncode == -2 and state.segments[1].end_step is None
    assert state.tracking.metrics_step == 6 and state.tracking.params_logged
    assert state.launch_process_groups == (30615,) and state.slurm_job_id == "17"
    assert state.to_dict() == RUN_JSON

    folder = RunFolder(tmp_path / "run")
    (folder.path).mkdir()
    (folder.path / "run.json").write_text(json.dumps(RUN_JSON, indent=2, sort_keys=True) + "\n")
    before = (folder.path / "run.json").read_text()
    folder.write_state(folder.state())  # read and written back: the file is unchanged
    assert (folder.path / "run.json").read_text() == before


@given(st.sets(st.sampled_from(sorted(RUN_JSON))))
def test_any_subset_of_keys_round_trips(keys: set[str]) -> None:
    """A file of an earlier release lacks keys: they stay absent when it is written back."""
    partial = {k: RUN_JSON[k] for k in keys}
    assert RunState.from_dict(partial).to_dict() == partial


def test_a_change_writes_its_key_and_an_unknown_field_is_refused(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "run")
    state = RunState().with_(status=RunStatus.CREATED, segments=())
    folder.write_state(state)
    assert json.loads((folder.path / "run.json").read_text()) == {
        "status": "created",
        "segments": [],
    }
    grown = state.with_(segments=(Segment.new(dp_size=2, start_step=0),))
    assert grown.to_dict()["segments"] == [{"dp_size": 2, "start_step": 0}]
    with pytest.raises(TypeError, match="no \\['mlflow_id'\\]"):
        state.with_(mlflow_id="x")
    assert folder.state() == state  # nothing written for a refused change
    assert TrackingCursor.new(tags={}).with_(eval_step=3).to_dict() == {"tags": {}, "eval_step": 3}


def test_an_experiment_json_of_an_earlier_release_is_migrated_in_one_place() -> None:
    """Recorded before ``train.precision`` (TorchTitan's default then: bfloat16) and before
    orders had versions (v1), without an identity or a varied part."""
    old = {
        "config": {"name": "old", "data": {"mixture": {"a": 1.0}}, "train": {"steps": 4}},
        "contract": {"datasets": []},
        "mixture": {"a": "1.000000"},
        "contract_fingerprint": "c" * 64,
        "variant": "v" * 64,
        "init_checkpoint": {"init_key": "k", "path": "/init/step-0", "sha256": "s" * 64},
    }
    record = ExperimentRecord.from_dict(old)
    assert record.precision == "bfloat16" and record.data_settings["order"] == "v1"
    assert record.identity is None and record.varied == {} and record.extended == ()
    assert record.init_sha256 == "s" * 64 and record.planned_steps == 4
    assert record.fingerprints.contract_fingerprint == "c" * 64
    written = record.to_dict()
    assert set(written) == set(old)  # no key it did not have
    assert written["init_checkpoint"] == old["init_checkpoint"]
    assert written["config"]["train"] == {"steps": 4, "precision": "bfloat16"}


def test_the_answer_identity_is_the_one_recorded() -> None:
    """Identity from the children's fingerprints: the same value the run recorded at its start
    (a change to it would stop every earlier run from answering)."""
    record = ExperimentRecord.new(
        config={"eval": {"enable": True, "interval": 2}},
        contract_fingerprint="c" * 64,
        variant="v" * 64,
        recipe_fingerprint="r" * 64,
    )
    same = ExperimentRecord.from_dict(record.to_dict())
    assert same.answer_identity() == record.answer_identity()
    for changed in (
        record.with_(variant="w" * 64),
        record.with_(recipe_fingerprint="q" * 64),
        record.with_(config={"eval": {"enable": True, "interval": 4}}),
    ):
        assert changed.answer_identity() != record.answer_identity()
    assert record.with_(config={**record.config, "resources": {"dp": 4}}).answer_identity() == (
        record.answer_identity()
    )  # where it trains is no part of what it is


def test_a_damaged_file_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="expected a JSON object"):
        RunState.from_dict([1, 2])  # type: ignore[arg-type]
