"""The mix-search benchmark (benchmarks/mix_search/): its truths, strategies, RegMix's data
and its smallest end-to-end configuration (one truth, one seed, 8 runs; no timing)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from benchmarks.mix_search import regmix
from benchmarks.mix_search.cli import main
from benchmarks.mix_search.confirmation import confirm, names_a_winner
from benchmarks.mix_search.strategies import (
    grid_points,
    regmix_draws,
    repetition_bounds,
)
from benchmarks.mix_search.truths import DOMAINS, flat_truth, make_truth


@pytest.mark.parametrize("seed", range(5))
def test_a_truths_optimum_beats_every_sampled_mixture(seed: int) -> None:
    truth = make_truth(seed)
    mixture, value = truth.optimum
    assert mixture.min() >= 0 and mixture.sum() == pytest.approx(1.0)
    rng = np.random.default_rng(99)
    samples = np.vstack([rng.dirichlet(np.ones(6), 50_000), rng.dirichlet(np.full(6, 0.2), 50_000)])
    assert value <= truth.objective(samples).min() + 1e-9
    assert truth.achievable_gain > 0.05  # the mixture matters: a search has something to find
    assert truth.regret(mixture) == pytest.approx(0.0)


def test_the_small_domain_is_penalised_past_its_cap_and_capped_by_the_bounds() -> None:
    truth = make_truth(0)
    small = truth.small
    past = np.full(6, (1 - truth.cap - 0.2) / 5)
    past[small] = truth.cap + 0.2
    law = truth.constants + truth.scales * np.exp(truth.effects @ past)
    assert truth.scores(past[None])[0] - law == pytest.approx(np.full(6, truth.penalty * 0.04))
    assert repetition_bounds(truth).arrays(DOMAINS)[1][small] == pytest.approx(truth.cap)
    assert truth.effects[small, small] <= -4.0  # scarce text is the most useful to its own


def test_the_flat_truth_has_no_gain_and_only_noise() -> None:
    truth = flat_truth()
    rng = np.random.default_rng(0)
    mixtures = rng.dirichlet(np.ones(6), 100)
    assert truth.achievable_gain == 0.0 and truth.share_of_gain(mixtures[0]) is None
    assert np.ptp(truth.objective(mixtures)) == 0.0
    observed = truth.observe(mixtures, rng).mean(axis=1)
    assert np.ptp(observed) > 0  # runs differ by noise alone
    noise = truth.noise_sd(np.vstack([np.full(6, 1 / 6), np.eye(6)[0]]))
    assert noise[0] == pytest.approx(truth.sigma0) and noise[1] > 4 * truth.sigma0


def test_the_grid_and_regmix_sampler_give_what_they_promise() -> None:
    assert len(grid_points(16)) == 16 and len(grid_points(64)) == 64
    assert not (grid_points(64)[:, 0] == 0).all()  # strided, not the first 64 (d1 = 0)
    truth = make_truth(1)
    upper = repetition_bounds(truth).arrays(DOMAINS)[1]
    prior = np.array(list(truth.prior.values()))
    draws = regmix_draws(prior, upper, 1000, np.random.default_rng(0))
    assert draws.shape == (1000, 6) and (draws <= upper).all()
    assert np.allclose(draws.sum(axis=1), 1.0)


def test_the_guard_decides_in_the_right_direction_and_nothing_for_one_mixture() -> None:
    rng = np.random.default_rng(0)
    quiet = replace(make_truth(0), sigma0=0.001)
    single = np.eye(6)[int(np.argmax(quiet.effects.diagonal()))]
    better, same = confirm(
        quiet, quiet.optimum[0], {"one domain": single, "itself": quiet.optimum[0]}, rng
    )
    (worse,) = confirm(quiet, single, {"optimum": quiet.optimum[0]}, rng)
    assert better.true_difference < -0.2 and better.decision == "a_better"
    assert worse.true_difference > 0.2 and worse.decision == "b_better"
    assert better.interval[0] < better.true_difference < better.interval[1]
    assert same.decision == "same_mixture" and not names_a_winner([same])
    flat = flat_truth()
    (tie,) = confirm(flat, np.full(6, 1 / 6), {"one domain": np.eye(6)[1]}, rng)
    assert tie.true_difference == 0.0 and tie.interval[0] < 0 < tie.interval[1]


def test_regmix_reading_returns_every_run() -> None:
    train, test = regmix.read_runs()
    assert (len(train.ids), len(test.ids)) == (512, 256)
    assert len(train.domains) == 17 and train.domains == test.domains
    assert np.allclose(train.mixtures.sum(axis=1), 1.0)
    assert train.targets == (regmix.TARGET,)


def test_the_smallest_configuration_runs_and_reports(tmp_path: Path) -> None:
    code = main(
        [
            *("--truths", "1", "--repetitions", "1", "--budgets", "8"),
            *("--confirmation-budget", "8", "--flat-searches", "1", "--flat-budget", "8"),
            *("--reconfirmations", "2", "--regmix-runs"),
            *("--workers", "1", "--results-dir", str(tmp_path)),
        ]
    )
    assert code == 0
    report = json.loads((tmp_path / "mix_search.json").read_text())
    searches = report["searches"]
    assert {s["strategy"] for s in searches} == {"zephon", "random", "grid", "regmix"}
    assert all(s["regret"] >= -1e-9 and s["best_observed_regret"] >= -1e-9 for s in searches)
    assert {(s["strategy"], s["budget"]) for s in searches if not s["flat"]} >= {
        ("zephon", 8),
        ("random", 8),
        ("random", 128),
    }
    assert all(s["runs"] == s["budget"] for s in searches)
    flat = [s for s in searches if s["flat"]]
    assert len(flat) == 1 and flat[0]["regret"] == pytest.approx(0.0)
    assert [c["comparator"] for c in flat[0]["confirmations"]] == [
        "initial design's best",
        "token-proportional",
    ]
    again = flat[0]["reconfirmations"]
    assert again["sweeps"] == 2 and 0 <= again["naming_a_winner"] <= 2
    truths = {t["name"]: t for t in report["truths"]}
    assert truths["flat"]["achievable_gain"] == 0.0 and truths["truth-0"]["achievable_gain"] > 0
    assert [g["met"] for g in report["goals"]] == [None, None, None]  # nothing to judge on
    markdown = (tmp_path / "mix_search.md").read_text()
    assert "| zephon | 0." in markdown and "## Confirmation by the guard" in markdown
