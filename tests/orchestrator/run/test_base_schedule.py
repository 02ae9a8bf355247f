"""The learning rate of a base run at its checkpoint's step (orchestrator.run.base_schedule),
read from its recorded recipe through TorchTitan's own scheduler."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import ExperimentError
from orchestrator.run.base_schedule import base_learning_rate


def base_run(root: Path, schedule: dict, *, steps: int = 10, lr: float = 1e-3) -> Path:
    """A run folder whose experiment.json records ``schedule``; its checkpoint folder."""
    recipe = {
        "lr_scheduler": {"total_steps": None, **schedule},
        "optimizer": {"param_groups": [{"optimizer_kwargs": {"lr": lr}}]},
        "training": {"steps": steps},
    }
    root.mkdir(parents=True)
    (root / "experiment.json").write_text(json.dumps({"recipe": recipe}))
    return root / "titan" / "checkpoint"


LINEAR_TO_ZERO = {
    "warmup_steps": 0,
    "decay_ratio": 1.0,
    "decay_type": "linear",
    "min_lr_factor": 0.0,
}


@pytest.mark.parametrize(("step", "expected"), [(0, 1.0), (4, 0.6), (9, 0.1)])
def test_a_linear_decay_is_read_at_the_next_step(
    tmp_path: Path, step: int, expected: float
) -> None:
    """Ten steps decaying from 1e-3 to 0: after step N the next step trains at (10 - N) / 10
    of the peak (TorchTitan's LambdaLR, as the base run itself would have)."""
    checkpoints = base_run(tmp_path / "base", LINEAR_TO_ZERO)
    assert base_learning_rate(checkpoints / f"step-{step}") == pytest.approx(1e-3 * expected)


def test_warmup_and_a_floor_are_followed(tmp_path: Path) -> None:
    schedule = {"warmup_steps": 4, "decay_ratio": 0.5, "decay_type": "cosine", "min_lr_factor": 0.1}
    checkpoints = base_run(tmp_path / "base", schedule, steps=20)
    assert base_learning_rate(checkpoints / "step-1") == pytest.approx(1e-3 * 2 / 4)  # warming up
    assert base_learning_rate(checkpoints / "step-6") == pytest.approx(1e-3)  # stable
    assert base_learning_rate(checkpoints / "step-20") == pytest.approx(1e-4)  # the floor


def test_a_folder_that_is_not_a_zephon_checkpoint_says_to_set_the_rate(tmp_path: Path) -> None:
    with pytest.raises(ExperimentError, match=r"not a step folder of a Zephon run.*set train.lr"):
        base_learning_rate(tmp_path / "somewhere" / "step-3")
    checkpoints = base_run(tmp_path / "base", LINEAR_TO_ZERO)
    with pytest.raises(ExperimentError, match=r"not a step folder"):
        base_learning_rate(checkpoints / "latest")
