"""The mix sweeper (sweeps.sweeper): what it refuses before any job launches."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.guard import DecisionPolicy
from orchestrator.guard.decisions import Design, Family
from sweeps.sweeper import MixSweeper
from tests.support.sweeps import datasets_override, multirun
from tests.support.titan_run import corpus


def test_a_decide_on_no_run_would_score_is_refused_before_anything_launches(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``hydra.sweeper.decide_on`` naming a domain the runs do not score would fail only at
    the comparison, after every run trained: it is exit 2 at the plan, naming it."""
    base = [
        datasets_override(corpus(tmp_path_factory.getbasetemp())),
        "model=mini",
        "train=smoke",
        "hydra.sweeper.mix.grid_resolution=0.5",
    ]
    typo, _ = multirun(tmp_path, "typo", *base, "hydra.sweeper.decide_on=[docs_evl]")
    assert typo.returncode == 2, typo.stderr[-3000:]
    assert "docs_evl" in typo.stderr and "hydra.sweeper.decide_on" in typo.stderr
    assert "Traceback" not in typo.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()


def test_the_comparison_s_settings_are_one_policy() -> None:
    """``hydra.sweeper.family``, ``design``, ``smooth_last`` and ``decide_on`` (Hydra's
    values) become the sweep's decision policy, checked when the sweeper is made."""
    sweeper = MixSweeper({}, [], family="bh", design="fixed", smooth_last=2, decide_on=["code"])
    assert sweeper.policy == DecisionPolicy(
        family=Family.BH, design=Design.FIXED, smooth_last=2, decide_on=("code",)
    )
    assert MixSweeper({}, []).policy == DecisionPolicy()
    with pytest.raises(ValueError, match="design 'bayesian': use one of sequential, fixed"):
        MixSweeper({}, [], design="bayesian")
