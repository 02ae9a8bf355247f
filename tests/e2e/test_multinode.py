"""A two-node run through Zephon's own ``multinode`` launcher: two ``zephon run`` processes on
this machine (loopback c10d rendezvous, one process per node, real TorchTitan training of
``zephon_mini`` on CPU), each told only its node rank.

    local-dp1   the reference: the experiment on 1 local process, 6 steps
    two nodes   the same experiment, 4 steps, nodes 0 and 1: both derive the same run
                name (no ``--name``), node 0 keeps the records; the digests equal the
                reference's
    one node    the two-node run extended to 6 steps and resumed on one node, dp 1: the
                digests still equal the reference's
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run import api
from orchestrator.run.launch import free_port
from tests.support import REPO
from tests.support.experiments import data_only_experiment

pytestmark = pytest.mark.timeout(900)

STEPS = 6


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("multinode-e2e")


def zephon(work: Path, *args: str) -> subprocess.Popen[str]:
    """The ``zephon`` CLI, started in ``work`` (its runs and MLflow store)."""
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", *args, "--json"],
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def finished(agent: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = agent.communicate(timeout=600)
    assert agent.returncode == 0, f"exit {agent.returncode}\n{out}\n{err[-3000:]}"
    return json.loads(out)


def test_two_nodes_train_the_batches_of_one_and_resume_on_one(
    work: Path, domains: dict[str, list[Path]]
) -> None:
    cwd = os.getcwd()
    os.chdir(work)
    try:
        reference = api.run(
            data_only_experiment(domains, STEPS, max_procs=1), dp=1, run_name="local-dp1"
        )
    finally:
        os.chdir(cwd)
    assert reference.status == "succeeded", reference.messages
    want = RunFolder(reference.folder).digests()

    spec = work / "two-nodes.json"
    endpoint = f"127.0.0.1:{free_port()}"
    spec.write_text(
        json.dumps(
            data_only_experiment(
                domains, 4, max_procs=1, launcher="multinode", nodes=2, dp=2, rdzv_endpoint=endpoint
            )
        )
    )
    nodes = [
        zephon(work, "run", "-c", str(spec), "--fresh", f"resources.node_rank={k}") for k in (0, 1)
    ]
    leader, follower = (finished(node) for node in nodes)

    assert leader["run_name"] == follower["run_name"]  # one rendezvous id, one run folder
    assert leader["status"] == follower["status"] == "succeeded"
    assert leader["mlflow_run_id"] and follower["mlflow_run_id"] is None
    assert any("node 0 keeps this run's records" in m for m in follower["messages"])
    folder = RunFolder(leader["folder"])
    assert folder.digests() == {s: want[s] for s in range(1, 5)}
    assert {r["dp_size"] for r in folder.steps().values()} == {2}
    assert (folder.path / "launch-node1.log").exists()

    resumed = finished(
        zephon(
            work,
            "resume",
            str(folder.path),
            "--steps",
            str(STEPS),
            "--dp",
            "1",
            "resources.launcher=local",
            "resources.nodes=1",
        )
    )

    assert resumed["status"] == "succeeded" and resumed["dp_sizes"] == [2, 1]
    assert folder.digests() == want
    assert resumed["mlflow_run_id"] == leader["mlflow_run_id"]
