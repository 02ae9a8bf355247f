"""The recipe (orchestrator.run.recipe): TorchTitan's own parser, canonical, cached, and
what replicates may differ in without changing it; the learning rate of a base run at its
checkpoint's step, read from its recorded recipe through TorchTitan's own scheduler."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import ExperimentError
from orchestrator.experiment import load_experiment
from orchestrator.experiment.validation import validate
from orchestrator.run import recipe as recipe_module
from orchestrator.run.recipe import Recipe, base_learning_rate, recipe_of

WEIGHT_DECAY = "--optimizer.param-groups.0.optimizer-kwargs.weight-decay"
LR = "--optimizer.param-groups.0.optimizer-kwargs.lr"
"""TorchTitan's spelling of the peak learning rate (``train.lr``)."""


def recipe(*overrides: str) -> Recipe:
    base = {"model": {"config": "zephon_mini"}, "train": {"precision": "float32"}}
    return recipe_of(load_experiment(base, list(overrides)))


def test_the_same_recipe_written_two_ways_has_one_fingerprint() -> None:
    spaced = recipe(f"model.args=[{WEIGHT_DECAY},1e-3]")
    joined = recipe(f"model.args=['{WEIGHT_DECAY}=0.001']")
    assert spaced.fingerprint == joined.fingerprint
    kwargs = spaced.fields["optimizer"]["param_groups"][0]["optimizer_kwargs"]
    assert kwargs["weight_decay"] == 0.001
    assert spaced.fingerprint != recipe().fingerprint  # the default is 0.1
    assert spaced.init_key == recipe().init_key  # the optimizer is not the initial weights


def test_replicate_free_settings_keep_the_recipe() -> None:
    base = recipe()
    for override in (
        "resources.dp=2",
        "train.microbatch_size=1",
        "resources.launcher=multinode",
        "resources.max_procs=1",
        "eval.interval=3",
        "train.checkpoint_interval=3",
        "data.shuffle_buffer=4",  # data: the contract's business, not the recipe's
    ):
        assert recipe(override).fingerprint == base.fingerprint, override


@pytest.mark.parametrize(
    ("override", "same_init"),
    [("train.steps=40", True), ("train.precision=bfloat16", True), ("train.seed=7", False)],
)
def test_schedule_precision_and_seed_are_the_recipe(override: str, same_init: bool) -> None:
    base, changed = recipe(), recipe(override)
    assert changed.fingerprint != base.fingerprint
    assert (changed.init_key == base.init_key) is same_init
    assert changed.fields["versions"]["torchtitan"] == base.fields["versions"]["torchtitan"]


def test_a_cached_recipe_needs_no_torchtitan(monkeypatch: pytest.MonkeyPatch) -> None:
    first = recipe("train.steps=3")

    def no_subprocess(flags: list[str]) -> dict:
        raise AssertionError(f"resolved again: {flags}")

    monkeypatch.setattr(recipe_module, "_resolve_with_titan", no_subprocess)
    again = recipe("train.steps=5", "train.seed=3")  # Zephon's own flags: set, not resolved
    assert again.fields["training"]["steps"] == 5 and again.fields["debug"]["seed"] == 3
    assert again.fields["model_spec"] == first.fields["model_spec"]


def test_a_flag_torchtitan_refuses_is_named_with_its_spelling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ExperimentError) as error:
        recipe("model.args=[--optimizer.lr,1e-3]")
    message = str(error.value)
    assert "Unrecognized options: --optimizer.lr" in message and LR in message
    monkeypatch.setattr(
        recipe_module, "_resolve_with_titan", lambda flags: {}
    )  # cached: not asked again
    with pytest.raises(ExperimentError) as again:
        recipe("model.args=[--optimizer.lr,1e-3]")
    assert str(again.value) == message


def test_the_schedule_fields_are_resolved_by_torchtitan_into_the_recipe() -> None:
    """An anneal's schedule (conf/train/anneal.yaml's values) is TorchTitan's lr_scheduler in
    the recipe: the guard compares it field by field; the initial weights stay the same."""
    base = recipe()
    anneal = recipe(
        "train.warmup_steps=0",
        "train.decay_ratio=1.0",
        "train.decay_type=cosine",
        "train.min_lr_factor=0.1",
    )
    schedule = anneal.fields["lr_scheduler"]
    assert (schedule["warmup_steps"], schedule["decay_ratio"]) == (0, 1.0)
    assert (schedule["decay_type"], schedule["min_lr_factor"]) == ("cosine", 0.1)
    assert anneal.fingerprint != base.fingerprint and anneal.init_key == base.init_key
    with pytest.raises(ExperimentError, match=r"set train.warmup_steps instead"):
        validate(load_experiment({"model": {"args": ["--lr-scheduler.warmup-steps", "3"]}}))
    with pytest.raises(ExperimentError, match=r"decay_type='step': use one of linear, sqrt"):
        validate(load_experiment({"train": {"decay_type": "step"}}))


def test_the_peak_learning_rate_is_train_lr() -> None:
    changed = recipe("train.lr=2e-3")
    assert changed.fields["optimizer"]["param_groups"][0]["optimizer_kwargs"]["lr"] == 0.002
    assert changed.fingerprint != recipe().fingerprint
    with pytest.raises(ExperimentError, match=r"set train.lr instead"):
        validate(load_experiment({"model": {"args": [LR, "1e-3"]}}))
    with pytest.raises(ExperimentError, match=r"lr_from_init needs train.init_from"):
        validate(load_experiment({"train": {"lr_from_init": True}}))


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
