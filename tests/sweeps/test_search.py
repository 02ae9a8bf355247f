"""The searching sweep's parts without training: its spec, its saved state, its trajectory,
and requests refused before anything launches (a real search is tests/e2e/test_search_e2e.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from orchestrator.errors import ExperimentError
from orchestrator.search import Observations
from sweeps.search_report import plot_search, trajectory
from sweeps.search_state import SearchRound, SearchSpec, SearchState
from tests.support.sweeps import datasets_override, multirun
from tests.support.titan_run import corpus


def test_the_spec_refuses_unknown_keys_and_bad_values_naming_them() -> None:
    with pytest.raises(ExperimentError, match=r"search\.round: unknown"):
        SearchSpec.from_config({"round": 2})
    with pytest.raises(ExperimentError) as refused:
        SearchSpec.from_config({"rounds": -1, "per_round": 0, "stop": "yes"})
    message = str(refused.value)
    assert "rounds=-1" in message and "per_round=0" in message and "stop='yes'" in message
    assert SearchSpec.from_config({"rounds": 3}).per_round == 2


def proposal(predicted: float, stop: bool = False) -> dict:
    return {
        "recommended": {
            "mixture": {"a": 0.5, "b": 0.5},
            "predicted": predicted,
            "interval": [predicted - 0.1, predicted + 0.1],
        },
        "model": "mixing_law",
        "models": [{"name": "mixing_law", "cv_spearman": 0.9}],
        "stop": {"stop": stop, "reason": "stop: because" if stop else "continue"},
        "proposals": [],
    }


def outcome(run_id: str, a: float) -> dict:
    return {"mlflow_run_id": run_id, "mixture": {"a": a, "b": 1 - a}, "seed": None, "dp": None}


def test_the_state_survives_a_save_and_the_trajectory_follows_the_best_so_far(
    tmp_path: Path,
) -> None:
    state = SearchState(tmp_path / "s.search.json")
    design = SearchRound(
        0, [{"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 1.0}], first_job=0, predicted=[None, None]
    )
    design.outcomes = [outcome("r0", 1.0), outcome("r1", 0.0)]
    design.accepted, design.proposal = True, proposal(2.0)
    second = SearchRound(1, [{"a": 0.5, "b": 0.5}], first_job=2, predicted=[2.5])
    second.outcomes = [outcome("r2", 0.5)]
    second.accepted, second.proposal = True, proposal(2.4, stop=True)
    state.rounds = [design, second]
    state.save()
    loaded = SearchState.load(state.path)
    assert loaded.to_json() == state.to_json() and loaded.rounds[1].finished
    observations = Observations(
        ids=("r0", "r1", "r2"),
        domains=("a", "b"),
        mixtures=np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]),
        targets=("loss",),
        scores=np.array([[3.0], [4.0], [2.0]]),
    )
    points = trajectory(loaded, observations, decimals=3)
    assert [p.best_observed for p in points] == [3.0, 2.0]
    assert points[1].predicted == [2.5] and points[1].observed == [2.0]
    assert points[1].metrics()["search.prediction_error"] == pytest.approx(0.5)
    assert points[1].stop and points[1].runs == 3
    assert all(p.exists() for p in plot_search(points, tmp_path))


def test_bad_searches_are_refused_before_anything_launches(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    base = [
        datasets_override(corpus(tmp_path_factory.getbasetemp())),
        "model=mini",
        "train=smoke",
    ]
    two_settings, _ = multirun(
        tmp_path, "two", *base, "hydra.sweeper.mix.search={rounds: 1}", "train.steps=2,4"
    )
    assert two_settings.returncode == 2 and "a search runs one setting" in two_settings.stderr
    small, _ = multirun(
        tmp_path, "small", *base, "hydra.sweeper.mix.search={rounds: 1, initial: 1}"
    )
    assert small.returncode == 2 and "initial design has 3 distinct mixtures" in small.stderr
    assert "Traceback" not in two_settings.stderr + small.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()
