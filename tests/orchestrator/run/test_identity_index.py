"""Answers from what already ran, with real tiny trainings (``zephon_mini``, 2 steps, CPU):
an experiment whose identity matches a finished run is answered from it, training nothing;
a stopped run of that identity is resumed; two identical submissions train once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.fault_matrix import killed_at
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.failpoints import Failpoint
from orchestrator.run import api
from orchestrator.run.identity_index import INDEX_DIR
from tests.support import REPO
from tests.support.experiments import data_only_experiment
from tests.support.titan_run import corpus

pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A 2-step experiment over the shared corpus, its runs in a folder of this module."""
    domains = corpus(tmp_path_factory.getbasetemp())
    runs_root = tmp_path_factory.mktemp("answered") / "runs"
    return {**data_only_experiment(domains, 2, max_procs=1), "runs_root": str(runs_root)}


@pytest.fixture(scope="module")
def first(experiment: dict[str, Any]) -> api.RunResult:
    result = api.run(experiment, dp=1, tracking=False)
    assert result.status == "succeeded", result.messages
    return result


def trained_runs(experiment: dict[str, Any]) -> set[str]:
    """The run folders under the experiment's runs root."""
    root = Path(experiment["runs_root"])
    return {p.name for p in root.glob("*") if p.is_dir() and p.name != INDEX_DIR}


def launches(folder: str) -> int:
    """How many launches a run folder's log holds."""
    return (Path(folder) / "launch.log").read_text().count("=== launch ")


def with_train(experiment: dict[str, Any], **train: Any) -> dict[str, Any]:
    return {**experiment, "train": {**experiment["train"], **train}}


def test_an_identical_run_is_answered_on_any_dp_size(
    experiment: dict[str, Any], first: api.RunResult
) -> None:
    before = trained_runs(experiment)
    on_two = {**experiment, "resources": {**experiment["resources"], "max_procs": 2}}
    answer = api.run(on_two, dp=2, run_name="another-name", tracking=False)
    assert answer.status == "succeeded"
    assert answer.answered_from == first.run_name and answer.folder == first.folder
    assert answer.data_fingerprint == first.data_fingerprint and answer.dp_sizes == [1]
    assert f"answered from {first.run_name}" in answer.messages[0]
    assert trained_runs(experiment) == before  # no folder, no training
    assert launches(first.folder) == 1
    assert RunFolder(first.folder).experiment().identity


def test_a_replicate_asked_at_the_dp_size_a_run_trained_at_is_answered_by_it(
    experiment: dict[str, Any], first: api.RunResult
) -> None:
    """``at_dp`` (a sweep's replicate_dp job) asks for a run of the identity trained at that
    size: the first run trained at dp 1 only, so it answers a replicate at dp 1."""
    before = trained_runs(experiment)
    answer = api.run(experiment, dp=1, tracking=False, at_dp=True)
    assert answer.answered_from == first.run_name and answer.dp_sizes == [1]
    assert trained_runs(experiment) == before


def more_code(experiment: dict[str, Any]) -> dict[str, Any]:
    mixture = {**experiment["data"]["mixture"], "code": 2.0}
    return {**experiment, "data": {**experiment["data"], "mixture": mixture}}


def another_lr(experiment: dict[str, Any]) -> dict[str, Any]:
    return with_train(experiment, lr=2e-3)


@pytest.mark.parametrize("change", [more_code, another_lr])
def test_another_mixture_or_learning_rate_trains(
    experiment: dict[str, Any], first: api.RunResult, change: Any
) -> None:
    result = api.run(change(experiment), dp=1, tracking=False)
    assert result.status == "succeeded", result.messages
    assert result.answered_from is None and result.run_name != first.run_name
    assert launches(result.folder) == 1


def test_a_search_proposal_equal_to_a_trained_mixture_is_answered(
    experiment: dict[str, Any],
) -> None:
    """The search proposes shares on a grid (``propose(decimals=3)``); a proposal whose
    shares equal, once normalised, the weights a run trained with is that run's mixture."""
    trained = api.run(more_code(experiment), dp=1, tracking=False)  # code 2, the others 1
    assert trained.status == "succeeded", trained.messages
    shares = {name: 0.25 for name in experiment["data"]["mixture"]} | {"code": 0.5}
    proposal = {**experiment, "data": {**experiment["data"], "mixture": shares}}
    answer = api.run(proposal, dp=1, tracking=False)
    assert answer.answered_from == (trained.answered_from or trained.run_name)
    assert launches(answer.folder) == 1


def test_fresh_trains_a_new_run(experiment: dict[str, Any], first: api.RunResult) -> None:
    result = api.run(experiment, dp=1, tracking=False, fresh=True)
    assert result.status == "succeeded", result.messages
    assert result.answered_from is None and result.run_name != first.run_name
    assert result.data_fingerprint == first.data_fingerprint  # the same training, again
    later = api.run(experiment, dp=1, tracking=False)  # a fresh run answers nobody
    assert later.answered_from == first.run_name


def zephon_run(config: Path, *args: str) -> subprocess.Popen[str]:
    """``zephon run -c config --json`` in its own process."""
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "run", "-c", str(config), "--json", *args],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_killed_run_is_resumed_not_restarted(experiment: dict[str, Any], tmp_path: Path) -> None:
    four_steps = with_train(experiment, steps=4)
    config = tmp_path / "four.json"
    config.write_text(json.dumps({**four_steps, "tracking": {"uri": f"sqlite:///{tmp_path}/m.db"}}))
    before = trained_runs(experiment)
    command = [sys.executable, "-m", "orchestrator.cli", "run", "-c", str(config), "--dp", "1"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # held once step 2's checkpoint is whole, then SIGKILLed: no clean-up, run.json says running
    killed = killed_at(command, f"{Failpoint.CHECKPOINT_SAVED}@2", cwd=tmp_path, env=env)
    assert killed.held, killed
    (name,) = trained_runs(experiment) - before
    folder = RunFolder(Path(experiment["runs_root"], name))
    assert folder.state().status == "running" and 4 not in folder.steps()
    resumed = api.run(four_steps, dp=1, tracking=False)
    assert resumed.status == "succeeded", resumed.messages
    assert resumed.answered_from == folder.name and resumed.folder == str(folder.path.absolute())
    segments = folder.state().segments
    assert len(segments) == 2 and segments[1].start_step >= 2
    assert trained_runs(experiment) == before | {folder.name}


def test_two_identical_submissions_racing_train_once(
    experiment: dict[str, Any], tmp_path: Path
) -> None:
    racing = with_train(experiment, seed=11)  # an identity of its own
    config = tmp_path / "racing.json"
    config.write_text(json.dumps({**racing, "tracking": {"uri": f"sqlite:///{tmp_path}/m.db"}}))
    before = trained_runs(experiment)
    agents = [zephon_run(config, "--dp", "1") for _ in range(2)]
    results = []
    for agent in agents:
        out, err = agent.communicate(timeout=600)
        assert agent.returncode == 0, out + err
        results.append(json.loads(out))
    trained = [r for r in results if r["answered_from"] is None]
    answered = [r for r in results if r["answered_from"] is not None]
    assert len(trained) == 1 and len(answered) == 1, results
    assert answered[0]["answered_from"] == trained[0]["run_name"]
    assert trained_runs(experiment) == before | {trained[0]["run_name"]}
