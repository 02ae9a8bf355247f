"""Fitting: the models learn a known law, validation is out of sample, the choice is by it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest
from scipy.stats import spearmanr

from orchestrator.errors import SearchError
from orchestrator.search import Observations, fit, read_tables
from orchestrator.search.models import MODELS, MixtureModel
from orchestrator.search.validation import cross_validate
from tests.support.search_truths import observed, true_objective


@pytest.mark.parametrize("name", ["mixing_law", "gaussian_process"])
def test_a_model_fitted_on_a_known_law_ranks_unseen_mixtures(name: str) -> None:
    training = observed(40, seed=1, noise=0.002)
    fitted = MODELS[name]().fit(training, seed=0)
    unseen = np.random.default_rng(9).dirichlet(np.ones(4), 200)
    correlation = spearmanr(fitted.predict(unseen), true_objective(unseen)).statistic
    assert correlation > 0.9


def test_lightgbm_waits_for_enough_runs() -> None:
    model = MODELS["lightgbm"]()
    assert "needs 32 runs" in (model.unfit_reason(observed(20, seed=0)) or "")
    assert model.unfit_reason(observed(40, seed=0)) is None


@dataclass
class Memoriser(MixtureModel):
    """Predicts a seen mixture's own score, the mean elsewhere: perfect in sample, and
    perfect out of sample too if a mixture's replicates leak across folds."""

    name = "memoriser"
    seen: dict[tuple[float, ...], float] | None = None
    mean: float = 0.0

    def unfit_reason(self, observations: Observations) -> str | None:
        return None

    def fit(self, observations: Observations, seed: int) -> Memoriser:
        seen = {
            tuple(m.round(6)): float(s)
            for m, s in zip(observations.mixtures, observations.objective, strict=True)
        }
        return Memoriser(seen, float(observations.objective.mean()))

    def predict(self, mixtures: np.ndarray) -> np.ndarray:
        assert self.seen is not None
        return np.array([self.seen.get(tuple(m.round(6)), self.mean) for m in mixtures])


def test_validation_is_out_of_sample_and_keeps_replicates_together() -> None:
    replicated = observed(30, seed=2, noise=0.05, replicates=2, flat=True)
    score = cross_validate(Memoriser(), replicated, folds=5, seed=0)
    # Held out, a mixture gets the training mean: no rank information unless replicates leak
    # across folds, when the memoriser would rank them perfectly.
    assert score.cv_spearman is not None and score.cv_spearman < 0.5
    assert score.folds == 5 and score.cv_regret is not None and score.cv_regret >= 0


def test_fit_reports_every_model_and_chooses_by_the_out_of_sample_figures() -> None:
    result = fit(observed(24, seed=3, noise=0.002), folds=4, refits=4, seed=0)
    report = result.to_json()
    names = [m["name"] for m in report["models"]]
    assert names == [n for n, model in MODELS.items() if not model.scale_aware]  # one size
    lightgbm = report["models"][names.index("lightgbm")]
    assert lightgbm["cv_spearman"] is None and "needs 32 runs" in lightgbm["note"]
    fitted = [m for m in report["models"] if m["cv_spearman"] is not None]
    best = max(fitted, key=lambda m: (round(m["cv_spearman"], 2), -m["cv_regret"]))
    assert report["model"] == best["name"]
    assert report["runs"] == 24 and report["mixtures"] == 24


def test_fit_is_deterministic_for_a_seed() -> None:
    data = observed(16, seed=4, noise=0.01)
    grid = np.random.default_rng(0).dirichlet(np.ones(4), 5)
    first = fit(data, refits=4, seed=7).predictions(grid)
    again = fit(data, refits=4, seed=7).predictions(grid)
    assert first == again


