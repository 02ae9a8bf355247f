"""Repeated looks (orchestrator.guard.decisions.looks): the sequential design's budget, an
agent adding seeds under it, and the next step named for a pair that cannot be told."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from orchestrator.guard.decisions import (
    CANNOT_TELL,
    Design,
    LookPlan,
    decide_pair,
)
from orchestrator.guard.decisions.looks import spending_level
from tests.support.decision_scores import equal_variants


@settings(max_examples=12, deadline=None)
@given(
    alpha=st.sampled_from([0.001, 0.01, 0.05, 0.1, 0.2]),
    max_seeds=st.integers(2, 12),
    beyond=st.integers(1, 20),
)
def test_every_look_decides_at_least_at_the_power_spending_level(
    alpha: float, max_seeds: int, beyond: int
) -> None:
    plan = LookPlan(Design.SEQUENTIAL, alpha, max_seeds)
    levels = [plan.level(n) for n in range(1, max_seeds + beyond + 1)]
    assert levels[0] == 0  # one seed decides nothing
    spending = [
        spending_level(n, alpha=alpha, max_seeds=max_seeds) for n in range(1, max_seeds + 1)
    ]
    assert sum(spending) == pytest.approx(alpha)
    assert all(level >= s for level, s in zip(levels, spending, strict=False))
    assert levels[1:max_seeds] == sorted(levels[1:max_seeds])  # never less at a later look
    assert levels[max_seeds:] == [0] * beyond  # past the maximum nothing is left
    fixed = LookPlan(Design.FIXED, alpha, max_seeds)
    assert [fixed.level(n) for n in (1, 2, max_seeds + beyond)] == [0, alpha, alpha]


@pytest.mark.parametrize(("alpha", "max_seeds"), [(0.05, 8), (0.05, 4), (0.1, 12)])
def test_the_whole_sequence_of_nested_looks_holds_alpha(alpha: float, max_seeds: int) -> None:
    """Checked on other draws than the floor was calibrated on: equal pairs' per-seed
    differences, every look from 2 seeds up, paired t at each look's level."""
    plan = LookPlan(Design.SEQUENTIAL, alpha, max_seeds)
    assert plan.level(2) > spending_level(2, alpha=alpha, max_seeds=max_seeds)  # a real floor
    rng = np.random.default_rng(1234)
    trials = 20_000
    x = rng.standard_normal((trials, max_seeds))
    decided = np.zeros(trials, dtype=bool)
    for n in range(2, max_seeds + 1):
        t = x[:, :n].mean(1) / (x[:, :n].std(1, ddof=1) / np.sqrt(n))
        decided |= 2 * stats.t.sf(np.abs(t), n - 1) < plan.level(n)
    share = decided.mean()
    assert share <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / trials), share
    assert share >= 0.7 * alpha, share  # the union bound's slack is spent on early looks


def test_a_plan_of_fewer_than_two_seeds_is_refused() -> None:
    with pytest.raises(ValueError, match="max_seeds"):
        LookPlan(max_seeds=1)


def _first(scores: dict, seeds: int) -> dict:
    return {s: scores[s] for s in sorted(scores)[:seeds]}


def _agent_decides(a: dict, b: dict, doc_bytes: dict, plan: LookPlan) -> bool:
    """An agent comparing at 2 seeds, adding one per look until it decides or reaches 8."""
    for seeds in range(2, 9):
        level = plan.level(seeds)
        if level > 0:
            pair = decide_pair(
                "a",
                "b",
                a_scores=_first(a, seeds),
                b_scores=_first(b, seeds),
                doc_bytes=doc_bytes,
                confidence=1 - level,
            )
            if pair.decision != CANNOT_TELL:
                return True
    return False


def test_an_agent_adding_seeds_decides_equal_pairs_at_most_5_percent_under_the_sequence() -> None:
    """400 equal pairs whose training noise dominates: deciding at 5% at every look decides
    far more than 5% of them; the sequential design stays within its budget."""
    rng = np.random.default_rng(48)
    every_look = LookPlan(Design.FIXED, 0.05)
    sequential = LookPlan(Design.SEQUENTIAL, 0.05)
    decided = {"every look at 5%": 0, "sequential": 0}
    for _ in range(400):
        doc_bytes, scores = equal_variants(rng, variants=2, seeds=8, run_sd=0.02)
        a, b = scores["v0"], scores["v1"]
        decided["every look at 5%"] += _agent_decides(a, b, doc_bytes, every_look)
        decided["sequential"] += _agent_decides(a, b, doc_bytes, sequential)
    assert decided["every look at 5%"] > 0.10 * 400, decided
    assert decided["sequential"] <= 0.05 * 400, decided


def _planted(rng: np.random.Generator, effect: float, seeds: int) -> tuple:
    doc_bytes, scores = equal_variants(rng, variants=2, seeds=seeds, run_sd=0.01)
    shifted = {
        s: {d: x + effect * doc_bytes[d] for d, x in v.items()} for s, v in scores["v1"].items()
    }
    return doc_bytes, scores["v0"], shifted


def test_the_next_step_names_more_seeds_for_a_smaller_difference_and_stops_past_the_budget() -> (
    None
):
    plan = LookPlan()
    named = {}
    for effect in (0.08, 0.05, 0.01):
        doc_bytes, a, b = _planted(np.random.default_rng(7), effect, seeds=4)
        pair = decide_pair(
            "a", "b", a_scores=a, b_scores=b, doc_bytes=doc_bytes, confidence=1 - plan.level(4),
            plan=plan, target=effect,
        )  # fmt: skip
        assert pair.decision == CANNOT_TELL and pair.next_step is not None
        assert pair.next_step.powered
        named[effect] = pair.next_step.seeds
    assert 4 < named[0.08] < named[0.05] <= 8, named  # a smaller difference needs more
    assert named[0.01] is None  # beyond what 8 seeds can see: stop
    # At 3 seeds the spread rests on 2 df: no promise, one more seed to measure it first.
    doc_bytes, a, b = _planted(np.random.default_rng(7), 0.05, seeds=3)
    early = decide_pair("a", "b", a_scores=a, b_scores=b, doc_bytes=doc_bytes, plan=plan)
    assert (early.next_step.seeds, early.next_step.powered) == (4, False)
    within = decide_pair(
        "a", "b", a_scores=a, b_scores=b, doc_bytes=doc_bytes, threshold=0.1, plan=plan
    )
    assert within.next_step.seeds is None and "within the threshold" in within.next_step.reason
