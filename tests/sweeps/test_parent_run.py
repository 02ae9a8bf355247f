"""A sweep's parent run: the comparison step, one comparison per combination of the other
sweeps, never one table mixing them (a sweep that also crosses e.g. ``train.steps``), with
the seed replicates of a combination compared together, and a model ladder's sizes lined
up; the run's end. Real sweeps are in tests/e2e."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from orchestrator.guard import DecisionPolicy
from orchestrator.tracking.mlflow_names import TAG_NOTE, TAG_VERDICT
from orchestrator.tracking.mlflow_status import MlflowStatus
from orchestrator.tracking.tracker import Tracker
from sweeps import parent_run
from sweeps.parent_run import ParentRun, ladders
from tests.orchestrator.guard.test_ladder import X, Y, comparison


def outcome(run_id: str, other: list[str], seed: int | None = None) -> dict[str, Any]:
    return {"mlflow_run_id": run_id, "other": other, "seed": seed}


@pytest.fixture
def parent(tmp_path: Path) -> ParentRun:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = Tracker(uri, "sweeps").new_run("sweep-x", kind="sweep")
    return ParentRun(uri, "sweeps", run_id)


def test_each_combination_is_compared_on_its_own(
    parent: ParentRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []

    def compare(run_ids: list[str], **kwargs: Any) -> dict[str, Any]:
        calls.append({"run_ids": run_ids, **kwargs})
        accepted = run_ids[0] != "r40-a"  # the 40-step comparison is refused
        return {
            "accepted": accepted,
            "refusals": [] if accepted else [{"code": "x"}],
            "markdown": f"table of {','.join(run_ids)}\n",
        }

    monkeypatch.setattr(parent_run, "compare_tracked", compare)
    outcomes = [
        outcome("r20-a", ["train.steps=20"]),
        outcome("r20-b", ["train.steps=20"]),
        outcome("r40-a", ["train.steps=40"]),
        outcome("r40-b", ["train.steps=40"]),
    ]
    verdict = parent.compare(outcomes, tmp_path / "sweep")
    assert verdict is not None
    assert [c["run_ids"] for c in calls] == [["r20-a", "r20-b"], ["r40-a", "r40-b"]]
    assert all(c["parent_run_id"] == parent.run_id and "into_run_id" not in c for c in calls)
    assert not verdict["accepted"] and verdict["refusals"] == [{"code": "x"}]
    assert set(verdict["comparisons"]) == {"train.steps=20", "train.steps=40"}
    assert "### train.steps=20: compared on its own" in verdict["markdown"]
    assert "table of r40-a,r40-b" in verdict["markdown"]
    tags = MlflowClient(parent.uri).get_run(parent.run_id).data.tags
    assert tags[TAG_VERDICT] == "refused" and tags[TAG_NOTE] == verdict["markdown"]


def test_one_combination_is_compared_into_the_parent_run_with_its_seeds(
    parent: ParentRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(
        parent_run,
        "compare_tracked",
        lambda run_ids, **kw: calls.append({"run_ids": run_ids, **kw}) or {},
    )
    outcomes = [outcome(f"{mix}-{seed}", [], seed) for mix in "ab" for seed in (0, 1)]
    parent.compare(outcomes, tmp_path / "sweep")
    (call,) = calls  # the seeds' recipes differ (the init seed), yet they are one comparison
    assert call["run_ids"] == ["a-0", "a-1", "b-0", "b-1"]
    assert call["into_run_id"] == parent.run_id
    assert call["policy"].decide_on is None  # the mean over every domain


def test_a_sweep_decides_on_what_it_names(
    parent: ParentRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``hydra.sweeper.decide_on`` (``--curation``: the fixed eval set) reaches the guard,
    for one combination and for each of several."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(parent_run, "compare_tracked", lambda run_ids, **kw: calls.append(kw) or {})
    one = [outcome(f"{mix}-{seed}", [], seed) for mix in "ab" for seed in (0, 1)]
    policy = DecisionPolicy(decide_on=["docs_eval"])
    parent.compare(one, tmp_path / "one", policy=policy)
    several = [outcome(f"r{n}", [f"train.steps={n}"]) for n in (20, 40)]
    parent.compare(several, tmp_path / "several", policy=policy)
    assert [c["policy"] for c in calls] == [policy] * 3


def test_verdicts_are_lined_up_per_setting_in_the_ladder_s_order() -> None:
    def verdict() -> dict:
        return comparison({X: 3.0, Y: 3.5}, {(X, Y): "a_better"})

    verdicts = {
        "train.steps=10 model=tiny": verdict(),
        "train.steps=10 model=mini": verdict(),
        "train.steps=20 model=mini": verdict(),
        "train.steps=20 model=tiny": verdict(),
    }
    found = ladders(verdicts, ["mini", "tiny"])
    assert sorted(found) == ["train.steps=10", "train.steps=20"]
    assert all(result["sizes"] == ["mini", "tiny"] for result in found.values())
    assert all(result["agreeing"] == 1 for result in found.values())
    assert ladders(verdicts, ["mini"]) == {}


def test_the_parent_run_ends_as_the_sweep_did(parent: ParentRun) -> None:
    parent.finish(MlflowStatus.KILLED)
    assert MlflowClient(parent.uri).get_run(parent.run_id).info.status == MlflowStatus.KILLED
    ParentRun(uri="", experiment="sweeps", run_id=None).finish(MlflowStatus.FAILED)  # untracked
