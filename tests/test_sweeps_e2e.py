"""Real Hydra multiruns of ``zephon-run``: the mix sweeper, the zephon launcher, the stock
basic launcher, hydra-submitit-launcher, real TorchTitan training (tiny llama3, CPU) and
the embedded MLflow store.

Sweeps (2 steps a run, evaluated at step 2; ~20 s a run on 2 cores):

    replicated  3 mixes x dp {1, 2}, zephon launcher (runs in parallel on the free cores)
    rerun       the same 3 mixes again, Hydra's basic launcher, dp chosen by the run
    seeds       2 mixes x data.seed=0,1: two contracts in one sweep, which the guard refuses
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from orchestrator.tracking import resolve_uri
from orchestrator.tracking_names import TAG_KIND, TAG_SWEEP, TAG_VERDICT
from sweeps.sweeper import SWEEP_FILE
from tests.titan_run import corpus

pytestmark = pytest.mark.timeout(1500)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sweeps-e2e")


@pytest.fixture(scope="module")
def domains(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return sorted(corpus(tmp_path_factory.getbasetemp()))


@pytest.fixture(scope="module")
def base_overrides(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The shared test corpus as data.datasets, and a 2-step schedule."""
    built = corpus(tmp_path_factory.getbasetemp())
    datasets = ",".join(
        f"{name}:[{','.join(repr(str(p)) for p in paths)}]" for name, paths in sorted(built.items())
    )
    return [
        f"data.datasets={{{datasets}}}",
        "data.holdout_bytes=4096",
        "train=smoke",
        "train.steps=2",
        "eval.interval=2",
    ]


def mixes(domains: list[str], *weights: tuple[float, ...]) -> str:
    """``hydra.sweeper.mix.explicit=[...]`` for the given weights (in ``domains`` order)."""
    items = [
        "{" + ",".join(f"{d}:{w:.1f}" for d, w in zip(domains, ws, strict=True)) + "}"
        for ws in weights
    ]
    return f"hydra.sweeper.mix.explicit=[{','.join(items)}]"


THREE = ((1.0, 1.0, 1.0), (0.0, 1.0, 1.0), (0.0, 0.0, 1.0))


