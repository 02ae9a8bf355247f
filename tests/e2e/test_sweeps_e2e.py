"""Real Hydra multiruns of ``zephon-run``: the mix sweeper, the zephon launcher, the stock
basic launcher, hydra-submitit-launcher, real TorchTitan training (``zephon_mini``, a
6.6 M-parameter llama3, CPU) and the embedded MLflow store.

Sweeps (2 steps a run, evaluated at step 2; ~20 s a run on 2 cores):

    replicated   2 mixes x dp {1, 2}, zephon launcher (runs in parallel on the free cores)
    rerun        the same 2 mixes again, Hydra's basic launcher, dp chosen by the run
    seeds        1 mix x data.seed=0,1: two contracts in one sweep, which the guard refuses
    interrupted  the 2 mixes at dp 1, SIGINT after step 1, then continued
    submitit     3 mixes through hydra-submitit-launcher's local mode, dry runs
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from mlflow import MlflowClient

from orchestrator.experiment.runfolder import RunFolder
from orchestrator.tracking.names import TAG_KIND, TAG_SWEEP, TAG_VERDICT
from orchestrator.tracking.tracker import resolve_uri
from sweeps.sweeper import SWEEP_FILE
from tests.support import REPO
from tests.support.sweeps import datasets_override, mixes_override, multirun
from tests.support.titan_run import corpus

pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sweeps-e2e")


@pytest.fixture(scope="module")
def domains(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return sorted(corpus(tmp_path_factory.getbasetemp()))


@pytest.fixture(scope="module")
def base_overrides(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The shared test corpus as data.datasets, and a 2-step schedule."""
    return [
        datasets_override(corpus(tmp_path_factory.getbasetemp())),
        "model=mini",
        "data.holdout_bytes=4096",
        "train=smoke",
        "train.steps=2",
        "eval.interval=2",
    ]


TWO = ((1.0, 1.0, 1.0), (0.0, 0.0, 1.0))


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
        work,
        "replicated",
        "hydra/launcher=zephon",
        *base_overrides,
        mixes_override(domains, *TWO),
        "hydra.sweeper.replicate_dp=[1,2]",
    )
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-5000:]
    return {"summary": summary(sweep_dir), "stdout": process.stdout}


def test_sweep_logs_parent_children_and_the_accepted_comparison(
    work: Path, replicated: dict[str, Any]
) -> None:
    result = replicated["summary"]
    jobs = result["jobs"]
    assert len(jobs) == 4 and all(j["status"] == "succeeded" for j in jobs)
    assert sorted(j["dp_sizes"][0] for j in jobs) == [1, 1, 2, 2]
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
    assert verdict["accepted"] and len(verdict["rows"]) == 2
    assert all(r["replicates"] == 2 and r["dp_sizes"] == "1,2" for r in verdict["rows"])
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"comparison.json", "comparison.md", "comparison.png"} <= artifacts
    png = Path(client.download_artifacts(parent.info.run_id, "comparison.png", str(work)))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_rerun_with_the_basic_launcher_reproduces_the_fingerprints(
    work: Path, domains: list[str], base_overrides: list[str], replicated: dict[str, Any]
) -> None:
    process, sweep_dir = multirun(work, "rerun", *base_overrides, mixes_override(domains, *TWO))
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-5000:]
    rerun = summary(sweep_dir)
    assert len(rerun["jobs"]) == 2 and rerun["comparison"] is not None
    first = fingerprints(replicated["summary"])
    assert all(len(prints) == 1 for prints in first.values())  # dp 1 and 2 agree
    assert fingerprints(rerun) == first
    assert len({p for prints in first.values() for p in prints}) == 2  # mixes differ


def test_a_sweep_over_two_contracts_is_refused_and_says_why(
    work: Path, domains: list[str], base_overrides: list[str]
) -> None:
    process, sweep_dir = multirun(
        work,
        "seeds",
        "hydra/launcher=zephon",
        *base_overrides,
        mixes_override(domains, TWO[0]),
        "data.seed=0,1",
        "resources.dp=1",  # both jobs at once
    )
    assert process.returncode != 0
    assert "seed" in process.stderr and "contract" in process.stderr
    result = summary(sweep_dir)
    assert len(result["jobs"]) == 2
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
        tmp_path,
        "bounds",
        *base_overrides,
        "hydra.sweeper.mix.grid_resolution=0.5",
        f"hydra.sweeper.mix.min={{{domains[0]}:0.6,{domains[1]}:0.6}}",
    )
    assert bounds.returncode != 0 and "no valid mix" in bounds.stderr, bounds.stderr
    dp, _ = multirun(
        tmp_path,
        "dp",
        *base_overrides,
        "hydra.sweeper.mix.grid_resolution=0.5",
        "hydra.sweeper.replicate_dp=[1,3]",
    )
    assert dp.returncode != 0 and "dp=3 does not divide data.lanes=4" in dp.stderr, dp.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()


