"""The run API's pure parts (training through it is tested end to end in tests/e2e)."""

from __future__ import annotations

import pytest

from orchestrator.errors import ExperimentError
from orchestrator.experiment import ResourcesSection, load_experiment
from orchestrator.run import api
from orchestrator.run.elastic_check import side_by_side_halves, verify_elastic


def test_verify_elastic_trains_its_two_first_runs_side_by_side_only_where_both_fit() -> None:
    halves = side_by_side_halves(ResourcesSection(device="cpu", max_procs=4), 2)
    assert halves is not None and [h.max_procs for h in halves] == [2, 2]
    assert side_by_side_halves(ResourcesSection(device="cpu", max_procs=3), 2) is None
    assert side_by_side_halves(ResourcesSection(device="cpu", max_procs=2, nodes=2), 1) is None
    assert side_by_side_halves(ResourcesSection(device="cpu", launcher="slurm"), 1) is None


@pytest.mark.parametrize("split", [-1, 0, 4, 9])
def test_verify_elastic_refuses_a_split_outside_the_schedule(split: int) -> None:
    config = {"data": {"datasets": {"a": ["/nonexistent/*.jsonl"]}}, "train": {"steps": 4}}
    with pytest.raises(ExperimentError, match=r"split_step must be in \[1, 4\)"):
        verify_elastic(config, first_dp=1, second_dp=2, split_step=split)


def test_the_nodes_of_a_multinode_run_derive_one_name() -> None:
    base = {
        "data": {"datasets": {"a": ["a.jsonl"]}},
        "resources": {"launcher": "multinode", "nodes": 2, "dp": 2, "rdzv_endpoint": "h:1"},
    }
    variant = "v" * 64

    def name(*overrides: str) -> str:
        return api._default_run_name(load_experiment(base, list(overrides)), variant)

    node0 = name("resources.node_rank=0", "resources.max_procs=1")
    assert node0 == name("resources.node_rank=1", "resources.max_procs=4")  # its own cores
    assert node0 != name("resources.node_rank=1", "resources.rdzv_endpoint=h:2")
    assert node0 != name("resources.node_rank=1", "train.steps=7")
    one_machine = "resources.launcher=local"
    assert name(one_machine) != name(one_machine)  # a new name every time
