"""Slurm without a cluster: the allocation a run asks for, and job states read from squeue.
The real cluster is in tests/e2e/test_slurm.py."""

from __future__ import annotations

import pytest

from orchestrator.errors import ExperimentError
from orchestrator.experiment import load_experiment
from orchestrator.run import slurm


def on_slurm(*overrides: str) -> object:
    return load_experiment(
        {"data": {"datasets": {"a": ["a.jsonl"]}, "lanes": 8}, "resources": {"launcher": "slurm"}},
        list(overrides),
    )


@pytest.mark.parametrize(
    ("overrides", "dp", "nodes", "tasks", "kind"),
    [
        (["resources.dp=4"], None, 1, 4, "cpu"),
        (["resources.dp=4", "resources.nodes=2"], None, 2, 2, "cpu"),
        (["resources.slurm.tasks_per_node=2", "resources.nodes=2"], None, 2, 2, "cpu"),
        (["resources.dp=8"], 2, 1, 2, "cpu"),  # asked for (a resume): wins
        (["resources.slurm.tasks_per_node=2"], 1, 1, 1, "cpu"),  # over tasks_per_node too
        (["resources.dp=2", "resources.slurm.gpus_per_node=2"], None, 1, 2, "cuda"),
        (["resources.dp=2", "resources.device=cuda"], None, 1, 2, "cuda"),
    ],
)
def test_the_allocation_decides_dp(
    overrides: list[str], dp: int | None, nodes: int, tasks: int, kind: str
) -> None:
    got = slurm.allocation(on_slurm(*overrides), dp)
    assert (got.nodes, got.tasks_per_node, got.kind) == (nodes, tasks, kind)
    assert got.dp == nodes * tasks


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], "needs resources.dp (or resources.slurm.tasks_per_node)"),
        (["resources.dp=3", "resources.nodes=2"], "dp=3 does not split into resources.nodes=2"),
        (["resources.dp=3"], "dp=3 does not divide data.lanes=8"),
        (["resources.dp=2", "resources.slurm.nodes=4"], "Zephon sets the job's nodes and tasks"),
    ],
)
def test_an_allocation_that_cannot_work_is_refused_before_submission(
    overrides: list[str], message: str
) -> None:
    with pytest.raises(ExperimentError) as refused:
        slurm.allocation(on_slurm(*overrides))
    assert any(message in p for p in refused.value.problems), refused.value.problems


def test_squeue_is_read_as_sacct_without_accounting() -> None:
    watcher = slurm.SqueueWatcher()
    watcher._accounting = False
    watcher.register_job("7")
    assert watcher._make_command() == [
        "squeue",
        "--states=all",
        "--jobs=7",
        "--format=%i|%T|%N",
    ]
    info = watcher.read_info("JOBID|STATE|NODELIST\n7|CANCELLED|n1\n8_1|RUNNING|n[1-2]\n")
    assert info["7"]["State"] == "CANCELLED" and info["8_1"]["NodeList"] == "n[1-2]"