def multirun(work: Path, name: str, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``zephon-run -m hydra/sweeper=zephon_mix ARGS`` in ``work``; (process, sweep dir)."""
    sweep_dir = work / "multirun" / name
    process = subprocess.run(
        [sys.executable, "-m", "sweeps.app", "-m", "hydra/sweeper=zephon_mix",
         f"hydra.sweep.dir={sweep_dir}", *args],
        cwd=work, capture_output=True, text=True, timeout=1200,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    return process, sweep_dir


def summary(sweep_dir: Path) -> dict[str, Any]:
    return json.loads((sweep_dir / SWEEP_FILE).read_text())


def fingerprints(result: dict[str, Any]) -> dict[str, set[str]]:
    """Canonical mixture -> the data fingerprints of its runs."""
    out: dict[str, set[str]] = {}
    for job in result["jobs"]:
        key = json.dumps(job["mixture"], sort_keys=True)
        out.setdefault(key, set()).add(job["data_fingerprint"])
    return out


@pytest.fixture(scope="module")
def replicated(work: Path, domains: list[str], base_overrides: list[str]) -> dict[str, Any]:
    process, sweep_dir = multirun(
        work, "replicated", "hydra/launcher=zephon", *base_overrides, mixes(domains, *THREE),
        "hydra.sweeper.replicate_dp=[1,2]",
    )  # fmt: skip
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-5000:]
    return {"summary": summary(sweep_dir), "stdout": process.stdout}


def test_sweep_logs_parent_children_and_the_accepted_comparison(
    work: Path, replicated: dict[str, Any]
) -> None:
    result = replicated["summary"]
    jobs = result["jobs"]
    assert len(jobs) == 6 and all(j["status"] == "succeeded" for j in jobs)
    assert sorted(j["dp_sizes"][0] for j in jobs) == [1, 1, 1, 2, 2, 2]
    assert "Comparison accepted" in replicated["stdout"]
    assert "mlflow ui --backend-store-uri sqlite:" in replicated["stdout"]

    client = MlflowClient(tracking_uri=resolve_uri(None, work))
    parent = client.get_run(result["parent_run_id"])
    assert parent.info.status == "FINISHED"
    assert parent.data.tags[TAG_KIND] == "sweep" and parent.data.tags[TAG_VERDICT] == "accepted"
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'"
    )
    assert {c.info.run_id for c in children} == {j["mlflow_run_id"] for j in jobs}
    assert all(c.data.tags[TAG_SWEEP] == result["sweep"] for c in children)
    assert all(c.info.status == "FINISHED" for c in children)

    verdict = result["comparison"]
    assert verdict["accepted"] and len(verdict["rows"]) == 3
    assert all(r["replicates"] == 2 and r["dp_sizes"] == "1,2" for r in verdict["rows"])
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"comparison.json", "comparison.md", "comparison.png"} <= artifacts
    png = Path(client.download_artifacts(parent.info.run_id, "comparison.png", str(work)))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_rerun_with_the_basic_launcher_reproduces_the_fingerprints(
    work: Path, domains: list[str], base_overrides: list[str], replicated: dict[str, Any]
) -> None:
    process, sweep_dir = multirun(work, "rerun", *base_overrides, mixes(domains, *THREE))
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-5000:]
    rerun = summary(sweep_dir)
    assert len(rerun["jobs"]) == 3 and rerun["comparison"] is not None
    first = fingerprints(replicated["summary"])
    assert all(len(prints) == 1 for prints in first.values())  # dp 1 and 2 agree
    assert fingerprints(rerun) == first
    assert len({p for prints in first.values() for p in prints}) == 3  # mixes differ


def test_a_sweep_over_two_contracts_is_refused_and_says_why(
    work: Path, domains: list[str], base_overrides: list[str]
) -> None:
    process, sweep_dir = multirun(
        work, "seeds", "hydra/launcher=zephon", *base_overrides,
        mixes(domains, (1.0, 1.0, 1.0), (0.0, 1.0, 1.0)), "data.seed=0,1",
    )  # fmt: skip
    assert process.returncode != 0
    assert "seed" in process.stderr and "contract" in process.stderr
    result = summary(sweep_dir)
    assert all(j["status"] == "succeeded" for j in result["jobs"])  # the runs are kept
    assert not result["comparison"]["accepted"]
    assert {r["code"] for r in result["comparison"]["refusals"]} == {"contract_mismatch"}
    client = MlflowClient(tracking_uri=resolve_uri(None, work))
    parent = client.get_run(result["parent_run_id"])
    assert parent.info.status == "FAILED" and parent.data.tags[TAG_VERDICT] == "refused"
    assert "comparison.md" in {a.path for a in client.list_artifacts(parent.info.run_id)}


def test_invalid_sweeps_are_refused_before_anything_launches(
    tmp_path: Path, domains: list[str], base_overrides: list[str]
) -> None:
    unknown, _ = multirun(
        tmp_path, "unknown", *base_overrides, "hydra.sweeper.mix.explicit=[{web:1.0}]"
    )
    assert unknown.returncode != 0 and "web" in unknown.stderr, unknown.stderr
    bounds, _ = multirun(
        tmp_path, "bounds", *base_overrides, "hydra.sweeper.mix.grid_resolution=0.5",
        f"hydra.sweeper.mix.min={{{domains[0]}:0.6,{domains[1]}:0.6}}",
    )  # fmt: skip
    assert bounds.returncode != 0 and "no valid mix" in bounds.stderr, bounds.stderr
    dp, _ = multirun(
        tmp_path, "dp", *base_overrides, "hydra.sweeper.mix.grid_resolution=0.5",
        "hydra.sweeper.replicate_dp=[1,3]",
    )  # fmt: skip
    assert dp.returncode != 0 and "dp=3 does not divide data.lanes=4" in dp.stderr, dp.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()


def test_hydra_submitit_launcher_runs_the_jobs(
    tmp_path: Path, domains: list[str], base_overrides: list[str]
) -> None:
    """Slurm's launcher in its local mode (jobs pickled to submitit subprocesses); dry runs."""
    process, sweep_dir = multirun(
        tmp_path, "submitit", "hydra/launcher=submitit_local", "dry_run=true", *base_overrides,
        mixes(domains, *THREE),
    )  # fmt: skip
    assert process.returncode == 0, process.stderr[-5000:]
    jobs = summary(sweep_dir)["jobs"]
    assert [j["status"] for j in jobs] == ["succeeded"] * 3
    assert len({j["variant"] for j in jobs}) == 3
    assert list(sweep_dir.glob(".submitit/*/*_result.pkl"))
