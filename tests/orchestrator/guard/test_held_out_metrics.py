"""Deciding pairs on a held-out metric other than bits per byte (``--decide-on accuracy``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from orchestrator.evaluation import DocumentScores, MetricScores, held_out_metric
from orchestrator.guard import DecisionPolicy, compare
from orchestrator.guard.comparison import RunSummary
from orchestrator.guard.held_out_metrics import metric_choice
from tests.support.guard_runs import DOMAINS, MIX_A, MIX_B, seeded

STEP = 10
DOCS = 120


def with_accuracy(run: RunSummary, accuracy: float, seed: int) -> RunSummary:
    """``run`` with per-document next-token hits on every domain: documents of 20-60 tokens
    of shared difficulty, each token right with probability ``accuracy`` plus it."""
    shared = np.random.default_rng(0)
    tokens = shared.integers(20, 60, DOCS).astype(float)
    difficulty = shared.uniform(-0.2, 0.2, DOCS)
    luck = np.random.default_rng(seed * 100 + len(run.name))
    documents = {
        domain: DocumentScores(
            [
                float(luck.binomial(int(n), np.clip(accuracy + d, 0, 1)))
                for n, d in zip(tokens, difficulty, strict=True)
            ],
            list(tokens),
        )
        for domain in DOMAINS
    }
    return dataclasses.replace(
        run, held_out={STEP: {"accuracy": MetricScores.of_documents(documents)}}
    )


def runs_with_accuracy(a: float, b: float) -> list[RunSummary]:
    return [
        with_accuracy(seeded(f"{name}-s{seed}", mixture, seed, 1.0), accuracy, seed)
        for name, mixture, accuracy in (("a", MIX_A, a), ("b", MIX_B, b))
        for seed in (0, 1, 2)
    ]


def test_a_clearly_higher_accuracy_decides_for_its_variant() -> None:
    result = compare(runs_with_accuracy(0.40, 0.60), DecisionPolicy(decide_on=["accuracy"]))
    assert result.accepted
    assert result.decided_on == [f"accuracy:{d}" for d in DOMAINS]
    assert "next-token accuracy" in result.score and "higher accuracy is better" in result.score
    (pair,) = result.pairs
    winner = pair["a"] if pair["decision"] == "a_better" else pair["b"]
    assert pair["decision"] != "cannot_tell" and winner == result.rows[0].variant
    assert result.rows[0].runs == ["b-s0", "b-s1", "b-s2"]
    # the score is minus the accuracy, token-weighted per domain
    assert -result.rows[0].aggregate_bpb == pytest.approx(0.60, abs=0.03)


def test_equal_accuracies_cannot_be_told_apart_on_one_domain() -> None:
    result = compare(runs_with_accuracy(0.5, 0.5), DecisionPolicy(decide_on=["accuracy:code"]))
    (pair,) = result.pairs
    assert result.decided_on == ["accuracy:code"] and pair["decision"] == "cannot_tell"


def test_choices_are_parsed_and_bad_ones_refused_saying_why() -> None:
    domains = list(DOMAINS)
    assert metric_choice(None, domains) == (held_out_metric("bpb"), domains)
    assert metric_choice(["docs", "bpb:code"], domains) == (
        held_out_metric("bpb"),
        ["code", "docs"],
    )
    assert metric_choice(["accuracy"], domains)[1] == domains
    with pytest.raises(ValueError, match="one held-out metric at a time"):
        metric_choice(["accuracy:code", "docs"], domains)
    with pytest.raises(ValueError, match=r"held-out domain\(s\) \['web'\]"):
        metric_choice(["accuracy:web"], domains)
    old = runs_with_accuracy(0.5, 0.6)
    old[0] = dataclasses.replace(old[0], held_out={})  # evaluated before accuracy existed
    with pytest.raises(ValueError, match=r"run a-s0 has no held-out accuracy .* train it again"):
        compare(old, DecisionPolicy(decide_on=["accuracy"]))
