"""Staged mixtures in an experiment (``data.phases``): validation before any work, the
contract (the compared phase's mixture is the run's, the others are contract), the plan's
outline of steps and tokens, and a share too small for its phase refused at plan time."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import ExperimentError
from orchestrator.experiment import fingerprints, load_experiment, phase_outline, validate
from orchestrator.run import api
from pipeline import ConfigError

# 8 sequences of 64 tokens a step: 512 tokens
LAYOUT = {"global_batch_size": 8, "seq_len": 64}
EQUAL = {"code": 1.0, "docs": 1.0, "unicode": 1.0}


@pytest.fixture(scope="module")
def base(corpus: dict[str, list[Path]], zephon_cache: Path) -> dict:
    return {
        "data": {
            "datasets": {name: [str(p) for p in paths] for name, paths in corpus.items()},
            "cache_dir": str(zephon_cache),
            **LAYOUT,
        },
        "train": {"steps": 40},
    }


def staged(base: dict, *phases: dict, **data: object) -> dict:
    return {**base, "data": {**base["data"], "phases": list(phases), **data}}


def problems_of(config: dict) -> list[str]:
    with pytest.raises(ExperimentError) as caught:
        validate(load_experiment(config))
    return caught.value.problems


def test_one_phase_keeps_the_contract_and_variant_of_a_plain_mixture(base: dict) -> None:
    mix = {"code": 0.6, "docs": 0.3, "unicode": 0.1}
    plain = fingerprints(load_experiment({**base, "data": {**base["data"], "mixture": mix}}))
    one_phase = fingerprints(load_experiment(staged(base, {"mixture": mix})))
    assert one_phase == plain
    assert "phases" not in plain.contract


def test_only_the_compared_phase_is_the_variant(base: dict) -> None:
    def prints(first: dict, last: dict, **data: object):
        config = staged(base, {"until_step": 20, "mixture": first}, {"mixture": last}, **data)
        return fingerprints(load_experiment(config))

    code = {"code": 1.0, "docs": 0.0, "unicode": 0.0}
    a, b = prints(EQUAL, EQUAL), prints(EQUAL, code)
    assert a.contract_fingerprint == b.contract_fingerprint and a.variant != b.variant
    assert b.mixture == {"code": "1.000000", "docs": "0.000000", "unicode": "0.000000"}
    assert b.contract["compared_phase"] == 1
    assert b.contract["phases"] == [
        {"until_tokens": 20 * 512, "mixture": dict.fromkeys(EQUAL, "0.333333")},
        {"until_tokens": None},
    ]
    other_first = prints(code, code)
    assert other_first.contract_fingerprint != b.contract_fingerprint
    first_compared = prints(code, code, compared_phase=0)
    assert first_compared.contract_fingerprint != other_first.contract_fingerprint
    assert first_compared.contract["phases"][1] == {
        "until_tokens": None,
        "mixture": b.mixture,
    }


def test_a_step_bound_is_the_same_contract_as_its_tokens(base: dict) -> None:
    by_step = staged(base, {"until_step": 20, "mixture": EQUAL}, {"mixture": EQUAL})
    by_tokens = staged(base, {"until_tokens": 20 * 512, "mixture": EQUAL}, {"mixture": EQUAL})
    assert fingerprints(load_experiment(by_step)) == fingerprints(load_experiment(by_tokens))


def test_the_plan_outlines_each_phase_s_steps_and_tokens_per_dataset(base: dict) -> None:
    first = {"code": 0.5, "docs": 0.5, "unicode": 0.0}
    config = load_experiment(staged(base, {"until_step": 10, "mixture": first}, {"mixture": EQUAL}))
    outline = [o.to_dict() for o in phase_outline(config.data, config.train.steps)]
    assert outline == [
        {
            "phase": 0,
            "steps": [1, 10],
            "tokens": 5120,
            "mixture": {"code": "0.500000", "docs": "0.500000", "unicode": "0.000000"},
            "expected_tokens": {"code": 2560, "docs": 2560, "unicode": 0},
        },
        {
            "phase": 1,
            "steps": [11, 40],
            "tokens": 15360,
            "mixture": dict.fromkeys(EQUAL, "0.333333"),
            "expected_tokens": dict.fromkeys(EQUAL, 5120),
        },
    ]
    planned = api.plan(config, dp=1).to_dict()
    assert planned["phases"] == outline and planned["mixture"] == outline[1]["mixture"]
    shorter = [o.to_dict() for o in phase_outline(config.data, 8)]  # e.g. a split run
    assert shorter[0]["steps"] == [1, 8] and shorter[0]["tokens"] == 4096
    assert shorter[1]["steps"] is None and shorter[1]["expected_tokens"]["code"] == 0


def test_a_share_too_small_for_its_phase_is_refused_at_plan_time(base: dict) -> None:
    tiny = {"code": 0.001, "docs": 1.0, "unicode": 1.0}
    config = staged(base, {"until_step": 4, "mixture": tiny}, {"mixture": EQUAL})
    with pytest.raises(ConfigError, match=r"phase 0 \(2048 tokens\) gives dataset 'code'"):
        api.plan(config, dp=1)


@pytest.mark.parametrize(
    ("phases", "data", "expected"),
    [
        (
            [{"until_step": 10, "mixture": EQUAL}, {"until_step": 20, "mixture": EQUAL}],
            {},
            "data.phases.1 is the last phase: it runs to the end",
        ),
        (
            [{"mixture": EQUAL}, {"mixture": EQUAL}],
            {},
            "data.phases.0: give exactly one of until_step and until_tokens",
        ),
        (
            [{"until_step": 10, "until_tokens": 5120, "mixture": EQUAL}, {"mixture": EQUAL}],
            {},
            "data.phases.0: give exactly one of until_step and until_tokens",
        ),
        (
            [
                {"until_step": 10, "mixture": EQUAL},
                {"until_step": 5, "mixture": EQUAL},
                {"mixture": EQUAL},
            ],
            {},
            "data.phases.1 ends at 2560 tokens, not after the previous phase's end (5120)",
        ),
        (
            [{"until_step": 10, "mixture": {"code": 1.0}}, {"mixture": EQUAL}],
            {},
            "data.phases.0.mixture gives no weight to datasets ['docs', 'unicode']",
        ),
        (
            [{"until_step": 10, "mixture": EQUAL}, {"mixture": {**EQUAL, "web": 1.0}}],
            {},
            "data.phases.1.mixture names unknown datasets ['web']",
        ),
        (
            [{"until_step": 10, "mixture": EQUAL}, {"mixture": EQUAL}],
            {"compared_phase": 2},
            "data.compared_phase=2: use a phase index in [0, 1]",
        ),
        (
            [{"until_step": 10, "mixture": EQUAL}, {"mixture": EQUAL}],
            {"mixture": EQUAL},
            "data.mixture and data.phases are both set",
        ),
        ([], {"compared_phase": 0}, "data.compared_phase needs data.phases"),
    ],
)
def test_malformed_phases_are_refused_before_any_work(
    base: dict, phases: list[dict], data: dict, expected: str
) -> None:
    found = problems_of(staged(base, *phases, **data))
    assert any(expected in p for p in found), found
