"""Tiers and the best variant from decided pairs (orchestrator.guard.decisions.tiers)."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.guard.decisions import (
    A_BETTER,
    CANNOT_TELL,
    PairDecision,
    best,
    decide_all,
    decide_pair,
    tiers,
)
from tests.support.decision_scores import DATASETS


def _three(third_factor: float, second_factor: float) -> tuple[list[str], dict, dict]:
    """v1, v2 = v1 * second_factor (+ small noise), v3 = v1 * third_factor."""
    rng = np.random.default_rng(5)
    docs = 100
    doc_bytes = {d: rng.integers(200, 2001, size=docs) for d in DATASETS}
    v1 = {
        f"s{s}": {d: doc_bytes[d] * rng.uniform(0.6, 1.4, size=docs) for d in DATASETS}
        for s in range(3)
    }
    v2 = {
        s: {d: x * second_factor * rng.uniform(0.99, 1.01, size=docs) for d, x in ds.items()}
        for s, ds in v1.items()
    }
    v3 = {s: {d: x * third_factor for d, x in ds.items()} for s, ds in v1.items()}
    return ["v1", "v2", "v3"], {"v1": v1, "v2": v2, "v3": v3}, doc_bytes


def test_tiers_and_best() -> None:
    order, scores, doc_bytes = _three(third_factor=1.5, second_factor=1.0)
    pairs = decide_all(order, scores, doc_bytes=doc_bytes)
    assert [(p.a, p.b) for p in pairs] == [("v1", "v2"), ("v1", "v3"), ("v2", "v3")]
    assert [p.decision for p in pairs] == [CANNOT_TELL, A_BETTER, A_BETTER]
    assert tiers(order, pairs) == {"v1": 1, "v2": 1, "v3": 2}
    assert best(order, pairs) == {"v1": False, "v2": False, "v3": False}
    # Pairs may come in either orientation.
    flipped = [
        decide_pair(p.b, p.a, a_scores=scores[p.b], b_scores=scores[p.a], doc_bytes=doc_bytes)
        for p in pairs
    ]
    assert tiers(order, flipped) == {"v1": 1, "v2": 1, "v3": 2}

    order, scores, doc_bytes = _three(third_factor=1.5, second_factor=1.2)
    pairs = decide_all(order, scores, doc_bytes=doc_bytes)
    assert [p.decision for p in pairs] == [A_BETTER, A_BETTER, A_BETTER]
    assert best(order, pairs) == {"v1": True, "v2": False, "v3": False}
    assert tiers(order, pairs) == {"v1": 1, "v2": 2, "v3": 3}


def test_tiers_compare_with_the_first_of_the_tier() -> None:
    # v2 cannot be told from v1, v3 cannot be told from v2 but is worse than v1: v3 starts tier 2.
    def pair(a: str, b: str, decision: str) -> PairDecision:
        return PairDecision(
            a,
            b,
            difference=0.0,
            interval=(0.0, 0.0),
            decision=decision,
            method="",
            standard_error=0.0,
            degrees_of_freedom=1.0,
            seeds=1,
            documents=2,
            detectable=0.0,
        )

    pairs = [
        pair("v1", "v2", CANNOT_TELL),
        pair("v1", "v3", A_BETTER),
        pair("v2", "v3", CANNOT_TELL),
    ]
    assert tiers(["v1", "v2", "v3"], pairs) == {"v1": 1, "v2": 1, "v3": 2}
    with pytest.raises(ValueError, match="no decision between"):
        tiers(["v1", "v2", "v4"], pairs)
