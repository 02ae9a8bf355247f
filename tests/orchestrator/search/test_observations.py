"""Reading observations from tables: what a fit learns from, and the errors that say why not."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from orchestrator.errors import SearchError
from orchestrator.search import Observations, read_tables
from orchestrator.search.observations import read_mixtures

REGMIX = Path(__file__).resolve().parents[2] / "data" / "regmix"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_two_tables_give_normalised_mixtures_and_the_mean_of_the_targets(tmp_path: Path) -> None:
    mixtures = write(tmp_path / "m.csv", "id,web,code\nr1,3,1\nr2,1,1\nr3,1,3\n")
    scores = write(tmp_path / "s.csv", "id,x,y,z\nr2,1.0,3.0,9\nr1,2.0,4.0,9\nr3,5,5,9\n")
    observations = read_tables(mixtures, scores, ["x", "y"])
    assert observations.domains == ("code", "web")  # sorted
    assert observations.ids == ("r1", "r2", "r3")
    np.testing.assert_allclose(observations.mixtures[0], [0.25, 0.75])
    np.testing.assert_allclose(observations.objective, [3.0, 2.0, 5.0])  # matched by id


def test_replicates_are_grouped_and_their_noise_pooled(tmp_path: Path) -> None:
    mixtures = write(tmp_path / "m.csv", "id,a,b\n1,1,1\n2,0.5,0.5\n3,1,0\n4,2,0\n5,0,1\n")
    scores = write(tmp_path / "s.csv", "id,loss\n1,1.0\n2,3.0\n3,5.0\n4,7.0\n5,1\n")
    observations = read_tables(mixtures, scores, ["loss"])
    assert sorted(len(g) for g in observations.mixture_groups()) == [1, 2, 2]
    assert observations.replicate_noise() == pytest.approx(np.sqrt(2.0))  # (2 + 2) / 2 dof
    best, mean = observations.best_observed()
    assert mean == 1.0 and best.tolist() == [0.0, 1.0]


@pytest.mark.parametrize(
    ("mixtures", "scores", "targets", "says"),
    [
        ("id,a,b\n1,1,0\n", "id,loss\n2,1\n", ["loss"], "are not in"),
        ("id,a,b\n1,1,0\n", "id,loss\n1,1\n", ["acc"], "no column ['acc']"),
        ("id,a,b\n1,x,0\n", "id,loss\n1,1\n", ["loss"], "'x' is not a number"),
        ("id,a,b\n1,-1,0\n", "id,loss\n1,1\n", ["loss"], "weights >= 0"),
        ("id,a,b\n1,1,0\n1,0,1\n", "id,loss\n1,1\n", ["loss"], "appears twice"),
        ("id,a,b\n1,1,0\n", "id,loss\n1,nan\n", ["loss"], "not a finite number"),
        ("id,a,b\n1,1\n", "id,loss\n1,1\n", ["loss"], "2 cells, the header has 3"),
    ],
)
def test_bad_tables_are_refused_with_what_is_wrong(
    tmp_path: Path, mixtures: str, scores: str, targets: list[str], says: str
) -> None:
    with pytest.raises(SearchError) as refused:
        read_tables(write(tmp_path / "m.csv", mixtures), write(tmp_path / "s.csv", scores), targets)
    assert says in str(refused.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SearchError, match=r"cannot read .*absent\.csv"):
        read_tables(tmp_path / "absent.csv", tmp_path / "absent2.csv", ["loss"])


def test_mixtures_to_predict_follow_the_fits_domains(tmp_path: Path) -> None:
    path = write(tmp_path / "p.csv", "id,b\nq1,1\n")
    ids, mixtures = read_mixtures(path, ("a", "b"))
    assert ids == ["q1"] and mixtures.tolist() == [[0.0, 1.0]]
    with pytest.raises(SearchError, match=r"columns \['zz'\] are not domains"):
        read_mixtures(write(tmp_path / "q.csv", "id,zz\nq1,1\n"), ("a", "b"))


def test_regmix_published_tables_read_whole() -> None:
    observations = read_tables(
        REGMIX / "train_mixture_1m.csv",
        REGMIX / "train_pile_loss_1m.csv",
        ["metric/the_pile_pile_cc_val_loss"],
    )
    assert observations.mixtures.shape == (512, 17)
    np.testing.assert_allclose(observations.mixtures.sum(axis=1), 1.0)


def test_seed_blocks_are_taken_off_before_noise_is_measured_or_a_fit_sees_the_scores() -> None:
    rng = np.random.default_rng(0)
    mixtures = np.repeat(rng.dirichlet(np.ones(3), 6), 2, axis=0)
    truth = mixtures[:, 0]  # the first domain's share is what matters
    shifted = truth + np.tile([0.0, 0.5], 6) + rng.normal(0, 0.01, 12)  # seed 1: +0.5 everywhere
    blocked = Observations(
        ids=tuple(map(str, range(12))),
        domains=("a", "b", "c"),
        mixtures=mixtures,
        targets=("loss",),
        scores=shifted[:, None],
        blocks=tuple(np.tile(["seed0", "seed1"], 6)),
    )
    unblocked = replace(blocked, blocks=None)
    assert unblocked.replicate_noise() > 0.3  # the seed offset looks like noise
    assert blocked.replicate_noise() < 0.03
    assert blocked.mixture_effect_p_value() < 0.001 < unblocked.mixture_effect_p_value()
    adjusted = blocked.without_block_effects()
    pairs = adjusted.objective.reshape(6, 2)
    assert np.abs(pairs[:, 0] - pairs[:, 1]).max() < 0.05  # the offset is gone
    assert adjusted.objective.mean() == pytest.approx(blocked.objective.mean())  # level kept


def test_zephon_runs_of_two_sizes_are_checked_size_by_size_and_carry_their_size() -> None:
    """A ladder's runs: the guard accepts each size's runs on their own (their recipes
    differ between sizes), and every observation carries its size's parameter count."""
    from orchestrator.search.run_observations import observations_by_size
    from tests.support.guard_runs import four_runs, make_recipe

    small = [dataclasses.replace(r, parameters=150_000) for r in four_runs()]
    large_recipe = make_recipe(**{"model_spec.model.dim": 128})
    large = [
        dataclasses.replace(
            r,
            run_id=f"{r.run_id}-large",
            name=f"{r.name}-large",
            parameters=900_000,
            recipe=large_recipe,
            recipe_fingerprint="large",
        )
        for r in four_runs()
    ]
    observations = observations_by_size([*small, *large], None)
    assert observations.sizes == [150_000.0, 900_000.0]
    assert list(observations.params) == [150_000.0] * 4 + [900_000.0] * 4
    with pytest.raises(SearchError, match="of 150,000 parameters"):
        tampered = dataclasses.replace(small[0], contract={**small[0].contract, "seed": 9})
        observations_by_size([tampered, *small[1:], *large], None)
    unsized = observations_by_size(four_runs(), None)
    assert unsized.params is None


def test_runs_varying_a_dataset_version_are_not_fitted() -> None:
    """fit and propose model mixtures: variants of a dataset version are refused, saying so."""
    from orchestrator.search.run_observations import observations_by_size
    from tests.support.guard_runs import four_runs

    versions = [
        dataclasses.replace(r, varied={"data.datasets.web": {"fingerprint": f"v{i % 2}"}})
        for i, r in enumerate(four_runs())
    ]
    with pytest.raises(SearchError, match=r"differ in data.datasets.web.*model the mixture alone"):
        observations_by_size(versions, None)
