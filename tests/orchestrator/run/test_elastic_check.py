"""verify_elastic's pure parts (training through it is tested end to end in tests/e2e)."""

from __future__ import annotations

import pytest

from orchestrator.errors import ExperimentError
from orchestrator.experiment import ResourcesSection
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
