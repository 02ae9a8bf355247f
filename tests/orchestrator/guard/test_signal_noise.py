"""Signal and noise per yardstick (orchestrator.guard.signal_noise), and each yardstick's own
noise in the decisions made on it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.guard import DecisionPolicy, compare, comparison_markdown
from orchestrator.guard.signal_noise import DECIDED_ON, yardstick_noise
from tests.support.guard_runs import DOMAINS, MIX_A, MIX_B, seeded

MIXES = [
    MIX_A,
    MIX_B,
    {"code": 0.1, "docs": 0.8, "i18n": 0.1},
    {"code": 0.3, "docs": 0.4, "i18n": 0.3},
    {"code": 0.05, "docs": 0.5, "i18n": 0.45},
]
NOISY = 4
"""The variant that gives code a 5% share: its code score is far noisier than the others'."""
SEED_SHIFT = (0.001, -0.0012, 0.0004)
"""How much a seed moves a quiet variant's score (bits per byte)."""


def _runs() -> list:
    runs = []
    for v, mixture in enumerate(MIXES):
        for seed in range(3):
            scores = {
                "code": 1.0
                + 0.05 * v
                + (0.3 * (1, -1, 0.5)[seed] if v == NOISY else SEED_SHIFT[seed]),
                "docs": 0.8 + 0.04 * v + SEED_SHIFT[(seed + 1) % 3],
                "i18n": 1.2 + 0.03 * v + SEED_SHIFT[(seed + 2) % 3],
            }
            scores["aggregate"] = sum(scores.values()) / 3
            runs.append(seeded(f"v{v}-s{seed}", mixture, seed, 1.0, evals={10: scores}))
    return runs


def test_the_report_gives_each_yardsticks_signal_noise_and_names_the_noisy_variant() -> None:
    result = compare(_runs())
    assert result.accepted, result.refusals
    payload = json.loads(json.dumps(result.to_json()))
    by_name = {y["yardstick"]: y for y in payload["signal_noise"]}
    assert list(by_name) == [DECIDED_ON, *(f"bpb:{d}" for d in DOMAINS)]
    noisy = next(row.variant for row in result.rows if row.mixture.startswith("code=0.050"))
    code = by_name["bpb:code"]
    assert list(code["noisier"]) == [noisy]
    quiet = [sd for v, sd in code["seed_sd"].items() if v != noisy]
    assert code["seed_sd"][noisy] > 50 * max(quiet)
    assert code["signal_to_noise"] < 1  # its noise swamps the variants' differences
    docs = by_name["bpb:docs"]
    assert docs["noisier"] == {} and docs["signal_to_noise"] > 10
    text = comparison_markdown(result)
    assert "### Signal and noise per yardstick" in text
    (code_line,) = [line for line in text.splitlines() if line.startswith("| bpb:code |")]
    assert f"`{noisy}` (p = " in code_line


def test_a_decision_on_one_dataset_uses_that_datasets_own_seed_spreads() -> None:
    """Decided on code, the noisy variant's pairs take their own (wide) seed term; decided on
    docs, where every variant is equally quiet, they pool the table."""
    runs = _runs()
    on_code = compare(runs, DecisionPolicy(decide_on=["code"]))
    on_docs = compare(runs, DecisionPolicy(decide_on=["docs"]))
    noisy = next(r.variant for r in on_code.rows if r.mixture.startswith("code=0.050"))
    noisy_pairs = [p for p in on_code.pairs if noisy in (p["a"], p["b"])]
    assert noisy_pairs and all("pair's own spreads" in p["method"] for p in noisy_pairs)
    assert all(p["decision"] == "cannot_tell" for p in noisy_pairs)
    assert all("pooled over 5 variants" in p["method"] for p in on_docs.pairs)


def test_one_seed_measures_no_noise_and_the_report_leaves_the_table_out() -> None:
    runs = [r for r in _runs() if r.name.endswith("-s0")]
    result = compare(runs)
    assert all(y.noise is None and y.ratio is None for y in result.yardsticks)
    assert "Signal and noise" not in comparison_markdown(result)


@settings(max_examples=40, deadline=None)
@given(
    means=st.lists(st.floats(-1, 1), min_size=2, max_size=6),
    seeds=st.integers(2, 5),
    sd=st.floats(0.001, 1),
    seed=st.integers(0, 2**16),
)
def test_signal_is_the_spread_of_means_and_noise_that_of_seeds(
    means: list[float], seeds: int, sd: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    values = np.array(means)[:, None] + sd * rng.standard_normal((len(means), seeds))
    table = {
        f"v{i}": {f"s{j}": float(values[i, j]) for j in range(seeds)} for i in range(len(means))
    }
    y = yardstick_noise("x", table)
    assert y.signal == pytest.approx(float(np.std(values.mean(1), ddof=1)))
    assert y.noise == pytest.approx(math.sqrt(float(np.mean(values.var(1, ddof=1)))))
    assert y.seed_sd["v0"] == pytest.approx(float(values[0].std(ddof=1)))
    shifted = yardstick_noise(
        "x", {v: {s: x + 3.0 for s, x in by.items()} for v, by in table.items()}
    )
    assert (shifted.signal, shifted.noise) == pytest.approx((y.signal, y.noise))
