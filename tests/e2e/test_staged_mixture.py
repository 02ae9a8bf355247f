"""A staged mixture end to end on real TorchTitan training (``zephon_mini``, CPU, gloo):
checkpointed at dp 2 before the phase boundary and resumed at dp 1 through it, every step's
global batch digest equals an uninterrupted dp-1 run's; and the boundary falls inside the
run (a run of the first phase's mixture alone has the same first batches, other last ones).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.experiment.run_record import RunStatus
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run import api
from orchestrator.run.elastic_check import verify_elastic
from tests.support.experiments import data_only_experiment
from tests.support.titan_run import corpus

pytestmark = pytest.mark.timeout(1800)

STEPS = 8
BOUNDARY = 4
"""The first phase ends after this step's tokens."""
SPLIT = 2
"""The dp-2 run is checkpointed here, before the boundary, and resumed at dp 1."""
FIRST = {"code": 0.5, "docs": 0.0, "unicode": 0.5}
SECOND = {"code": 0.0, "docs": 1.0, "unicode": 0.0}


def experiment(domains: dict[str, list[Path]]) -> dict:
    """8 steps of 1,024 tokens (256 a lane); a small shuffle buffer and small chunks, so that
    the first steps' batches hold only what the lanes drew in the first phase."""
    config = data_only_experiment(domains, STEPS, max_procs=2)
    config["data"].update(shuffle_buffer=2, chunk_tokens=256)
    return config


def staged_experiment(domains: dict[str, list[Path]]) -> dict:
    config = experiment(domains)
    del config["data"]["mixture"]
    config["data"]["phases"] = [
        {"until_step": BOUNDARY, "mixture": FIRST},
        {"mixture": SECOND},
    ]
    return config


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    domains = corpus(tmp_path_factory.getbasetemp())
    work = tmp_path_factory.mktemp("staged-e2e")
    cwd = os.getcwd()
    os.chdir(work)
    try:
        config = staged_experiment(domains)
        elastic = verify_elastic(config, first_dp=2, second_dp=1, split_step=SPLIT)
        uninterrupted = api.run(config, dp=1, run_name="staged-dp1", tracking=False)
        first_only = experiment(domains)
        first_only["data"]["mixture"] = FIRST
        plain = api.run(first_only, dp=1, run_name="first-phase-only", tracking=False)
    finally:
        os.chdir(cwd)
    return {"elastic": elastic, "uninterrupted": uninterrupted, "plain": plain}


def test_a_resume_at_another_dp_through_the_boundary_keeps_every_digest(runs: dict) -> None:
    elastic = runs["elastic"]
    assert elastic["ok"] and elastic["matched_steps"] == STEPS, elastic
    uninterrupted = runs["uninterrupted"]
    assert uninterrupted.status == RunStatus.SUCCEEDED, uninterrupted.messages
    resumed = RunFolder(elastic["resumed_folder"]).digests()
    assert sorted(resumed) == list(range(1, STEPS + 1))
    assert resumed == RunFolder(uninterrupted.folder).digests()


def test_the_second_phase_starts_inside_the_run(runs: dict) -> None:
    staged = RunFolder(runs["uninterrupted"].folder).digests()
    plain = RunFolder(runs["plain"].folder).digests()
    assert [staged[s] for s in (1, 2)] == [plain[s] for s in (1, 2)]  # the same first phase
    after = range(BOUNDARY + 2, STEPS + 1)  # past the boundary and a shuffle buffer's smear
    assert all(staged[step] != plain[step] for step in after), (staged, plain)


def test_the_run_records_its_phases_in_the_contract(runs: dict) -> None:
    experiment = RunFolder(runs["uninterrupted"].folder).experiment()
    assert experiment.contract["compared_phase"] == 1
    assert [p["until_tokens"] for p in experiment.contract["phases"]] == [
        BOUNDARY * 8 * 128,
        None,
    ]
    assert experiment.mixture == {"code": "0.000000", "docs": "1.000000", "unicode": "0.000000"}