def test_hydra_submitit_launcher_runs_the_jobs(
    tmp_path: Path, domains: list[str], base_overrides: list[str]
) -> None:
    """Slurm's launcher in its local mode (jobs pickled to submitit subprocesses); dry runs."""
    process, sweep_dir = multirun(
        tmp_path,
        "submitit",
        "hydra/launcher=submitit_local",
        "dry_run=true",
        *base_overrides,
        mixes_override(domains, *TWO, (0.0, 1.0, 1.0)),
    )
    assert process.returncode == 0, process.stderr[-5000:]
    jobs = summary(sweep_dir)["jobs"]
    assert [j["status"] for j in jobs] == ["succeeded"] * 3
    assert len({j["variant"] for j in jobs}) == 3
    assert list(sweep_dir.glob(".submitit/*/*_result.pkl"))


def processes_naming(text: str) -> list[str]:
    """Command lines of live processes that contain ``text``."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        line = " ".join(process.info["cmdline"] or [])
        if text in line:
            found.append(line)
    return found


def test_an_interrupted_sweep_stops_everything_and_continues_to_the_same_data(
    work: Path, domains: list[str], base_overrides: list[str], replicated: dict[str, Any]
) -> None:
    """SIGINT after the first step of a two-job sweep (zephon launcher, both jobs at once):
    nothing left running, runs interrupted and KILLED, exit 130, no traceback; the printed
    command continues the sweep to the data of the uninterrupted one, one MLflow run a job."""
    sweep_dir = work / "multirun" / "interrupted"
    before = set((work / "runs").iterdir())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    sweep = [sys.executable, "-m", "sweeps.app", "-m", "hydra/sweeper=zephon_mix"]
    sweep += [f"hydra.sweep.dir={sweep_dir}", "hydra/launcher=zephon", *base_overrides]
    sweep += [mixes_override(domains, *TWO), "hydra.sweeper.replicate_dp=[1]"]
    agent = subprocess.Popen(
        sweep, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    deadline = time.monotonic() + 600
    started: list[RunFolder] = []
    while not started and agent.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
        new = [RunFolder(p) for p in set((work / "runs").iterdir()) - before]
        started = [f for f in new if f.exists() and 1 in f.steps()]
    assert agent.poll() is None, f"the sweep ended before step 1 was seen:\n{agent.stderr}"
    agent.send_signal(signal.SIGINT)
    out, err = agent.communicate(timeout=120)
    assert agent.returncode == 130, f"exit {agent.returncode}\n{out[-3000:]}\n{err[-3000:]}"
    assert "Traceback" not in err + out
    name = started[0].name.rsplit("-", 1)[0]
    folders = [RunFolder(p) for p in sorted((work / "runs").glob(f"{name}-*"))]
    assert not processes_naming(str(work / "runs" / name))
    statuses = {f.name: f.state()["status"] for f in folders}
    assert statuses[started[0].name] == "interrupted"
    assert set(statuses.values()) <= {"interrupted", "succeeded"}
    for folder in folders:
        if statuses[folder.name] == "interrupted":
            assert f"{folder.name}: interrupted at step" in err
            assert f"resume {folder.path.absolute()}" in err
    continue_line = next(line for line in err.splitlines() if "continue the sweep with: " in line)
    command = shlex.split(continue_line.split("continue the sweep with: ", 1)[1])

    client = MlflowClient(tracking_uri=resolve_uri(None, work))
    experiment = client.get_experiment_by_name("zephon")
    parents = client.search_runs(
        [experiment.experiment_id], f"tags.{TAG_KIND} = 'sweep' and tags.`{TAG_SWEEP}` = '{name}'"
    )
    assert len(parents) == 1 and parents[0].info.status == "KILLED"
    killed = {f.state()["mlflow_run_id"] for f in folders if statuses[f.name] == "interrupted"}
    assert {client.get_run(i).info.status for i in killed} == {"KILLED"}

    resumed = subprocess.run(
        command, cwd=work, capture_output=True, text=True, timeout=1200, env=env
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-5000:]
    result = summary(sweep_dir)
    assert result["sweep"] == name and result["parent_run_id"] == parents[0].info.run_id
    reference = fingerprints(replicated["summary"])
    assert fingerprints(result) == {k: v for k, v in reference.items() if k in fingerprints(result)}
    assert len(fingerprints(result)) == 2
    children = client.search_runs(
        [experiment.experiment_id], f"tags.`{TAG_SWEEP}` = '{name}' and tags.{TAG_KIND} = 'run'"
    )
    assert sorted(c.info.run_id for c in children) == sorted(
        j["mlflow_run_id"] for j in result["jobs"]
    )
    assert {c.info.status for c in children} == {"FINISHED"}
    assert client.get_run(parents[0].info.run_id).info.status == "FINISHED"
