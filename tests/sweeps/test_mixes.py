"""Data-mix variants: canonical rounding, the grid, Dirichlet draws, perturbations,
de-duplication across generators and the errors of bad requests (all problems at once)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.errors import ConfigError
from sweeps.mixes import (
    MixError,
    MixSpace,
    canonical,
    describe,
    mix_label,
    override_strings,
    variants,
)

DOMAINS = ["code", "docs", "i18n"]


def problems_of(space: MixSpace, domains: list[str] = DOMAINS) -> list[str]:
    with pytest.raises(MixError) as caught:
        variants(space, domains)
    assert isinstance(caught.value, ConfigError)
    return caught.value.problems


# --- canonical form ---------------------------------------------------------------------


weights_strategy = st.dictionaries(
    st.sampled_from(DOMAINS),
    st.one_of(st.just(0.0), st.floats(min_value=1e-3, max_value=1e6)),
    min_size=1,
).filter(lambda weights: sum(weights.values()) > 0)


@given(
    weights=weights_strategy,
    decimals=st.integers(min_value=1, max_value=6),
    factor=st.floats(min_value=1e-3, max_value=1e3),
)
def test_canonical_rounds_to_units_summing_to_one_and_ignores_scale(
    weights: dict[str, float], decimals: int, factor: float
) -> None:
    scale = 10**decimals
    result = canonical(weights, DOMAINS, decimals)
    assert list(result) == sorted(DOMAINS)
    units = {d: round(w * scale) for d, w in result.items()}
    assert all(result[d] == units[d] / scale for d in DOMAINS)  # exactly the rounded values
    assert sum(units.values()) == scale
    total = sum(weights.values())
    for domain in DOMAINS:
        assert abs(result[domain] - weights.get(domain, 0.0) / total) <= 1 / scale + 1e-12

    scaled = {d: w * factor for d, w in weights.items()}
    assert canonical(scaled, DOMAINS, decimals) == result
    assert override_strings(scaled, decimals) == override_strings(weights, decimals)
    full = {d: weights.get(d, 0.0) for d in DOMAINS}
    assert override_strings(result, decimals) == override_strings(full, decimals)


def test_canonical_equal_mixes_are_identical_and_ties_go_to_the_first_domain() -> None:
    assert canonical({"a": 1, "b": 1}, ["a", "b"], 3) == canonical(
        {"a": 0.5, "b": 0.5}, ["a", "b"], 3
    )
    assert canonical({"a": 1, "b": 1, "c": 1}, ["c", "b", "a"], 3) == {
        "a": 0.334,
        "b": 0.333,
        "c": 0.333,
    }
    assert canonical({"b": 2}, ["a", "b"], 2) == {"a": 0.0, "b": 1.0}  # missing domain: 0
    # Proportional only up to float rounding: 0.3 is not exactly 3 x 0.1 in binary.
    domains = ["a", "b", "c"]
    assert canonical({"a": 0.3, "b": 0.1, "c": 1.6}, domains, 1) == {"a": 0.2, "b": 0.0, "c": 0.8}
    assert canonical({"a": 3, "b": 1, "c": 16}, domains, 1) == {"a": 0.2, "b": 0.0, "c": 0.8}


def test_override_strings_and_label_print_every_domain_with_fixed_decimals() -> None:
    mix = {"i18n": 2, "code": 5, "docs": 3, "web": 0}
    assert override_strings(mix, 3) == [
        "++data.mixture.code=0.500",
        "++data.mixture.docs=0.300",
        "++data.mixture.i18n=0.200",
        "++data.mixture.web=0.000",
    ]
    assert override_strings({"b": 1.0}, 2, key="mix") == ["++mix.b=1.00"]
    assert mix_label(mix, 3) == "code=0.500,docs=0.300,i18n=0.200,web=0.000"


def test_canonical_reports_every_problem_of_a_mix() -> None:
    with pytest.raises(MixError) as caught:
        canonical({"code": -1.0, "web": 1.0}, DOMAINS, 3)
    text = "\n".join(caught.value.problems)
    assert len(caught.value.problems) == 2
    assert "'web'" in text and "finite numbers >= 0" in text
    for weights in ({"code": math.nan}, {"code": math.inf}, {"code": 0.0, "docs": 0.0}):
        with pytest.raises(MixError):
            canonical(weights, DOMAINS, 3)
    for decimals in (0, 7):
        with pytest.raises(MixError, match="decimals"):
            canonical({"code": 1.0}, DOMAINS, decimals)


# --- grid -------------------------------------------------------------------------------


def test_grid_at_half_on_two_domains() -> None:
    space = MixSpace(grid_resolution=0.5)
    assert variants(space, ["b", "a"]) == [
        {"a": 0.0, "b": 1.0},
        {"a": 0.5, "b": 0.5},
        {"a": 1.0, "b": 0.0},
    ]


def test_grid_is_lexicographic_and_counts_compositions() -> None:
    assert [tuple(v.values()) for v in variants(MixSpace(grid_resolution=0.5), DOMAINS)] == [
        (0.0, 0.0, 1.0),
        (0.0, 0.5, 0.5),
        (0.0, 1.0, 0.0),
        (0.5, 0.0, 0.5),
        (0.5, 0.5, 0.0),
        (1.0, 0.0, 0.0),
    ]
    assert len(variants(MixSpace(grid_resolution=0.25), DOMAINS)) == math.comb(4 + 2, 2) == 15
    assert len(variants(MixSpace(grid_resolution=0.1), ["a", "b"])) == 11


def test_bounds_filter_the_grid() -> None:
    everything = variants(MixSpace(grid_resolution=0.25), DOMAINS)
    at_least_quarter_code = variants(MixSpace(grid_resolution=0.25, min={"code": 0.25}), DOMAINS)
    assert at_least_quarter_code == [v for v in everything if v["code"] >= 0.25]
    assert len(at_least_quarter_code) == 4 + 3 + 2 + 1
    bounded = variants(
        MixSpace(grid_resolution=0.25, min={"code": 0.25}, max={"docs": 0.5, "i18n": 0.5}),
        DOMAINS,
    )
    assert bounded == [
        v for v in everything if v["code"] >= 0.25 and v["docs"] <= 0.5 and v["i18n"] <= 0.5
    ]
    assert len(bounded) == 8


def test_grid_with_no_mix_within_the_bounds_is_refused() -> None:
    problems = problems_of(
        MixSpace(grid_resolution=0.5, min={"a": 0.2}, max={"a": 0.4}), ["a", "b"]
    )
    assert len(problems) == 1
    assert "gives no mix within the bounds" in problems[0] and "'a': 0.2" in problems[0]


# --- Dirichlet --------------------------------------------------------------------------


def test_dirichlet_draws_are_seeded_distinct_and_within_bounds() -> None:
    space = MixSpace(dirichlet_draws=20, seed=1, min={"code": 0.2}, max={"i18n": 0.3})
    first = variants(space, DOMAINS)
    assert variants(space, DOMAINS) == first
    assert variants(replace(space, seed=2), DOMAINS) != first
    assert len(first) == 20
    assert len({tuple(v.values()) for v in first}) == 20
    assert all(v["code"] >= 0.2 and v["i18n"] <= 0.3 for v in first)
    assert all(math.isclose(sum(v.values()), 1.0) for v in first)


def test_dirichlet_gives_up_when_the_bounds_leave_too_few_mixes() -> None:
    # At one decimal the bounds leave a single mix, {a: 0.5, b: 0.5}.
    space = MixSpace(dirichlet_draws=2, min={"a": 0.5}, max={"a": 0.5}, decimals=1)
    problems = problems_of(space, ["a", "b"])
    assert len(problems) == 1
    assert "only 1 new mixes" in problems[0] and "2000 draws" in problems[0]
    assert "too tight" in problems[0]


# --- perturbations ----------------------------------------------------------------------


def test_perturbations_move_one_domain_by_delta_and_keep_the_others_ratios() -> None:
    base = {"code": 0.5, "docs": 0.3, "i18n": 0.2}
    delta = 0.1
    result = variants(MixSpace(perturb_base={"code": 5, "docs": 3, "i18n": 2}), DOMAINS)
    assert result[0] == base
    moves = [(d, sign) for d in DOMAINS for sign in (1, -1)]
    assert len(result) == 1 + len(moves)
    for variant, (moved, sign) in zip(result[1:], moves, strict=True):
        target = base[moved] + sign * delta
        assert abs(variant[moved] - target) <= 1e-3 + 1e-12
        for other in DOMAINS:
            if other != moved:
                expected = base[other] * (1 - target) / (1 - base[moved])
                assert abs(variant[other] - expected) <= 1e-3 + 1e-12


def test_perturbations_skip_impossible_moves_and_respect_bounds() -> None:
    # a = 1: nothing to rescale; b = 0: cannot go below 0. Only b + 0.1 remains.
    assert variants(MixSpace(perturb_base={"a": 1.0}, perturb_delta=0.1), ["a", "b"]) == [
        {"a": 1.0, "b": 0.0},
        {"a": 0.9, "b": 0.1},
    ]
    space = MixSpace(perturb_base={"code": 5, "docs": 3, "i18n": 2})
    unbounded = variants(space, DOMAINS)
    bounded = variants(replace(space, min={"code": 0.45}), DOMAINS)
    # code - 0.1 (0.4), docs + 0.1 (code 0.429) and i18n + 0.1 (code 0.438) break the bound.
    assert bounded == [v for v in unbounded if v["code"] >= 0.45]
    assert len(bounded) == 4


# --- de-duplication, description --------------------------------------------------------


def test_duplicates_across_generators_are_removed_keeping_the_first() -> None:
    space = MixSpace(explicit=[{"a": 0.5, "b": 0.5}, {"a": 1, "b": 1}], grid_resolution=0.5)
    assert variants(space, ["a", "b"]) == [
        {"a": 0.5, "b": 0.5},
        {"a": 0.0, "b": 1.0},
        {"a": 1.0, "b": 0.0},
    ]
    with_base = replace(space, perturb_base={"a": 0.5, "b": 0.5}, perturb_delta=0.5)
    assert len(variants(with_base, ["a", "b"])) == 3


def test_describe_names_only_the_generators_used() -> None:
    space = MixSpace(grid_resolution=0.25, min={"code": 0.1})
    description = describe(space)
    assert description == {
        "grid_resolution": 0.25,
        "min": {"code": 0.1},
        "decimals": 3,
        "max_variants": 256,
    }
    everything = MixSpace(
        explicit=[{"code": 1}],
        dirichlet_draws=3,
        perturb_base={"code": 1, "docs": 1},
        max={"i18n": 0.5},
    )
    assert set(describe(everything)) == {
        "explicit",
        "dirichlet_draws",
        "dirichlet_alpha",
        "seed",
        "perturb_base",
        "perturb_delta",
        "max",
        "decimals",
        "max_variants",
    }
    assert json.loads(json.dumps(describe(everything))) == describe(everything)


# --- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "space",
    [
        MixSpace(explicit=[{"code": 1.0, "web": 1.0}]),
        MixSpace(grid_resolution=0.5, min={"web": 0.1}),
        MixSpace(grid_resolution=0.5, max={"web": 0.9}),
        MixSpace(perturb_base={"web": 1.0}),
    ],
    ids=["explicit", "min", "max", "perturb_base"],
)
def test_unknown_domains_are_named(space: MixSpace) -> None:
    problems = problems_of(space)
    assert len(problems) == 1
    assert "unknown domains ['web']" in problems[0]


def test_bounds_that_leave_no_valid_mix_are_refused() -> None:
    low = problems_of(MixSpace(grid_resolution=0.5, min={"code": 0.6, "docs": 0.6}))
    assert len(low) == 1 and "no valid mix" in low[0] and "1.200 > 1" in low[0]
    high = problems_of(MixSpace(grid_resolution=0.5, max=dict.fromkeys(DOMAINS, 0.3)))
    assert len(high) == 1 and "no valid mix" in high[0] and "0.900 < 1" in high[0]
    crossed = problems_of(MixSpace(grid_resolution=0.5, min={"code": 0.6}, max={"code": 0.4}))
    assert crossed == ["min.code=0.6 > max.code=0.4; lower min.code or raise max.code"]
    outside = problems_of(MixSpace(grid_resolution=0.5, min={"code": -0.1}, max={"docs": 2}))
    assert len(outside) == 2 and all("outside [0, 1]" in p for p in outside)


def test_explicit_mix_outside_the_bounds_names_the_mix_and_the_bound() -> None:
    problems = problems_of(
        MixSpace(explicit=[{"code": 0.1}, {"code": 9, "docs": 1}], max={"code": 0.8})
    )
    assert len(problems) == 2
    assert problems[0].startswith("explicit[0] (code=1.000,docs=0.000,i18n=0.000)")
    assert problems[1].startswith("explicit[1] (code=0.900,docs=0.100,i18n=0.000)")
    assert all("max.code=0.8" in p for p in problems)


def test_empty_request_is_refused() -> None:
    assert problems_of(MixSpace()) == [
        "nothing requested: list explicit mixes, or set grid_resolution, "
        "dirichlet_draws > 0 or perturb_base"
    ]


@pytest.mark.parametrize("resolution", [0.3, 0.0, -0.5, 1.5, 1 / 3, 0.0001])
def test_grid_resolutions_that_do_not_fit_are_refused(resolution: float) -> None:
    problems = problems_of(MixSpace(grid_resolution=resolution))
    assert len(problems) == 1 and f"grid_resolution={resolution}" in problems[0]


def test_too_many_variants_are_refused_saying_how_many_and_what_to_change() -> None:
    problems = problems_of(MixSpace(grid_resolution=0.1, max_variants=100), ["a", "b", "c", "d"])
    assert len(problems) == 1
    assert "yields 286 variants (grid 286)" in problems[0] and "max_variants=100" in problems[0]
    early = problems_of(MixSpace(grid_resolution=0.001), ["a", "b", "c", "d"])
    assert len(early) == 1
    assert f"gives {math.comb(1003, 3)} mixes before the bounds" in early[0]
    draws = problems_of(MixSpace(dirichlet_draws=300))
    assert draws == [
        "dirichlet_draws=300 asks for more than max_variants=256 variants; lower "
        "dirichlet_draws or raise max_variants"
    ]


def test_every_problem_of_a_request_is_reported_at_once() -> None:
    space = MixSpace(
        explicit=[{"web": 1.0}],
        grid_resolution=0.3,
        dirichlet_draws=-1,
        dirichlet_alpha=0.0,
        perturb_delta=1.0,
        decimals=7,
    )
    with pytest.raises(MixError) as caught:
        variants(space, ["code", "code"])
    problems = caught.value.problems
    assert len(problems) >= 2
    text = str(caught.value)
    for expected in (
        "listed more than once",
        "decimals=7",
        "dirichlet_draws=-1",
        "dirichlet_alpha=0.0",
        "perturb_delta=1.0",
        "grid_resolution=0.3",
        "unknown domains ['web']",
    ):
        assert expected in text
    assert text.startswith("invalid data mix:\n  - ")
