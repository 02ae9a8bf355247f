"""The set-up rules (orchestrator.guard.rules.configuration): one contract but for the
mixture, one recipe, one initial checkpoint per seed."""

from __future__ import annotations

import json

import pytest

from orchestrator.guard import RefusalCode, check, compare, comparison_markdown
from orchestrator.tracking.mlflow_names import flatten
from tests.support.guard_runs import (
    MIX_A,
    MIX_B,
    RECIPE,
    codes,
    make_contract,
    make_recipe,
    make_run,
    paired_runs,
)


def test_seed_tampered_names_seed_and_both_values() -> None:
    runs = [make_run("run a", MIX_A), make_run("run b", MIX_B, contract=make_contract(seed=1))]
    result = compare(runs)
    assert not result.accepted and result.rows == []
    assert codes(result.refusals) == [RefusalCode.CONTRACT_MISMATCH]
    refusal = result.refusals[0]
    assert refusal.detail["fields"] == {"seed": {"run a": 0, "run b": 1}}
    assert "seed: 0 (run a) vs 1 (run b)" in refusal.message
    assert "re-run run b with seed=0" in refusal.message
    assert refusal.runs == ["id-run-a", "id-run-b"]
    assert "refused" in comparison_markdown(result) and "seed" in comparison_markdown(result)


def test_dataset_fingerprint_tampered_names_dotted_field() -> None:
    contract = make_contract()
    contract["datasets"][0]["fingerprint"] = "f" * 64
    runs = [make_run("a", MIX_A), make_run("b", MIX_B, contract=contract)]
    (refusal,) = check(runs)
    assert refusal.code == RefusalCode.CONTRACT_MISMATCH
    assert list(refusal.detail["fields"]) == ["datasets.code.fingerprint"]
    assert "datasets.code.fingerprint" in refusal.message


def test_nested_and_missing_fields_and_mixture_key_ignored() -> None:
    changed = make_contract(shuffle={"buffer_size": 128, "seed": 0}, mixture={"code": 1.0})
    del changed["flush_every"]
    base = make_contract(mixture={"code": 0.5, "docs": 0.5})
    (refusal,) = check(
        [make_run("a", MIX_A, contract=base), make_run("b", MIX_B, contract=changed)]
    )
    assert set(refusal.detail["fields"]) == {"shuffle.buffer_size", "flush_every"}
    assert refusal.detail["fields"]["flush_every"]["b"] == "<absent>"


def staged_contract(first_phase: dict[str, str]) -> dict:
    """A two-phase contract whose compared phase (1) is the runs' mixture."""
    return make_contract(
        phases=[{"until_tokens": 4096, "mixture": first_phase}, {"until_tokens": None}],
        compared_phase=1,
    )


def test_staged_runs_differing_only_in_the_compared_phase_are_compared() -> None:
    first = {"code": "0.500000", "docs": "0.500000"}
    runs = [
        make_run(name, mix, contract=staged_contract(first))
        for name, mix in (("a", MIX_A), ("b", MIX_B))
    ]
    assert check(runs) == []


def test_staged_runs_whose_other_phase_differs_are_refused_naming_phase_and_dataset() -> None:
    a = make_run("a", MIX_A, contract=staged_contract({"code": "0.500000", "docs": "0.500000"}))
    b = make_run("b", MIX_B, contract=staged_contract({"code": "0.700000", "docs": "0.300000"}))
    (refusal,) = check([a, b])
    assert refusal.code == RefusalCode.CONTRACT_MISMATCH
    assert set(refusal.detail["fields"]) == {"phases.0.mixture.code", "phases.0.mixture.docs"}
    assert "outside the compared phase (phase 0: code, docs)" in refusal.message
    assert '"0.500000" (a) vs "0.700000" (b)' in refusal.message


def test_equal_contracts_different_fingerprint_refused() -> None:
    a, b = make_run("a", MIX_A), make_run("b", MIX_B)
    b.contract_fingerprint = "0" * 64
    (refusal,) = check([a, b])
    assert refusal.code == RefusalCode.CONTRACT_MISMATCH
    assert "contract_fingerprint" in refusal.detail["fields"]
    assert "contract_fingerprint" in refusal.message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("optimizer.param_groups.0.optimizer_kwargs.lr", 1e-3),  # another learning rate
        ("training.steps", 20),  # another schedule length
        ("debug.seed", 7),  # another init seed
        ("model_spec.model.dim", 128),  # another model size
        ("versions.torch", "2.12.0"),
    ],
)
def test_recipe_change_is_refused_naming_the_field_and_both_values(
    field: str, value: object
) -> None:
    changed = make_run("b", MIX_B, recipe=make_recipe(**{field: value}), base=0.9)
    result = compare([make_run("a"), make_run("a-2", base=1.01), changed])
    assert not result.accepted and codes(result.refusals) == [RefusalCode.RECIPE_MISMATCH]
    (refusal,) = result.refusals
    assert refusal.detail["fields"] == {field: {"a": flatten(RECIPE)[field], "b": value}}
    assert field in refusal.message and json.dumps(value) in refusal.message
    assert refusal.runs == ["id-a", "id-b"]


def test_recipe_change_within_a_variant_is_refused_too() -> None:
    a2 = make_run("a-2", recipe=make_recipe(**{"lr_scheduler.warmup_steps": 5}))
    result = compare([make_run("a"), a2, make_run("b", MIX_B)])
    assert codes(result.refusals) == [RefusalCode.RECIPE_MISMATCH]
    assert list(result.refusals[0].detail["fields"]) == ["lr_scheduler.warmup_steps"]


def test_extended_schedule_counts_as_a_recipe_field() -> None:
    extended = make_run("b", MIX_B, recipe=make_recipe(extended_at_steps=[5]))
    result = compare([make_run("a"), extended])
    assert codes(result.refusals) == [RefusalCode.RECIPE_MISMATCH]
    assert "extended_at_steps" in result.refusals[0].detail["fields"]


def test_same_recipe_other_initial_weights_refused() -> None:
    result = compare([make_run("a"), make_run("b", MIX_B, init="init-made-elsewhere")])
    assert codes(result.refusals) == [RefusalCode.INIT_MISMATCH]
    assert set(result.refusals[0].detail["fields"]["init_sha256"]) == {"a", "b"}


def test_paired_seeds_still_check_the_initial_weights_within_a_seed() -> None:
    runs = paired_runs((1.0, 1.0), (0.9, 0.9))
    runs[3].init_sha256 = "f" * 64
    (refusal,) = check(runs)
    assert refusal.code == RefusalCode.INIT_MISMATCH and refusal.runs == ["id-a-s1", "id-b-s1"]


def test_paired_seeds_do_not_excuse_another_field() -> None:
    runs = paired_runs((1.0, 1.0), (0.9, 0.9))
    runs[3].recipe = {**runs[3].recipe, "optimizer.param_groups.0.optimizer_kwargs.lr": 1e-3}
    (refusal,) = check(runs)
    assert refusal.code == RefusalCode.RECIPE_MISMATCH
    assert list(refusal.detail["fields"]) == ["optimizer.param_groups.0.optimizer_kwargs.lr"]
