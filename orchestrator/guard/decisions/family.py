"""Deciding every pair of a comparison at once, corrected for their number (:class:`Family`)."""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum

import numpy as np

from orchestrator.guard.decisions.looks import LookPlan
from orchestrator.guard.decisions.pair import CANNOT_TELL, PairDecision, check_options, decide_pair
from orchestrator.guard.decisions.seed_noise import SeedNoise
from orchestrator.guard.decisions.variance import Scores


class Family(StrEnum):
    """How the decisions of one comparison's pairs are corrected for their number."""

    HOLM = "holm"
    """Holm's step-down: the chance that any pair is decided wrongly is at most 1 - confidence."""
    BH = "bh"
    """Benjamini-Hochberg: the expected share of wrong decisions among those made is at most
    1 - confidence."""
    NONE = "none"
    """Each pair decided at ``confidence`` on its own."""


def adjusted_p_values(p_values: list[float], family: Family) -> list[float]:
    """``p_values`` of one family of pairs corrected under ``family`` (same order)."""
    k = len(p_values)
    if family is Family.NONE or k == 0:
        return list(p_values)
    order = sorted(range(k), key=lambda i: p_values[i])
    adjusted = [1.0] * k
    if family is Family.HOLM:  # step-down: running maximum of (k - rank) p
        running = 0.0
        for rank, i in enumerate(order):
            running = max(running, min(1.0, (k - rank) * p_values[i]))
            adjusted[i] = running
    else:  # Benjamini-Hochberg step-up: running minimum of k p / rank from the largest
        running = 1.0
        for rank in range(k - 1, -1, -1):
            i = order[rank]
            running = min(running, k * p_values[i] / (rank + 1))
            adjusted[i] = running
    return adjusted


def decide_all(
    order: list[str],
    scores: dict[str, Scores],
    *,
    doc_bytes: dict[str, np.ndarray],
    threshold: float = 0.0,
    confidence: float = 0.95,
    family: Family = Family.HOLM,
    plan: LookPlan | None = None,
) -> list[PairDecision]:
    """Every pair ``(order[i], order[j])`` for ``i < j``, in that order.

    ``scores`` maps each variant of ``order`` to its :data:`Scores`; the options are those
    of :func:`decide_pair`. Each pair's interval is at ``confidence`` on its own, its seed
    term from its own variants' spreads, pooled over the variants only where the pair is
    not noisier than the rest (:meth:`SeedNoise.pair_term`); its decision follows its
    p-value corrected for the number of pairs under ``family`` (Holm: no pair is decided
    wrongly with more than ``1 - confidence`` chance).
    """
    check_options(threshold, confidence)
    missing = [v for v in order if v not in scores]
    if missing:
        raise ValueError(f"no scores for variants {missing}")
    if len(set(order)) != len(order):
        raise ValueError(f"variants repeat in the order {order}")
    noise = SeedNoise.of(order, scores, doc_bytes)
    pair_count = len(order) * (len(order) - 1) // 2
    if plan is not None and family is not Family.NONE and pair_count > 1:
        # the advice of one pair among k: Bonferroni's share of each level (Holm's first)
        plan = replace(plan, alpha=plan.alpha / pair_count)
    pairs = [
        decide_pair(
            order[i],
            order[j],
            a_scores=scores[order[i]],
            b_scores=scores[order[j]],
            doc_bytes=doc_bytes,
            threshold=threshold,
            confidence=confidence,
            seed_term=noise.pair_term(order[i], order[j]),
            plan=plan,
        )
        for i in range(len(order))
        for j in range(i + 1, len(order))
    ]
    if family is Family.NONE:
        return pairs
    adjusted = adjusted_p_values([p.p_value for p in pairs], family)
    return [
        replace(
            p,
            adjusted_p_value=q,
            decision=p.decision if q < 1 - confidence else CANNOT_TELL,
        )
        for p, q in zip(pairs, adjusted, strict=True)
    ]
