"""The numbers a decision is built from (orchestrator.guard.decisions.variance)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.guard.decisions import aggregate, sampling_error


def test_aggregate_is_the_mean_bits_per_byte() -> None:
    bits = {"code": np.array([10.0, 20.0]), "docs": np.array([3.0, 3.0, 6.0])}
    doc_bytes = {"code": np.array([10, 20]), "docs": np.array([4, 4, 4])}
    assert aggregate(bits, doc_bytes) == pytest.approx((30 / 30 + 12 / 12) / 2)
    bits["docs"] = np.array([6.0, 6.0, 12.0])
    assert aggregate(bits, doc_bytes) == pytest.approx((1.0 + 2.0) / 2)


def test_sampling_error_is_the_ratio_estimators_over_documents() -> None:
    rng = np.random.default_rng(3)
    n = rng.integers(100, 1000, size=12).astype(np.float64)
    bits = n * 2.0 + rng.normal(0, 40, size=12)
    ratio = bits.sum() / n.sum()
    want = math.sqrt(12 / 11 * np.sum((bits - ratio * n) ** 2) / n.sum() ** 2)
    assert sampling_error({"s": {"d": bits}}, {"d": n}) == pytest.approx(want)
    # bits proportional to bytes: every document agrees, nothing to sample
    assert sampling_error({"s": {"d": n * 1.7}}, {"d": n}) == pytest.approx(0.0, abs=1e-12)
    # two seeds: the seed-averaged bits are what is sampled
    twice = {"s0": {"d": bits - 5.0}, "s1": {"d": bits + 5.0}}
    assert sampling_error(twice, {"d": n}) == pytest.approx(want)
