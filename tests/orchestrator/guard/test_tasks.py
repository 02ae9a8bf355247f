"""Deciding pairs on a downstream task: items paired across variants, blocked by seed."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from orchestrator.guard import DecisionPolicy, compare
from orchestrator.guard.comparison import RunSummary
from orchestrator.guard.tasks import task_choice
from tests.support.guard_runs import MIX_A, MIX_B, seeded

STEP = 10
ITEMS = 200


def with_items(run: RunSummary, accuracy: float, seed: int, higher: bool = True) -> RunSummary:
    """``run`` with a multiple-choice task whose items are right with probability
    ``accuracy`` (item difficulty shared by every run, as on a real task), and a perplexity
    task with per-item log-likelihoods."""
    difficulty = np.random.default_rng(0).uniform(-0.3, 0.3, ITEMS)
    luck = np.random.default_rng(seed * 1000 + len(run.name)).uniform(0, 1, ITEMS)
    correct = (luck < np.clip(accuracy + difficulty, 0, 1)).astype(float)
    items = {
        "mc": {i: {"acc": float(correct[i]), "acc_norm": float(correct[i])} for i in range(ITEMS)},
        "ppl": {
            i: {"loglikelihood": -100.0 * (2 - accuracy), "bytes": 50.0, "bits_per_byte": 0.0}
            for i in range(ITEMS)
        },
    }
    return dataclasses.replace(
        run,
        task_items={STEP: items},
        task_higher_is_better={"mc": {"acc": higher, "acc_norm": higher}},
    )


def runs_with_tasks(a: float, b: float) -> list[RunSummary]:
    return [
        with_items(seeded(f"{name}-s{seed}", mixture, seed, 1.0), accuracy, seed)
        for name, mixture, accuracy in (("a", MIX_A, a), ("b", MIX_B, b))
        for seed in (0, 1, 2)  # two seeds bound the seed term on 1 df: only huge gaps decide
    ]


def test_a_clearly_better_accuracy_is_decided_on_the_task() -> None:
    # one look at 3 seeds, fixed in advance: decided at the full 5%
    result = compare(
        runs_with_tasks(0.45, 0.75), DecisionPolicy(decide_on=["task:mc"], design="fixed")
    )
    assert result.accepted and result.decided_on == ["task:mc:acc"]
    assert result.score.startswith("-acc of task mc")
    best = result.rows[0]
    assert (
        best.mixture.startswith("code 0") or "0.000" in best.mixture or best.runs[0].startswith("b")
    )
    (pair,) = result.pairs
    assert pair["documents"] == ITEMS and pair["seeds"] == 3
    assert pair["decision"] in ("a_better", "b_better")
    winner = pair["a"] if pair["decision"] == "a_better" else pair["b"]
    assert winner == result.rows[0].variant and result.rows[0].runs == ["b-s0", "b-s1", "b-s2"]
    # the score is the negated accuracy: its difference is minus the accuracy difference
    accuracy = {row.runs[0][0]: -row.aggregate_bpb for row in result.rows}
    assert accuracy["b"] - accuracy["a"] == pytest.approx(abs(pair["difference"]))


def test_equal_accuracies_cannot_be_told_apart() -> None:
    result = compare(runs_with_tasks(0.6, 0.6), DecisionPolicy(decide_on=["task:mc:acc_norm"]))
    (pair,) = result.pairs
    assert result.decided_on == ["task:mc:acc_norm"] and pair["decision"] == "cannot_tell"


def test_a_perplexity_task_is_decided_in_bits_per_byte() -> None:
    result = compare(runs_with_tasks(0.45, 0.75), DecisionPolicy(decide_on=["task:ppl"]))
    assert result.decided_on == ["task:ppl:bits_per_byte"]
    scores = {row.runs[0][0]: row.aggregate_bpb for row in result.rows}
    assert scores["a"] == pytest.approx(100.0 * (2 - 0.45) / math.log(2) / 50.0)


def test_what_cannot_be_decided_on_is_refused_saying_why() -> None:
    runs = runs_with_tasks(0.5, 0.5)
    with pytest.raises(ValueError, match=r"has no scores of task 'nope'.*its tasks there: mc, ppl"):
        compare(runs, DecisionPolicy(decide_on=["task:nope"]))
    with pytest.raises(ValueError, match="one task at a time"):
        task_choice(["task:mc", "code"])
    fewer = [dataclasses.replace(runs[0], task_items={STEP: {"mc": {0: {"acc": 1.0}}}}), *runs[1:]]
    with pytest.raises(ValueError, match="scored other items of task 'mc'"):
        compare(fewer, DecisionPolicy(decide_on=["task:mc"]))
