"""The recipe (orchestrator.run.recipe): TorchTitan's own parser, canonical, cached, and
what replicates may differ in without changing it."""

from __future__ import annotations

import pytest

from orchestrator.errors import ExperimentError
from orchestrator.experiment import load_experiment
from orchestrator.experiment.validation import validate
from orchestrator.run import recipe as recipe_module
from orchestrator.run.recipe import recipe_of
from orchestrator.run.run_plan import Recipe

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
