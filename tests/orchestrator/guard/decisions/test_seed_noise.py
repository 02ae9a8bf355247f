"""Training noise per variant (orchestrator.guard.decisions.seed_noise): a pair's seed term
from its own variants, pooled only where the pair is not noisier than the rest."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from orchestrator.guard.decisions import (
    CANNOT_TELL,
    Family,
    LookPlan,
    SeedNoise,
    SeedSource,
    SeedTerm,
    decide_all,
    decide_pair,
)
from orchestrator.guard.decisions.seed_noise import (
    GATE_LEVEL,
    GATE_LEVEL_DEFAULT,
    residual_mean_square,
)
from tests.support.decision_scores import equal_variants

QUIET, NOISY = 0.002, 0.2
"""Training noise, bits per byte per dataset; with the documents' own noise (equal_variants)
the noisy variants' aggregates spread about 8 times more than the quiet ones'."""


def _noisy_pair_among_quiet(rng: np.random.Generator, *, variants: int, seeds: int) -> tuple:
    return equal_variants(
        rng,
        variants=variants,
        seeds=seeds,
        run_sd=QUIET,
        run_sds=[NOISY, NOISY] + [QUIET] * (variants - 2),
    )


def test_a_noisy_equal_pair_among_quiet_variants_keeps_its_own_spread() -> None:
    """Two equal variants 8x noisier than four others: pooled over the table, their interval
    is far too short and they are decided again and again; from their own spreads they are
    decided at most at about the stated 5%."""
    rng = np.random.default_rng(56)
    trials = 300
    own = pooled = kept = 0
    for _ in range(trials):
        doc_bytes, scores = _noisy_pair_among_quiet(rng, variants=6, seeds=3)
        noise = SeedNoise.of(sorted(scores), scores, doc_bytes)
        term = noise.pair_term("v0", "v1")
        kept += term.source is SeedSource.VARIANTS
        variance, df = residual_mean_square(noise.table)  # the rule before issue 56, always
        everyone = SeedTerm(2 * variance, df, SeedSource.POOLED, 6)
        for term_used, tally in ((term, "own"), (everyone, "pooled")):
            pair = decide_pair(
                "v0",
                "v1",
                a_scores=scores["v0"],
                b_scores=scores["v1"],
                doc_bytes=doc_bytes,
                seed_term=term_used,
            )
            if pair.decision != CANNOT_TELL:
                own, pooled = (own + 1, pooled) if tally == "own" else (own, pooled + 1)
    assert kept / trials >= 0.9, kept
    assert own / trials <= 0.07, own / trials
    assert pooled / trials >= 0.15, pooled / trials


def test_variants_alike_in_noise_pool_their_spreads() -> None:
    """Six variants equally noisy under 3 seeds: most pairs pool the table's (6-1)(3-1) = 10
    degrees of freedom, and the equal pairs stay at the stated rate."""
    rng = np.random.default_rng(7)
    trials = 150
    sources: list[SeedSource] = []
    decided = 0
    for _ in range(trials):
        doc_bytes, scores = equal_variants(rng, variants=6, seeds=3, run_sd=0.02)
        pairs = decide_all(sorted(scores), scores, doc_bytes=doc_bytes, family=Family.NONE)
        noise = SeedNoise.of(sorted(scores), scores, doc_bytes)
        sources.append(noise.pair_term("v0", "v1").source)
        decided += sum(p.decision != CANNOT_TELL for p in pairs)
    share = sources.count(SeedSource.POOLED) / trials
    assert share >= 0.75, share
    assert decided / (15 * trials) <= 0.065
    term = noise.pair_term("v2", "v3")
    if term.source is SeedSource.POOLED:
        assert term.degrees_of_freedom == 10 and term.variants == 6


def test_two_variants_are_one_pair_and_three_have_no_rest_to_test() -> None:
    rng = np.random.default_rng(3)
    doc_bytes, scores = equal_variants(rng, variants=3, seeds=4, run_sd=0.02)
    assert SeedNoise.of(["v0", "v1"], scores, doc_bytes).pair_term("v0", "v1") is None
    alone = decide_pair(
        "v0", "v1", a_scores=scores["v0"], b_scores=scores["v1"], doc_bytes=doc_bytes
    )
    assert "4 seeds: the seed term on 3 df," in alone.method
    three = SeedNoise.of(sorted(scores), scores, doc_bytes).pair_term("v0", "v2")
    assert three is not None and three.source is SeedSource.VARIANTS
    assert three.gate_p_value is None and 3 <= three.degrees_of_freedom <= 6
    one_seed = {v: {"s0": scores[v]["s0"]} for v in scores}
    assert SeedNoise.of(sorted(scores), one_seed, doc_bytes).pair_term("v0", "v1") is None


tables = arrays(
    np.int64,
    st.tuples(st.integers(3, 8), st.integers(2, 5)),
    elements=st.integers(-30, 30),
).map(lambda t: t / 10)
"""Scores on a 0.1 grid: a spread is 0 or well above rounding, so moving a table by
constants cannot turn one into the other."""


@settings(max_examples=60, deadline=None)
@given(
    table=tables,
    shift=st.floats(-5, 5),
    scale=st.floats(0.1, 10),
)
def test_a_pair_term_is_symmetric_and_ignores_seed_and_variant_effects(
    table: np.ndarray, shift: float, scale: float
) -> None:
    """The term of (a, b) is that of (b, a); adding a constant to a seed's column (its effect on
    every variant) or to a variant's row changes nothing; scaling the scores scales it."""
    names = tuple(f"v{i}" for i in range(table.shape[0]))
    noise = SeedNoise(names, table)
    moved = table + shift * np.arange(table.shape[1])[None, :] + np.arange(table.shape[0])[:, None]
    for a, b in [(names[0], names[1]), (names[-1], names[0])]:
        if a == b:
            continue
        term = noise.pair_term(a, b)
        assert term is not None
        gate = GATE_LEVEL.get(table.shape[1], GATE_LEVEL_DEFAULT)
        # a p-value at the gate's level is decided by rounding: either side is right
        assume(term.gate_p_value is None or abs(term.gate_p_value - gate) > 1e-9)
        flipped = noise.pair_term(b, a)
        assert flipped is not None
        assert (flipped.variance, flipped.source) == pytest.approx((term.variance, term.source))
        shifted = SeedNoise(names, moved).pair_term(a, b)
        assert shifted is not None and shifted.source is term.source
        assert shifted.variance == pytest.approx(term.variance, rel=1e-6, abs=1e-6)
        scaled = SeedNoise(names, table * scale).pair_term(a, b)
        assert scaled is not None
        assert scaled.variance == pytest.approx(term.variance * scale**2, rel=1e-6, abs=1e-6)


