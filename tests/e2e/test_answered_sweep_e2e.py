"""A re-submitted sweep is answered from the runs that already exist (real ``zephon-run -m``:
the mix sweeper, the zephon launcher, ``zephon_mini`` for 2 steps on CPU, the embedded
MLflow store): unchanged, it trains nothing and links each job to its original run; with
one mixture changed, only that job trains."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run.identity_index import INDEX_DIR
from orchestrator.tracking.mlflow_names import TAG_ANSWERED_FROM, TAG_KIND
from orchestrator.tracking.uris import resolve_uri
from sweeps.summary import SWEEP_FILE
from tests.support.sweeps import mixes_override, multirun, tiny_sweep_overrides
from tests.support.titan_run import corpus

pytestmark = pytest.mark.timeout(1500)

TWO = ((1.0, 1.0, 1.0), (0.0, 0.0, 1.0))


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("answered-sweep")


@pytest.fixture(scope="module")
def sweep_args(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """A 2-step sweep over the shared corpus, every job on dp 1, the zephon launcher."""
    built = corpus(tmp_path_factory.getbasetemp())
    return ["hydra/launcher=zephon", *tiny_sweep_overrides(built), "resources.dp=1"]


def sweep(work: Path, name: str, *args: str) -> dict[str, Any]:
    """Run the sweep ``name``; its ``sweep.json``."""
    process, sweep_dir = multirun(work, name, *args)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-5000:]
    return json.loads((sweep_dir / SWEEP_FILE).read_text())


def run_folders(work: Path) -> set[str]:
    return {p.name for p in (work / "runs").iterdir() if p.is_dir() and p.name != INDEX_DIR}


@pytest.fixture(scope="module")
def original(work: Path, sweep_args: list[str]) -> dict[str, Any]:
    domains = sorted(corpus(work.parent))
    return sweep(work, "original", *sweep_args, mixes_override(domains, *TWO))


def test_an_unchanged_sweep_trains_nothing_and_links_the_originals(
    work: Path, sweep_args: list[str], original: dict[str, Any]
) -> None:
    domains = sorted(corpus(work.parent))
    assert [j["answered_from"] for j in original["jobs"]] == [None, None]
    trained = run_folders(work)
    again = sweep(work, "again", *sweep_args, mixes_override(domains, *TWO))
    assert run_folders(work) == trained  # no run folder: nothing trained
    by_mixture = {json.dumps(j["mixture"]): j for j in original["jobs"]}
    for job in again["jobs"]:
        first = by_mixture[json.dumps(job["mixture"])]
        assert job["status"] == "succeeded" and job["answered_from"] == first["run_name"]
        assert job["mlflow_run_id"] == first["mlflow_run_id"]
        assert job["data_fingerprint"] == first["data_fingerprint"]
        assert len(RunFolder(first["folder"]).state().segments) == 1
    client = MlflowClient(tracking_uri=resolve_uri(None, work))
    parent = client.get_run(again["parent_run_id"])
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'"
    )
    links = [c for c in children if c.data.tags.get(TAG_KIND) == "answer"]
    assert sorted(c.data.tags[TAG_ANSWERED_FROM] for c in links) == sorted(
        j["mlflow_run_id"] for j in original["jobs"]
    )
    assert all(not c.data.metrics for c in links)  # a link, not a copy


def test_a_sweep_with_one_mixture_changed_trains_that_job_alone(
    work: Path, sweep_args: list[str], original: dict[str, Any]
) -> None:
    domains = sorted(corpus(work.parent))
    trained = run_folders(work)
    changed = sweep(work, "changed", *sweep_args, mixes_override(domains, TWO[0], (0, 1.0, 1.0)))
    new = run_folders(work) - trained
    answered = [j for j in changed["jobs"] if j["answered_from"]]
    fresh = [j for j in changed["jobs"] if not j["answered_from"]]
    assert len(answered) == 1 and len(fresh) == 1 and new == {fresh[0]["run_name"]}
