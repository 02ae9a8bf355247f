"""Zephon on a real Slurm cluster: Debian's slurm-wlm with two nodes on this machine
(:class:`tests.support.slurm.LocalSlurm`), real TorchTitan training (``zephon_mini``, CPU,
gloo), the embedded MLflow store. The cluster has no accounting, so ``sacct`` fails and
job states come from ``squeue`` (:mod:`orchestrator.run.slurm`).

    local-dp1     the reference: the experiment on 1 local process, 6 steps
    slurm-2nodes  the same on Slurm, dp 2 = 2 nodes x 1 task: the same digests
    cancelled     on Slurm, ``scancel`` after the step-2 checkpoint, ``zephon resume``: the
                  same digests, in two Slurm jobs
    requeued      on Slurm, dp 2 = 1 node x 2 tasks, ``scontrol requeue`` after the step-2
                  checkpoint (preemption with requeue): the job runs again, resumes, the
                  same digests
    sweep         two mixes through ``hydra/launcher=submitit_slurm``, each job on the cores
                  Slurm gave it; Slurm cancels one, the sweep fails with the command that
                  continues it, and continued it ends with an accepted comparison
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run import api
from orchestrator.run.trainer_command import launch_command
from tests.support.experiments import data_only_experiment
from tests.support.slurm import LocalSlurm
from tests.support.sweeps import (
    datasets_override,
    mixes_override,
    multirun,
    multirun_command,
    tokenizer_override,
)

pytestmark = pytest.mark.timeout(1200)

STEPS = 6
ZEPHON = [sys.executable, "-m", "orchestrator.cli"]
SLURM_JOB = {"timeout_min": 20}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The working directory of the module's runs (``./runs``, ``./mlflow.db``)."""
    path = tmp_path_factory.mktemp("slurm-e2e")
    cwd = os.getcwd()
    os.chdir(path)
    try:
        yield path
    finally:
        os.chdir(cwd)


def on_slurm(domains: dict[str, list[Path]]) -> dict[str, Any]:
    return data_only_experiment(domains, STEPS, launcher="slurm", slurm=SLURM_JOB)


@pytest.fixture(scope="module")
def reference(work: Path, domains: dict[str, list[Path]]) -> dict[int, str]:
    """Digests of the experiment trained on one local process."""
    result = api.run(
        data_only_experiment(domains, STEPS, max_procs=1), dp=1, run_name="local-dp1", fresh=True
    )
    assert result.status == "succeeded", result.messages
    digests = RunFolder(result.folder).digests()
    assert sorted(digests) == list(range(1, STEPS + 1))
    return digests


def job_field(cluster: LocalSlurm, job_id: str, field: str) -> str:
    """One field of ``scontrol show job`` (the controller keeps ended jobs for a while)."""
    for word in cluster.run("scontrol", "show", "job", "--oneliner", job_id).split():
        if word.startswith(f"{field}="):
            return word.removeprefix(f"{field}=")
    raise AssertionError(f"job {job_id} has no {field}")


def trainers_of(folder: Path) -> list[str]:
    """Command lines of live processes that name ``folder``."""
    lines = []
    for process in psutil.process_iter(["cmdline"]):
        line = " ".join(process.info["cmdline"] or [])
        if str(folder) in line:
            lines.append(line)
    return lines


@pytest.fixture
def agents() -> Iterator[list[subprocess.Popen[str]]]:
    """``zephon`` processes a test starts; any still running after it (a failed test) is
    stopped the way a user would, with SIGINT (it cancels its Slurm job)."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for agent in started:
        if agent.poll() is None:
            agent.send_signal(signal.SIGINT)
            try:
                agent.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.communicate()


def test_two_node_job_meets_at_the_first_nodes_address(
    cluster: LocalSlurm, work: Path, domains: dict[str, list[Path]], reference: dict[int, str]
) -> None:
    """dp 2 as 2 nodes x 1 task: ranks on two slurmd nodes meet at n1's NodeAddr."""
    result = api.run(
        data_only_experiment(domains, STEPS, launcher="slurm", slurm=SLURM_JOB, nodes=2),
        dp=2,
        run_name="slurm-2nodes",
        fresh=True,  # the reference's experiment, on Slurm: trained again, not answered
    )

    assert result.status == "succeeded", result.messages
    assert RunFolder(result.folder).digests() == reference
    job_id = RunFolder(result.folder).state().slurm_job_id
    assert job_field(cluster, job_id, "NumNodes") == "2"
    assert job_field(cluster, job_id, "NodeList") == "n[1-2]"


