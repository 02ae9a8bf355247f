"""Proposing: within bounds and caps, canonical, new, deterministic; a recommendation that
beats the runs on a known truth; a stop signal that tells a flat truth from a steep one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.errors import SearchError
from orchestrator.search import Bounds, fit, initial_design, propose
from tests.support.search_truths import DOMAINS, observed, true_objective

KNOWN = fit(observed(30, seed=5, noise=0.002), models=["mixing_law"], refits=8, seed=0)


def units(mixture: dict[str, float], decimals: int = 3) -> list[int]:
    return [round(w * 10**decimals) for w in mixture.values()]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lows=st.lists(st.sampled_from([0.0, 0.05, 0.1, 0.2]), min_size=4, max_size=4),
    highs=st.lists(st.sampled_from([0.3, 0.5, 1.0]), min_size=4, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_proposals_lie_within_bounds_are_canonical_and_new(
    lows: list[float], highs: list[float], seed: int
) -> None:
    bounds = Bounds(dict(zip(DOMAINS, lows, strict=True)), dict(zip(DOMAINS, highs, strict=True)))
    proposal = propose(KNOWN, count=3, bounds=bounds, seed=seed)
    seen = {tuple(np.round(m * 1000).astype(int)) for m in KNOWN.observations.mixtures}
    keys = [tuple(units(p.mixture)) for p in proposal.proposals]
    assert len(set(keys)) == len(keys) == 3 and not set(keys) & seen
    for p in [*proposal.proposals, proposal.recommended]:
        assert sum(units(p.mixture)) == 1000  # canonical: whole units that sum to one
        for domain, share in p.mixture.items():
            assert bounds.lower[domain] - 1e-9 <= share <= bounds.upper[domain] + 1e-9
        assert p.interval[0] <= p.predicted <= p.interval[1]


def test_the_same_seed_proposes_the_same_mixtures() -> None:
    first = propose(KNOWN, count=4, seed=11).to_json()
    assert propose(KNOWN, count=4, seed=11).to_json() == first
    assert propose(KNOWN, count=4, seed=12).to_json()["proposals"] != first["proposals"]


def test_the_recommendation_beats_the_best_run_on_a_known_truth() -> None:
    proposal = propose(KNOWN, count=2, seed=0)
    recommended = np.array([list(proposal.recommended.mixture.values())])
    best_observed = true_objective(KNOWN.observations.mixtures).min()
    assert true_objective(recommended)[0] < best_observed
    assert proposal.stop.stop is False and "continue" in proposal.stop.reason


def test_a_flat_truth_with_replicates_says_stop() -> None:
    flat = fit(observed(20, seed=6, noise=0.02, replicates=2, flat=True), refits=16, seed=0)
    proposal = propose(flat, count=3, seed=0)
    assert proposal.stop.stop, proposal.stop.reason
    assert "replicate noise" in proposal.stop.reason


def test_a_repetition_cap_lowers_a_small_domains_share() -> None:
    capped = Bounds().with_repetition_cap({"a": 1000.0}, budget_tokens=40_000, max_epochs=4)
    assert capped.upper["a"] == pytest.approx(0.1)
    proposal = propose(KNOWN, count=4, bounds=capped, seed=0)
    assert all(p.mixture["a"] <= 0.1 for p in [*proposal.proposals, proposal.recommended])


def test_bounds_that_leave_no_mixture_are_refused_with_the_reason() -> None:
    with pytest.raises(SearchError, match=r"minimums sum to 1\.2000"):
        propose(KNOWN, count=1, bounds=Bounds({"a": 0.6, "b": 0.6}))
    with pytest.raises(SearchError, match=r"maximums .* sum to 0\.8000"):
        propose(KNOWN, count=1, bounds=Bounds(upper=dict.fromkeys(DOMAINS, 0.2)))
    with pytest.raises(SearchError, match="unknown domain 'web'"):
        propose(KNOWN, count=1, bounds=Bounds(upper={"web": 0.5}))


def test_the_initial_design_starts_with_uniform_and_the_prior() -> None:
    design = initial_design(DOMAINS, prior={"a": 4, "b": 2, "c": 1, "d": 1}, draws=3, seed=0)
    assert design[0] == {"a": 0.25, "b": 0.25, "c": 0.25, "d": 0.25}
    assert design[1] == {"a": 0.5, "b": 0.25, "c": 0.125, "d": 0.125}
    assert len(design) == 5 and len({tuple(m.values()) for m in design}) == 5
    # The draws depend on the seed alone, not on whether a prior came first.
    assert initial_design(DOMAINS, prior=None, draws=3, seed=0) == [design[0], *design[2:]]


def test_a_confirmation_of_two_comparisons_decides_each_at_97_5_percent() -> None:
    from orchestrator.search.confirmation import confirmation_confidence

    assert confirmation_confidence(1) == pytest.approx(0.95)
    assert confirmation_confidence(2) == pytest.approx(0.975)


def test_a_cap_between_grid_points_moves_a_mixture_onto_it_instead_of_dropping_it() -> None:
    capped = Bounds(upper={"a": 0.0839})  # 4 epochs of a small dataset: not a multiple of 0.001
    design = initial_design(DOMAINS, prior=None, draws=2, seed=0, bounds=capped)
    assert design[0]["a"] == 0.083 and len(design) == 3  # the uniform mix, capped, is kept
    proposal = propose(KNOWN, count=4, bounds=capped, seed=0)
    assert len(proposal.proposals) == 4
    assert all(p.mixture["a"] <= 0.0839 for p in [*proposal.proposals, proposal.recommended])
