"""Decisions across model sizes: pairs lined up by mixture, agreement, flips, Kendall's tau."""

from __future__ import annotations

import pytest

from orchestrator.guard.ladder import kendall_tau, ladder, ladder_markdown

X, Y, Z = "code=0.2 docs=0.8", "code=0.5 docs=0.5", "code=0.8 docs=0.2"


def comparison(scores: dict[str, float], decisions: dict[tuple[str, str], str]) -> dict:
    """A comparison's JSON: rows by aggregate, pairs as the guard orders them (best first)."""
    order = sorted(scores, key=scores.get)
    return {
        "accepted": True,
        "rows": [{"mixture": m, "aggregate_bpb": scores[m]} for m in order],
        "pairs": [
            {"a_mixture": a, "b_mixture": b, "decision": decisions.get((a, b), "cannot_tell")}
            for i, a in enumerate(order)
            for b in order[i + 1 :]
        ],
    }


def test_pairs_are_lined_up_by_mixture_and_a_flip_is_flagged() -> None:
    small = comparison({X: 3.0, Y: 3.2, Z: 3.5}, {(X, Z): "a_better", (Y, Z): "a_better"})
    # at the larger size Z is best: decided better than Y (it was worse), X vs Z not decided
    large = comparison({Z: 2.0, X: 2.1, Y: 2.3}, {(Z, Y): "a_better"})
    result = ladder({"mini": small, "tiny": large})
    assert result["sizes"] == ["mini", "tiny"] and result["refused_sizes"] == []
    pairs = {(p["first"], p["second"]): p for p in result["pairs"]}
    assert pairs[(Y, Z)]["decisions"] == {"mini": "first_better", "tiny": "second_better"}
    assert pairs[(Y, Z)]["flipped"] and not pairs[(Y, Z)]["agree"]
    assert pairs[(X, Z)]["decisions"] == {"mini": "first_better", "tiny": "cannot_tell"}
    assert not pairs[(X, Z)]["flipped"] and not pairs[(X, Z)]["agree"]
    assert pairs[(X, Y)]["agree"]  # cannot tell at both sizes
    assert result["flipped"] == 1 and result["agreeing"] == 1
    (tau,) = result["rank_agreement"]
    assert tau["sizes"] == ["mini", "tiny"] and tau["tau"] == pytest.approx(-1 / 3)
    markdown = ladder_markdown(result)
    assert "### Across model sizes: mini -> tiny" in markdown and "**FLIPPED**" in markdown
    assert "1 of 3 pairs decided alike at every size; 1 flipped" in markdown


def test_a_refused_size_is_left_out_and_said() -> None:
    small = comparison({X: 3.0, Y: 3.2}, {(X, Y): "a_better"})
    result = ladder({"mini": small, "tiny": {"accepted": False, "refusals": []}})
    assert result["sizes"] == ["mini"] and result["refused_sizes"] == ["tiny"]
    assert "nothing to line up" in ladder_markdown(result)


def test_kendall_tau_and_its_interval() -> None:
    same = kendall_tau(("a", "b"), [{X: 1.0, Y: 2.0, Z: 3.0}, {X: 5.0, Y: 6.0, Z: 7.0}])
    assert same.tau == pytest.approx(1.0) and same.mixtures == 3
    assert same.interval is not None and same.interval[1] == 1.0 and same.interval[0] < 0
    reversed_ = kendall_tau(("a", "b"), [{X: 1.0, Y: 2.0, Z: 3.0}, {X: 3.0, Y: 2.0, Z: 1.0}])
    assert reversed_.tau == pytest.approx(-1.0)
    assert kendall_tau(("a", "b"), [{X: 1.0}, {X: 2.0}]).tau is None
