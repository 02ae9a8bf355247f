"""The sweep's confirmation of a search's pick, simulated: the recommended mixture and its
comparators each trained under 3 seeds, decided by the guard's ``decide_pair`` at the
sweep's confidence (``orchestrator.search.confirmation``: 97.5% each for two comparisons).

Every confirmation draws fresh seeds (none of the search's runs is reused); each run scores
16 held-out documents per domain, with seed, run, document and per-run noise.

Design: docs/design/benchmarks_mix_search.md
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.mix_search.truths import TARGETS, Truth
from orchestrator.guard.decisions import A_BETTER, B_BETTER, Scores, decide_pair
from orchestrator.search.confirmation import confirmation_confidence

DOCUMENTS = 16
"""Held-out documents per held-out domain."""
SEEDS = 3
"""Seeds each mixture of a confirmation is trained under."""
DOCUMENT_BYTES = np.random.default_rng(0).integers(500, 4001, (len(TARGETS), DOCUMENTS))
HARDNESS_SD = 0.3
DOCUMENT_NOISE_SD = 0.05
SAME_MIXTURE = "same_mixture"
"""The outcome when the recommended mixture is the comparator: nothing to train or decide."""


@dataclass(frozen=True)
class Confirmation:
    """One decision between a search's recommended mixture and a comparator."""

    comparator: str
    decision: str
    """:data:`A_BETTER` (the recommended is better), :data:`B_BETTER`, ``cannot_tell`` or
    :data:`SAME_MIXTURE`."""
    true_difference: float
    """True objective of the recommended minus the comparator's (negative: it is better)."""
    difference: float | None = None
    """The guard's estimate of the same difference (None: same mixture)."""
    interval: tuple[float, float] | None = None
    confidence: float | None = None
    """The confidence the pair was decided at (None: same mixture)."""

    @property
    def names_a_winner(self) -> bool:
        """Whether the guard decided either way."""
        return self.decision in (A_BETTER, B_BETTER)

    def to_json(self) -> dict[str, object]:
        """The confirmation as plain data."""
        return {
            "comparator": self.comparator,
            "decision": self.decision,
            "true_difference": self.true_difference,
            "difference": self.difference,
            "interval": list(self.interval) if self.interval else None,
            "confidence": self.confidence,
        }


def document_bytes() -> dict[str, np.ndarray]:
    """Bytes of every held-out document, by held-out domain (``decide_pair``'s
    ``doc_bytes``)."""
    return {target: DOCUMENT_BYTES[d].astype(float) for d, target in enumerate(TARGETS)}


def _draw_hardness() -> np.ndarray:
    return np.random.default_rng(1).normal(0.0, HARDNESS_SD, DOCUMENT_BYTES.shape)


def held_out_bits(
    truth: Truth, mixture: np.ndarray, seed_offsets: np.ndarray, rng: np.random.Generator
) -> Scores:
    """Bits of every held-out document for ``mixture`` trained under each seed (one per
    entry of ``seed_offsets``), in the shape ``decide_pair`` takes."""
    scores: Scores = {}
    hardness = _draw_hardness()
    for seed, offset in enumerate(seed_offsets):
        per_domain = (
            truth.scores(mixture[None])[0] + offset + truth.run_noise(mixture[None], rng)[0]
        )
        noise = rng.normal(0.0, DOCUMENT_NOISE_SD, DOCUMENT_BYTES.shape)
        bits = DOCUMENT_BYTES * (per_domain[:, None] + hardness + noise)
        scores[f"seed-{seed}"] = {target: bits[d] for d, target in enumerate(TARGETS)}
    return scores


def confirm(
    truth: Truth,
    recommended: np.ndarray,
    comparators: dict[str, np.ndarray],
    rng: np.random.Generator,
) -> list[Confirmation]:
    """``recommended`` against each of ``comparators``, as the searching sweep confirms:
    the distinct mixtures (arms) each trained once under the same :data:`SEEDS` fresh
    seeds, the recommended mixture's runs shared by its comparisons, each pair decided by
    the guard at ``confirmation_confidence(k)`` for ``k`` comparisons (Bonferroni; ``a`` is
    the recommended mixture). A comparator equal to the recommended mixture is
    :data:`SAME_MIXTURE`; one equal to an earlier comparator shares its arm."""
    arms: list[np.ndarray] = [recommended]
    for comparator in comparators.values():
        if not any(_is_same_mix(comparator, arm) for arm in arms):
            arms.append(comparator)
    confidence = confirmation_confidence(len(arms) - 1) if len(arms) > 1 else None
    seed_offsets = rng.normal(0.0, truth.sigma0, SEEDS)
    bits = [held_out_bits(truth, arm, seed_offsets, rng) for arm in arms]
    confirmations = []
    for name, comparator in comparators.items():
        true_difference = float(
            truth.objective(recommended[None])[0] - truth.objective(comparator[None])[0]
        )
        arm = next(i for i, other in enumerate(arms) if _is_same_mix(comparator, other))
        if arm == 0 or confidence is None:
            confirmations.append(Confirmation(name, SAME_MIXTURE, true_difference))
            continue
        decision = decide_pair(
            "recommended",
            name,
            a_scores=bits[0],
            b_scores=bits[arm],
            doc_bytes=document_bytes(),
            confidence=confidence,
        )
        confirmations.append(
            Confirmation(
                name,
                decision.decision,
                true_difference,
                decision.difference,
                decision.interval,
                confidence,
            )
        )
    return confirmations


def _is_same_mix(mixture: np.ndarray, other: np.ndarray) -> bool:
    """Whether two mixtures are one canonical mix (shares at 3 decimals)."""
    return bool(np.allclose(mixture, other, atol=5e-4))


def names_a_winner(confirmations: list[Confirmation]) -> bool:
    """Whether any comparison of one confirmation sweep was decided either way."""
    return any(c.names_a_winner for c in confirmations)