def test_too_few_mixtures_and_bad_requests_are_refused_before_fitting() -> None:
    with pytest.raises(SearchError, match="3 distinct mixtures observed"):
        fit(observed(3, seed=0))
    with pytest.raises(SearchError, match="unknown model 'svm'"):
        fit(observed(8, seed=0), models=["svm"])
    with pytest.raises(SearchError, match="folds=1"):
        fit(observed(8, seed=0), folds=1)


# -- across model sizes ------------------------------------------------------------------------


def regmix_two_sizes(small_runs: int, large_runs: int) -> tuple[Observations, Observations]:
    """RegMix's 1M runs (the first ``small_runs`` training runs) and ``large_runs`` of its
    60M runs (``params`` set), and the other 60M runs held out."""
    from benchmarks.mix_search.regmix import DATA, TARGET, read_runs

    train, _ = read_runs()
    # RegMix trained the same 256 test mixtures at 1M and 60M: one mixtures file for both
    large = read_tables(DATA / "test_mixture_1m.csv", DATA / "test_pile_loss_60m.csv", [TARGET])
    order = np.random.default_rng(0).permutation(len(large.ids))
    small = dataclasses.replace(train.subset(range(small_runs)), params=np.full(small_runs, 1e6))
    chosen = large.subset(order[:large_runs])
    chosen = dataclasses.replace(chosen, params=np.full(large_runs, 6e7))
    return small.concatenate(chosen), large.subset(order[large_runs:])


def test_runs_of_two_sizes_are_fitted_across_sizes_and_predicted_at_the_larger() -> None:
    """RegMix: 64 runs at 1M and 32 at 60M rank the other 224 60M mixtures better than the
    mixing law fitted on the 1M runs alone (measured: 0.950 against 0.941)."""
    observations, held_out = regmix_two_sizes(64, 32)
    result = fit(observations, folds=4, refits=2, seed=0, at_size=6e7)
    assert result.model.name == "scaled_mixing_law"
    assert [m["name"] for m in result.to_json()["models"]] == ["scaled_mixing_law"]
    assert result.to_json()["sizes"] == [1e6, 6e7] and result.to_json()["at_size"] == 6e7
    across = spearmanr(result.predict(held_out.mixtures), held_out.objective).statistic
    small_only = observations.subset(np.flatnonzero(observations.params == 1e6))
    law = MODELS["mixing_law"]().fit(dataclasses.replace(small_only, params=None), 0)
    alone = spearmanr(law.predict(held_out.mixtures), held_out.objective).statistic
    assert across >= 0.945 and across > alone, (across, alone)


def test_sizes_are_refused_where_a_model_cannot_use_them() -> None:
    observations, _ = regmix_two_sizes(64, 32)
    with pytest.raises(SearchError, match="fit one model size"):
        fit(observations, models=["mixing_law"])
    one_size = dataclasses.replace(observations, params=None)
    with pytest.raises(SearchError, match="needs runs at two or more sizes"):
        fit(one_size, at_size=1e9)


def test_intervals_cover_held_out_runs_at_a_size_observed_and_none_is_claimed_beyond_it() -> None:
    """RegMix: fitted on 64 runs at 1M and 32 at 60M, the 90% intervals at 60M hold the
    other 224 runs' losses at their rate or above; at 1B, past every size
    observed, only the ranking is predicted: no interval, and the fit says why."""
    observations, held_out = regmix_two_sizes(64, 32)
    at_observed = fit(observations, folds=4, refits=16, seed=0, at_size=6e7)
    predictions = at_observed.predictions(held_out.mixtures)
    truths = held_out.objective
    inside = [p.interval[0] <= y <= p.interval[1] for p, y in zip(predictions, truths, strict=True)]
    assert 0.88 <= np.mean(inside) <= 0.99, np.mean(inside)
    assert not at_observed.to_json()["extrapolated"]
    beyond = fit(observations, folds=4, refits=2, seed=0, at_size=1e9)
    assert all(p.interval is None for p in beyond.predictions(held_out.mixtures))
    summary = beyond.to_json()
    assert summary["extrapolated"] and "only the ranking" in summary["level_note"]
