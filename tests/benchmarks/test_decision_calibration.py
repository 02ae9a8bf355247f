"""The decisions benchmark's noise model (fitted to runs, then simulated): it recovers the
noise it was fitted to, and its simulated tables report the rates with their intervals."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from benchmarks.decision_calibration import (
    NoiseModel,
    draw_scores,
    fit_noise_model,
    simulate_seed_counts,
    simulate_sweeps,
    wilson,
)
from benchmarks.decisions import to_markdown
from orchestrator.guard.comparison import RunSummary
from tests.support.guard_runs import make_run

DOMAINS = ["code", "docs"]
KNOWN = NoiseModel(
    document_bytes={
        d: list(np.random.default_rng(1).integers(200, 2000, 300).astype(float)) for d in DOMAINS
    },
    run_sd={"code": 0.02, "docs": 0.005},
    document_sd={"code": 3.0, "docs": 1.5},
    effect={"code": 0.03, "docs": -0.01},
    seeds=40,
)


def runs_of(scores: dict[str, dict[str, np.ndarray]]) -> dict[int, RunSummary]:
    """One run per seed of ``scores``, its documents scored at step 10."""
    return {
        s: dataclasses.replace(
            make_run(f"run-{s}"),
            documents={
                10: {
                    d: {"bits": list(bits), "bytes": KNOWN.document_bytes[d]}
                    for d, bits in scores[f"seed-{s}"].items()
                }
            },
        )
        for s in range(len(scores))
    }


def test_the_fit_recovers_the_noise_and_effect_it_was_drawn_from() -> None:
    rng = np.random.default_rng(0)
    a, twin = (runs_of(draw_scores(KNOWN, rng, seeds=KNOWN.seeds)) for _ in range(2))
    b = runs_of(draw_scores(KNOWN, rng, seeds=KNOWN.seeds, effect=KNOWN.effect))
    fitted = fit_noise_model(a, twin, b, domains=DOMAINS)
    assert fitted.seeds == KNOWN.seeds
    for d in DOMAINS:
        assert fitted.document_sd[d] == pytest.approx(KNOWN.document_sd[d], rel=0.1)
        assert fitted.run_sd[d] == pytest.approx(KNOWN.run_sd[d], rel=0.35)
        assert fitted.effect[d] == pytest.approx(KNOWN.effect[d], abs=0.01)


def test_a_fit_needs_three_seeds() -> None:
    rng = np.random.default_rng(0)
    two = runs_of(draw_scores(KNOWN, rng, seeds=2))
    with pytest.raises(ValueError, match="3\\+ seeds"):
        fit_noise_model(two, two, two, domains=DOMAINS)


def test_the_simulated_tables_report_rates_with_intervals() -> None:
    small = dataclasses.replace(
        KNOWN, document_bytes={d: n[:16] for d, n in KNOWN.document_bytes.items()}
    )
    rows = simulate_seed_counts(small, comparisons=30)
    assert [row["seeds"] for row in rows] == [2, 3, 4, 6, 8]
    for row in rows:
        lo, hi = row["aa_now"]["interval"]
        assert row["aa_now"]["trials"] == 30 and lo <= row["aa_now"]["rate"] <= hi
    assert rows[-1]["ab_now"]["rate"] > rows[0]["ab_now"]["rate"]  # more seeds, more power
    sweeps = simulate_sweeps(small, sweeps=20)
    assert sweeps["pairs"] == 15 and sweeps["holm"]["count"] <= sweeps["none"]["count"]
    assert 0 <= sweeps["before"]["rate"] <= 1
    report = {
        "machine": "m",
        "date": "d",
        "runs": 6,
        "seed_pool": 2,
        "steps": 4,
        "wall_s": 1.0,
        "rows": [],
        "noise_model": small.to_json(),
        "simulated": rows,
        "simulated_training_noise": simulate_seed_counts(
            small.with_training_noise(3.0), comparisons=10
        ),
        "simulated_sweeps": sweeps,
    }
    markdown = to_markdown(
        {
            **report,
            "rows": [
                {
                    "seeds": 1,
                    "comparisons": 1,
                    "aa_false_decisions": 0,
                    "aa_false_decision_rate": 0.0,
                    "aa_intervals_excluding_zero": 0,
                    "ab_power": 0.0,
                    "ab_wrong_direction": 0.0,
                    "ab_mean_difference": 0.0,
                    "ab_median_interval_width": 0.0,
                }
            ],
        }
    )
    assert "| seeds | A/A false decisions now [95% interval] |" in markdown
    assert "Sweeps of 6 equal mixtures (15 pairs, 3 seeds, 20 sweeps)" in markdown


def test_wilson_interval() -> None:
    lo, hi = wilson(5, 100)
    assert lo == pytest.approx(0.0215, abs=5e-4) and hi == pytest.approx(0.1118, abs=5e-4)