def running_on_slurm(
    work: Path, domains: dict[str, list[Path]], name: str, agents: list[subprocess.Popen[str]]
) -> tuple[RunFolder, subprocess.Popen[str]]:
    """``zephon run --dp 2 --name NAME --json`` on Slurm, returned once step 3 has data (the
    step-2 checkpoint exists)."""
    spec = work / f"{name}.json"
    spec.write_text(json.dumps(on_slurm(domains)))
    folder = RunFolder(work / "runs" / name)
    agent = subprocess.Popen(
        [*ZEPHON, "run", "-c", str(spec), "--dp", "2", "--name", name, "--fresh", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    agents.append(agent)
    deadline = time.monotonic() + 600
    while 3 not in folder.steps() and agent.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert agent.poll() is None, f"{name} ended before step 3: {agent.communicate()}"
    return folder, agent


def test_job_cancelled_by_slurm_resumes_with_the_same_batches(
    cluster: LocalSlurm,
    work: Path,
    domains: dict[str, list[Path]],
    reference: dict[int, str],
    agents: list[subprocess.Popen[str]],
) -> None:
    folder, agent = running_on_slurm(work, domains, "cancelled", agents)
    first_job = folder.state().slurm_job_id
    cluster.run("scancel", first_job)
    out, err = agent.communicate(timeout=300)

    assert agent.returncode == 130, f"exit {agent.returncode}\n{out}\n{err}"
    interrupted = json.loads(out)
    assert interrupted["status"] == "interrupted"
    messages = interrupted["messages"]
    assert any(f"zephon resume {folder.path}" in m for m in messages), messages
    assert f"Slurm job {first_job} ended CANCELLED" in folder.log_tail(200)
    assert folder.last_checkpoint_step() is not None and len(folder.steps()) < STEPS
    end = time.monotonic() + 60
    while trainers_of(folder.path) and time.monotonic() < end:  # Slurm kills asynchronously
        time.sleep(0.5)
    assert not trainers_of(folder.path)

    resumed = subprocess.run(
        [*ZEPHON, "resume", str(folder.path), "--json"], capture_output=True, text=True
    )

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert json.loads(resumed.stdout)["dp_sizes"] == [2, 2]
    assert folder.digests() == reference
    second_job = folder.state().slurm_job_id
    assert second_job != first_job and job_field(cluster, second_job, "JobState") == "COMPLETED"


def test_two_task_job_requeued_by_slurm_continues_with_the_same_batches(
    cluster: LocalSlurm,
    work: Path,
    domains: dict[str, list[Path]],
    reference: dict[int, str],
    agents: list[subprocess.Popen[str]],
) -> None:
    """dp 2 as 1 node x 2 tasks, preempted with requeue as ``scontrol requeue`` does it: the
    job's attempt is killed and the job runs again; ``zephon run`` waits through it, and the
    second attempt resumes from the last checkpoint, to the local run's batches."""
    planned = api.plan(on_slurm(domains), dp=2)
    assert planned.dp == 2
    assert launch_command(planned)[1:3] == ["-m", "orchestrator.titan.train"]
    folder, agent = running_on_slurm(work, domains, "requeued", agents)
    job_id = folder.state().slurm_job_id
    cluster.run("scontrol", "requeue", job_id)
    end = time.monotonic() + 60
    while job_field(cluster, job_id, "JobState") != "PENDING" and time.monotonic() < end:
        time.sleep(0.2)
    # Slurm holds a requeued job back for a while (Reason=BeginTime); not what is tested here
    cluster.run("scontrol", "update", f"JobId={job_id}", "StartTime=now")
    out, err = agent.communicate(timeout=600)

    assert agent.returncode == 0, f"exit {agent.returncode}\n{out}\n{err}"
    assert json.loads(out)["dp_sizes"] == [2]
    assert folder.digests() == reference
    assert {r["dp_size"] for r in folder.steps().values()} == {2}
    assert job_field(cluster, job_id, "Restarts") == "1"
    assert job_field(cluster, job_id, "JobState") == "COMPLETED"
    assert job_field(cluster, job_id, "NumTasks") == "2"
    assert job_field(cluster, job_id, "NumNodes") == "1"


def test_sweep_through_submitit_slurm_survives_a_cancelled_job_and_ends_accepted(
    cluster: LocalSlurm,
    tmp_path: Path,
    domains: dict[str, list[Path]],
    agents: list[subprocess.Popen[str]],
) -> None:
    """Two mixes through hydra-submitit-launcher, each a Slurm job training on dp 2, its
    ``cpus_per_task``; Slurm cancels one after its step-2 checkpoint. The sweep fails at once
    (no wait for ever without accounting) with the command that continues it; continued, the
    cancelled job resumes, and the sweep ends with an accepted comparison."""
    arguments = [
        "hydra/launcher=submitit_slurm",
        "hydra.launcher.timeout_min=20",
        "hydra.launcher.cpus_per_task=2",
        datasets_override(domains),
        tokenizer_override(domains),
        "model=mini",
        "data.holdout_bytes=4096",
        "train=smoke",
        "train.steps=6",
        "train.checkpoint_interval=2",
        "eval.interval=6",
        mixes_override(sorted(domains), (1.0, 1.0, 1.0), (0.0, 0.0, 1.0)),
    ]
    command, sweep_dir = multirun_command(tmp_path, "slurm", *arguments)
    sweep = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    agents.append(sweep)
    deadline = time.monotonic() + 600
    started: list[RunFolder] = []
    while not started and sweep.poll() is None and time.monotonic() < deadline:
        started = [f for f in map(RunFolder, tmp_path.glob("runs/*")) if 3 in f.steps()]
        time.sleep(0.2)
    assert started, f"no job reached step 3: {sweep.poll()}"
    folder = started[0]
    array = cluster.run("squeue", "--noheader", "--format=%i").split()[0].split("_")[0]
    cancelled = f"{array}_{int(folder.name.rsplit('-', 1)[1])}"  # array index = job number
    cluster.run("scancel", cancelled)
    _, err = sweep.communicate(timeout=600)

    assert sweep.returncode == 1 and "the launcher failed" in err, err[-3000:]
    assert "(state: CANCELLED)" in err
    assert folder.state().status == "interrupted"
    name = re.search(r"hydra\.sweeper\.resume=(sweep-[0-9a-f-]+)", err).group(1)

    resumed, _ = multirun(tmp_path, "slurm", *arguments, f"hydra.sweeper.resume={name}")

    assert resumed.returncode == 0, resumed.stderr[-5000:]
    assert "Comparison accepted" in resumed.stdout
    result = json.loads((sweep_dir / "sweep.json").read_text())
    assert result["comparison"]["accepted"]
    jobs = {Path(j["folder"]).name: j for j in result["jobs"]}
    assert [j["status"] for j in jobs.values()] == ["succeeded", "succeeded"]
    assert jobs.pop(folder.name)["dp_sizes"] == [2, 2]  # dp 2 of cpus_per_task=2, twice
    assert [j["dp_sizes"] for j in jobs.values()] == [[2]]
    assert job_field(cluster, cancelled, "JobState") == "CANCELLED"
    logged = {p.parent.name for p in sweep_dir.glob(".submitit/*/*_log.out")}
    continued = logged - {f"{array}_0", f"{array}_1"}
    assert len(continued) == 2
    assert all(job_field(cluster, j, "JobState") == "COMPLETED" for j in continued)