def test_a_variant_much_noisier_than_the_rest_is_named() -> None:
    rng = np.random.default_rng(11)
    table = rng.normal(0, 0.01, size=(6, 4))
    table[2] = rng.normal(0, 0.3, size=4)
    names = tuple(f"v{i}" for i in range(6))
    noisier = SeedNoise(names, table).noisier()
    assert list(noisier) == ["v2"] and noisier["v2"] < 0.05


def test_a_noisier_pairs_next_step_names_more_seeds() -> None:
    """The next step plans with the pair's own seed term: the same observed difference with
    a seed term 4x larger needs more seeds, or cannot be reached within the budget."""
    rng = np.random.default_rng(5)
    doc_bytes, scores = equal_variants(rng, variants=2, seeds=4, run_sd=0.01)
    shifted = {
        s: {d: x + 0.045 * doc_bytes[d] for d, x in v.items()} for s, v in scores["v1"].items()
    }
    plan = LookPlan()
    named = []
    for variance in (6e-4, 24e-4):
        pair = decide_pair(
            "a",
            "b",
            a_scores=scores["v0"],
            b_scores=shifted,
            doc_bytes=doc_bytes,
            confidence=1 - plan.level(4),
            plan=plan,
            seed_term=SeedTerm(variance, 9.0, SeedSource.POOLED, 4),
        )
        assert pair.decision == CANNOT_TELL and pair.next_step is not None
        named.append(pair.next_step.seeds)
    quiet, noisy = named
    assert quiet is not None and (noisy is None or noisy > quiet), named


def test_equally_noisy_variants_are_rarely_named_noisier() -> None:
    """Every variant is tested on every yardstick of a report: corrected for the number of
    variants, equally noisy ones are named in at most about 5% of comparisons."""
    rng = np.random.default_rng(9)
    trials = 2000
    named = 0
    for _ in range(trials):
        k = int(rng.integers(3, 8))
        table = rng.normal(size=(k, int(rng.integers(2, 5))))
        named += bool(SeedNoise(tuple(f"v{i}" for i in range(k)), table).noisier())
    assert named / trials <= 0.06, named / trials
