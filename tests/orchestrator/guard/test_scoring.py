"""Scoring an accepted comparison (orchestrator.guard.scoring): rows, means, spreads and the
decided pairs."""

from __future__ import annotations

import dataclasses
import json

import pytest

from orchestrator.guard import DecisionPolicy, check, compare, comparison_markdown, mixture_label
from orchestrator.guard.decisions import Design
from tests.support.guard_runs import (
    DOMAINS,
    MIX_A,
    MIX_B,
    evals_for,
    four_runs,
    make_run,
    paired_runs,
    seeded,
)


def test_accepted_rows_means_and_spread() -> None:
    runs = four_runs()
    result = compare(runs)
    assert result.accepted, result.refusals
    assert result.refusals == [] and check(runs) == []
    assert result.eval_step == 10
    assert result.domains == list(DOMAINS)
    assert [row.mixture for row in result.rows] == [
        mixture_label(MIX_B),
        mixture_label(MIX_A),
    ]
    best, second = result.rows
    assert best.rank == 1 and second.rank == 2
    assert mixture_label(MIX_A) == "code=0.500 docs=0.300 i18n=0.200"
    assert best.variant == runs[2].variant[:12] and len(best.variant) == 12
    assert best.replicates == 2 and best.runs == ["b-1", "b-2"]
    assert best.dp_sizes == "1,2" and second.dp_sizes == "1,2"
    # means: base + 0.1*i - 0.1 at step 10
    assert second.bpb["code"] == pytest.approx(1.01 - 0.1)
    assert second.bpb["i18n"] == pytest.approx(1.01 + 0.2 - 0.1)
    assert second.aggregate_bpb == pytest.approx(1.01 + 0.1 - 0.1)
    assert second.aggregate_range == pytest.approx(0.02)
    assert second.aggregate_std == pytest.approx(0.02 / 2**0.5)
    assert best.aggregate_range == pytest.approx(0.0)
    assert best.aggregate_std == pytest.approx(0.0)
    assert result.common_steps == 10

    payload = result.to_json()
    assert json.loads(json.dumps(payload)) == payload
    assert payload["verdict"] == "accepted" and len(payload["rows"]) == 2

    assert payload["recipe_fingerprint"] == runs[0].recipe_fingerprint
    (pair,) = payload["pairs"]
    assert (pair["a"], pair["b"]) == (best.variant, second.variant)
    assert pair["difference"] == pytest.approx(best.aggregate_bpb - second.aggregate_bpb)
    lo, hi = pair["interval"]
    assert lo < pair["difference"] < hi < 0  # the documents alone would separate them...
    assert pair["decision"] == "cannot_tell"  # ...but one seed leaves training noise unmeasured
    assert "1 seed: training noise not measured, so not decided" in pair["method"]
    assert not best.best and (best.tier, second.tier) == (1, 1)
    assert 0 < best.aggregate_se < 0.1  # the held-out sample's error
    assert payload["best"] is None and payload["smallest_detectable"] is None


def test_one_replicate_has_zero_spread() -> None:
    result = compare([make_run("a", MIX_A), make_run("b", MIX_B, base=1.5)])
    assert result.accepted
    assert all(r.aggregate_std == 0.0 and r.aggregate_range == 0.0 for r in result.rows)
    assert [r.runs for r in result.rows] == [["a"], ["b"]]
    assert "no variant had two replicates" in comparison_markdown(result)


def test_paired_seeds_are_accepted_and_decided_over_seeds() -> None:
    # B is better than A under both seeds; the seed moves both alike (a shared seed effect).
    runs = paired_runs((1.00, 1.05), (0.80, 0.86))
    result = compare(runs)
    assert result.accepted, result.refusals
    assert len(result.seeds) == 2 and "data 1, shuffle 1, init 1" in result.seeds
    best = result.rows[0]
    assert best.mixture == mixture_label(MIX_B) and best.seeds == 2
    assert best.replicates == 2 and best.runs == ["b-s0", "b-s1"]
    assert best.variant != runs[2].variant[:12]  # one id across the seeds, not seed 0's
    (pair,) = result.pairs
    assert pair["difference"] == pytest.approx(((0.8 - 1.0) + (0.86 - 1.05)) / 2)
    assert pair["seeds"] == 2 and "2 seeds" in pair["method"]
    # two seeds: t with about one degree of freedom, so a wide interval
    assert pair["interval"][1] - pair["interval"][0] > 0.1
    md = comparison_markdown(result)
    assert "2 seed blocks, each run by every variant" in md


def test_threshold_turns_a_small_decided_difference_into_cannot_tell() -> None:
    runs = paired_runs((1.00, 1.05), (0.80, 0.86))
    fixed = DecisionPolicy(design=Design.FIXED)  # one look at 2 seeds, fixed in advance
    decided = compare(runs, fixed).pairs[0]
    assert decided["decision"] == "a_better"
    (pair,) = compare(
        runs, dataclasses.replace(fixed, threshold=abs(decided["difference"]) + 0.01)
    ).pairs
    assert pair["decision"] == "cannot_tell"
    assert pair["detectable"] == pytest.approx(
        decided["detectable"] + abs(decided["difference"]) + 0.01
    )
    with pytest.raises(ValueError, match="threshold"):
        DecisionPolicy(threshold=-1)


def test_decide_on_some_domains_ranks_and_decides_their_mean() -> None:
    # A is worse on code and docs (base 1.0 vs 0.9) but much better on i18n
    a_evals = evals_for(1.0)
    a_evals[10]["i18n"] -= 1.0
    a_evals[10]["aggregate"] = sum(a_evals[10][d] for d in DOMAINS) / 3
    runs = [
        *(seeded(f"a-s{seed}", MIX_A, seed, 1.0, evals=a_evals) for seed in (0, 1)),
        *(seeded(f"b-s{seed}", MIX_B, seed, 0.9) for seed in (0, 1)),
    ]
    assert compare(runs).rows[0].mixture == mixture_label(MIX_A)
    result = compare(runs, DecisionPolicy(decide_on=["code", "docs"]))
    assert result.decided_on == ["code", "docs"]
    best = result.rows[0]
    assert best.mixture == mixture_label(MIX_B)
    assert best.aggregate_bpb == pytest.approx((0.9 - 0.1 + 1.0 - 0.1) / 2)
    assert result.pairs[0]["decision"] == "a_better"
    assert "mean over code, docs only" in comparison_markdown(result)
    with pytest.raises(ValueError, match=r"cannot decide on held-out domain\(s\) \['web'\]"):
        compare(runs, DecisionPolicy(decide_on=["web"]))


def test_dp_range_is_within_a_seed_and_the_seeds_spread_is_apart() -> None:
    runs = paired_runs((1.0, 1.3), (0.8, 1.1))
    twins = [
        seeded(f"{r.name}-dp2", r.mixture, s % 2, b + 0.001, dp=[2])
        for r, s, b in zip(runs, range(4), (1.0, 1.3, 0.8, 1.1), strict=True)
    ]
    twins = [dataclasses.replace(t, digests=r.digests) for t, r in zip(twins, runs, strict=True)]
    result = compare([*runs, *twins])
    assert result.accepted, result.refusals
    for row in result.rows:
        assert row.replicates == 4 and row.dp_sizes == "1,2"
        assert row.dp_range == pytest.approx(0.001)  # dp 1 vs dp 2 under one seed
        assert row.aggregate_range == pytest.approx(0.301)  # the seeds apart
