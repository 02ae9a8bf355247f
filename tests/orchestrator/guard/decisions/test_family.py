"""The family of a comparison's pairs (orchestrator.guard.decisions.family): Holm and
Benjamini-Hochberg, and each pair's seed term."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.guard.decisions import (
    CANNOT_TELL,
    Family,
    adjusted_p_values,
    decide_all,
    decide_pair,
)
from tests.support.decision_scores import equal_variants


def test_holm_and_bh_adjust_as_defined() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    assert adjusted_p_values(p, Family.HOLM) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert adjusted_p_values(p, Family.BH) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert adjusted_p_values(p, Family.NONE) == p


def test_six_equal_mixtures_name_a_winner_rarely_under_holm() -> None:
    """15 pairs decided each at 5% name some winner far more often than 5%; under Holm,
    at most about 5% of such sweeps name one."""
    rng = np.random.default_rng(6)
    trials = 300
    named = dict.fromkeys(Family, 0)
    for _ in range(trials):
        doc_bytes, scores = equal_variants(rng, variants=6, seeds=3, run_sd=0.02)
        order = sorted(scores)
        for family in Family:
            pairs = decide_all(order, scores, doc_bytes=doc_bytes, family=family)
            named[family] += any(p.decision != CANNOT_TELL for p in pairs)
    assert named[Family.HOLM] / trials <= 0.07, named
    assert named[Family.BH] <= named[Family.NONE] and named[Family.HOLM] <= named[Family.BH]
    assert named[Family.NONE] / trials >= 0.12, named


def test_three_variants_take_each_pairs_own_spreads() -> None:
    """Three variants under two seeds: one other variant leaves no spread of the rest to test
    a pair against, so each pair's seed term is its own two variants' spreads, and equal
    mixtures are still decided at most at the stated rate; two variants alone are one pair."""
    rng = np.random.default_rng(12)
    trials = 700
    decided = 0
    for _ in range(trials):
        doc_bytes, scores = equal_variants(rng, variants=3, seeds=2, run_sd=0.05)
        pairs = decide_all(sorted(scores), scores, doc_bytes=doc_bytes, family=Family.NONE)
        decided += sum(p.decision != CANNOT_TELL for p in pairs)
    assert decided / (3 * trials) <= 0.065, decided / (3 * trials)
    assert "df from the pair's own spreads," in pairs[0].method
    doc_bytes, scores = equal_variants(rng, variants=2, seeds=2, run_sd=0.05)
    (alone,) = decide_all(["v0", "v1"], scores, doc_bytes=doc_bytes, family=Family.NONE)
    assert alone == decide_pair(
        "v0", "v1", a_scores=scores["v0"], b_scores=scores["v1"], doc_bytes=doc_bytes
    )
