"""Decisions between mixtures: is variant ``a`` better than ``b``, worse, or can we not tell?

A paired statistic over held-out documents (stratified by dataset) and seeds: the
difference of aggregate bits per byte, its interval from a seed term (Student t on the seed
blocks' degrees of freedom) and a document-sampling term net of the within-seed noise the
seed term already holds, combined as Banerjee's interval, and a decision only when the
interval clears the threshold and 2+ seeds measured training noise. :func:`decide_all`
decides every pair under a family-wise correction (:class:`Family`), :func:`tiers` groups
the variants that cannot be told apart, :func:`best` says whether the first beats all
others.

Design (the formulas and why): docs/design/guard.md, "The decision statistic".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import numpy as np

A_BETTER = "a_better"
B_BETTER = "b_better"
CANNOT_TELL = "cannot_tell"

POWER = 0.80
"""Power at which :attr:`PairDecision.detectable` is decided."""
MIN_SEEDS = 2
"""Seeds a decision needs (design doc: one seed leaves training noise unmeasured)."""


class Family(StrEnum):
    """How the decisions of one comparison's pairs are corrected for their number."""

    HOLM = "holm"
    """Holm's step-down: the chance that any pair is decided wrongly is at most 1 - confidence."""
    BH = "bh"
    """Benjamini-Hochberg: the expected share of wrong decisions among those made is at most
    1 - confidence."""
    NONE = "none"
    """Each pair decided at ``confidence`` on its own."""


def family_of(name: str) -> Family:
    """The :class:`Family` named ``name``; ValueError listing the choices otherwise."""
    try:
        return Family(name)
    except ValueError:
        choices = ", ".join(f.value for f in Family)
        raise ValueError(f"family {name!r}: use one of {choices}") from None


Scores = dict[str, dict[str, np.ndarray]]
"""Seed key -> dataset -> bits of each held-out document (float64, documents in one fixed order)."""


@dataclass(frozen=True)
class PairDecision:
    """The decision between variants ``a`` and ``b``, with the numbers behind it."""

    a: str
    b: str
    difference: float
    """``aggregate(a) - aggregate(b)``, mean over seeds (negative: ``a`` is better)."""
    interval: tuple[float, float]
    """Confidence interval of the difference (95% by default)."""
    decision: str
    """:data:`A_BETTER`, :data:`B_BETTER` or :data:`CANNOT_TELL`."""
    method: str
    """Short text naming the method, documents and seeds."""
    standard_error: float
    degrees_of_freedom: float
    seeds: int
    documents: int
    """Total held-out documents over the datasets."""
    detectable: float | None
    """Smallest true ``|difference|`` decided with 80% power (None: one seed, nothing is
    decided)."""
    p_value: float = 1.0
    """The smallest ``1 - confidence`` at which the pair's interval clears the threshold
    (1: not decided at any level)."""
    adjusted_p_value: float | None = None
    """``p_value`` corrected for the comparison's number of pairs (:class:`Family`); the
    decision follows it. None: decided on its own."""

    def to_json(self) -> dict[str, Any]:
        """The decision as plain JSON values (``interval`` as a list ``[lo, hi]``)."""
        return {
            "p_value": self.p_value,
            "adjusted_p_value": self.adjusted_p_value,
            "a": self.a,
            "b": self.b,
            "difference": self.difference,
            "interval": [self.interval[0], self.interval[1]],
            "decision": self.decision,
            "method": self.method,
            "standard_error": self.standard_error,
            "degrees_of_freedom": self.degrees_of_freedom,
            "seeds": self.seeds,
            "documents": self.documents,
            "detectable": self.detectable,
        }


def _bytes_arrays(doc_bytes: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``doc_bytes`` as float64 arrays, checked: 1-D, non-negative, finite, positive total."""
    if not doc_bytes:
        raise ValueError("no datasets: doc_bytes is empty")
    out: dict[str, np.ndarray] = {}
    for d in sorted(doc_bytes):
        n = np.asarray(doc_bytes[d], dtype=np.float64)
        if n.ndim != 1:
            raise ValueError(f"dataset {d!r}: doc_bytes must be 1-D, got shape {n.shape}")
        if not np.all(np.isfinite(n)) or np.any(n < 0):
            raise ValueError(f"dataset {d!r}: doc_bytes must be finite and non-negative")
        if n.sum() <= 0:
            raise ValueError(f"dataset {d!r}: its held-out documents have 0 bytes in total")
        out[d] = n
    return out


def _bits_matrix(
    variant: str, scores: Scores, seeds: list[str], n_bytes: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Dataset -> array (seeds x documents) of ``variant``'s bits, checked against ``n_bytes``."""
    out: dict[str, np.ndarray] = {}
    for s in seeds:
        got = set(scores[s])
        want = set(n_bytes)
        if got != want:
            raise ValueError(
                f"variant {variant!r}, seed {s!r}: datasets {sorted(got)} differ from the "
                f"held-out datasets {sorted(want)} (missing {sorted(want - got)}, "
                f"extra {sorted(got - want)})"
            )
    for d, n in n_bytes.items():
        rows = []
        for s in seeds:
            x = np.asarray(scores[s][d], dtype=np.float64)
            if x.shape != n.shape:
                raise ValueError(
                    f"variant {variant!r}, seed {s!r}, dataset {d!r}: {x.shape[0] if x.ndim == 1 else x.shape} "
                    f"bits for {n.shape[0]} held-out documents"
                )
            if not np.all(np.isfinite(x)):
                raise ValueError(f"variant {variant!r}, seed {s!r}, dataset {d!r}: bits not finite")
            rows.append(x)
        out[d] = np.stack(rows)
    return out


def aggregate(bits: dict[str, np.ndarray], doc_bytes: dict[str, np.ndarray]) -> float:
    """Aggregate bits per byte of one run: ``(1/|D|) sum_d sum_i bits_{d,i} / N_d``.

    ``bits`` and ``doc_bytes`` must have the same datasets, with one value per
    document.
    """
    n_bytes = _bytes_arrays(doc_bytes)
    if set(bits) != set(n_bytes):
        raise ValueError(
            f"datasets {sorted(bits)} of bits differ from {sorted(n_bytes)} of doc_bytes"
        )
    total = 0.0
    for d, n in n_bytes.items():
        x = np.asarray(bits[d], dtype=np.float64)
        if x.shape != n.shape:
            raise ValueError(f"dataset {d!r}: {x.size} bits for {n.size} held-out documents")
        total += float(x.sum() / n.sum())
    return total / len(n_bytes)


def document_variance(
    values: dict[str, np.ndarray], n_bytes: dict[str, np.ndarray]
) -> tuple[float, float]:
    """``(v_doc, df_doc)`` of the design doc for per-document ``values`` (seeds x
    documents per dataset: a pair's differences, or one variant's bits), seed-averaged."""
    k = len(n_bytes)  # |D|
    parts: list[tuple[float, float]] = []  # (v_d, m_d - 1)
    for d, n in n_bytes.items():
        total, m = n.sum(), n.size  # N_d, m_d
        mean = values[d].mean(axis=0)
        e = mean - mean.sum() / total * n
        parts.append((m / (m - 1) * float(np.sum(e**2)) / total**2 / k**2, m - 1))
    v_doc = sum(v for v, _ in parts)
    if v_doc > 0:
        return v_doc, welch_degrees_of_freedom(parts)
    return v_doc, float(sum(df for _, df in parts))


def _within_seed_variance(delta: dict[str, np.ndarray], n_bytes: dict[str, np.ndarray]) -> float:
    """The part of :func:`document_variance`'s ``v_doc`` that is within-seed noise (each
    document's spread over the seeds around its seed-averaged residual, over the seeds): the
    seed term holds it already, so the document term counts only what is left (design doc)."""
    k = len(n_bytes)
    total = 0.0
    for d, n in n_bytes.items():
        x = delta[d]  # seeds x documents
        seeds, m = x.shape
        residual = x - x.sum(axis=1, keepdims=True) / n.sum() * n
        spread = residual - residual.mean(axis=0)
        total += m / (m - 1) * float(np.sum(spread**2)) / (seeds - 1) / seeds / n.sum() ** 2 / k**2
    return total


def sampling_error(scores: Scores, doc_bytes: dict[str, np.ndarray]) -> float:
    """Standard error of one variant's aggregate (mean over its seeds) from the held-out
    sample alone: the document term of the design doc with ``bits`` for ``delta``
    (another draw of held-out documents would move the score by about this much)."""
    n_bytes = _bytes_arrays(doc_bytes)
    seeds = sorted(scores)
    if not seeds or any(n.size < 2 for n in n_bytes.values()):
        raise ValueError("a sampling error needs a seed and 2 held-out documents per dataset")
    return math.sqrt(document_variance(_bits_matrix("variant", scores, seeds, n_bytes), n_bytes)[0])


def check_options(threshold: float, confidence: float) -> None:
    """``ValueError`` unless ``threshold >= 0`` (finite) and ``0 < confidence < 1``."""
    if not (threshold >= 0 and math.isfinite(threshold)):
        raise ValueError(f"threshold must be finite and >= 0, got {threshold}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def welch_degrees_of_freedom(terms: list[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variance terms ``(v, df)``; 0 terms drop out."""
    live = [(v, df) for v, df in terms if v > 0]
    if not live:
        return math.nan
    total = sum(v for v, _ in live)
    # (sum v)^2 / sum(v^2 / df), with each v scaled by the total: tiny variances would
    # underflow when squared (0 / 0)
    return 1.0 / sum((v / total) ** 2 / df for v, df in live)


def _documents_text(m: list[int]) -> str:
    lo, hi = min(m), max(m)
    return f"{lo} documents per dataset" if lo == hi else f"{lo}-{hi} documents per dataset"


def decide_pair(
    a: str,
    b: str,
    a_scores: Scores,
    b_scores: Scores,
    doc_bytes: dict[str, np.ndarray],
    *,
    threshold: float = 0.0,
    confidence: float = 0.95,
    seed_variance: SeedVariance | None = None,
) -> PairDecision:
    """Decide between variants ``a`` and ``b`` (the statistic: docs/design/guard.md).

    ``a_scores`` and ``b_scores`` must have the same seeds and, under every seed,
    the datasets of ``doc_bytes`` with one bits value per document; every
    dataset needs at least 2 held-out documents. ``a`` is decided better only if
    the whole interval lies below ``-threshold``, worse only if above
    ``threshold``. ``seed_variance``: a variant's seed-block variance pooled over more
    variants (:func:`pooled_seed_variance`), instead of this pair's own seeds' spread.
    Raises ``ValueError`` otherwise, naming what is wrong.
    """
    check_options(threshold, confidence)
    n_bytes = _bytes_arrays(doc_bytes)
    small = [d for d, n in n_bytes.items() if n.size < 2]
    if small:
        raise ValueError(
            f"a dataset needs at least 2 held-out documents to measure its spread: "
            f"{', '.join(f'{d!r} has {n_bytes[d].size}' for d in small)}"
        )
    if set(a_scores) != set(b_scores):
        raise ValueError(
            f"{a!r} and {b!r} must be run under the same seeds: "
            f"seeds missing for {a!r}: {sorted(set(b_scores) - set(a_scores))}, "
            f"missing for {b!r}: {sorted(set(a_scores) - set(b_scores))}"
        )
    seeds = sorted(a_scores)
    if not seeds:
        raise ValueError(f"no seeds: {a!r} and {b!r} have no scores")
    bits_a = _bits_matrix(a, a_scores, seeds, n_bytes)
    bits_b = _bits_matrix(b, b_scores, seeds, n_bytes)

    n_seeds = len(seeds)
    delta = {d: bits_a[d] - bits_b[d] for d in n_bytes}  # seeds x documents
    per_seed = sum(delta[d].sum(axis=1) / n.sum() for d, n in n_bytes.items()) / len(n_bytes)
    difference = float(np.mean(per_seed))  # mean over seeds of D_s
    v_doc, df_doc = document_variance(delta, n_bytes)
    docs = [int(n.size) for n in n_bytes.values()]
    if n_seeds >= 2:
        if seed_variance is None:
            seed_term = (float(np.var(per_seed, ddof=1)) / n_seeds, float(n_seeds - 1))
            pooled = ""
        else:
            seed_term = (2 * seed_variance.variance / n_seeds, seed_variance.degrees_of_freedom)
            pooled = f" pooled over {seed_variance.variants} variants"
        terms = [seed_term, (max(v_doc - _within_seed_variance(delta, n_bytes), 0.0), df_doc)]
        method = (
            f"paired over {_documents_text(docs)} (stratified by dataset, blocked by seed) "
            f"and {n_seeds} seeds: the seed term on {seed_term[1]:g} df{pooled}, Banerjee's "
            "interval"
        )
    else:
        terms = [(v_doc, df_doc)]
        method = (
            f"paired t over {_documents_text(docs)} (stratified by dataset); 1 seed: training "
            f"noise not measured, so not decided (run {MIN_SEEDS}+ seeds: replicate_seeds)"
        )
    standard_error = math.sqrt(sum(v for v, _ in terms))
    df = welch_degrees_of_freedom(terms)
    if math.isnan(df):
        df = df_doc
    # Imported here: scipy.stats takes ~0.5 s, which every zephon-run would pay through
    # the Hydra plugin (hydra_plugins/zephon -> sweeps.sweeper) though only a report decides.
    from scipy import stats

    half = _banerjee_half_width(terms, 1 - confidence)
    lo, hi = difference - half, difference + half
    if n_seeds < MIN_SEEDS:
        decision, detectable, p_value = CANNOT_TELL, None, 1.0
    else:
        decision = A_BETTER if hi < -threshold else B_BETTER if lo > threshold else CANNOT_TELL
        detectable = threshold + half + float(stats.t.ppf(POWER, df)) * standard_error
        p_value = _p_value(terms, abs(difference) - threshold)
    return PairDecision(
        a=a,
        b=b,
        difference=difference,
        interval=(lo, hi),
        decision=decision,
        method=method,
        standard_error=standard_error,
        degrees_of_freedom=float(df),
        seeds=n_seeds,
        documents=sum(docs),
        detectable=detectable,
        p_value=p_value,
    )


def _banerjee_half_width(terms: list[tuple[float, float]], alpha: float) -> float:
    """``sqrt(sum t_{df}^2 v)`` over the variance terms ``(v, df)``: Banerjee's interval for a
    sum of independently estimated variances, at least ``1 - alpha`` coverage whatever their
    ratio (Welch-Satterthwaite's single t is short when a few-df term dominates)."""
    from scipy.special import stdtrit  # Student t quantiles, ~100x faster than stats.t.ppf

    return math.sqrt(sum(float(stdtrit(df, 1 - alpha / 2)) ** 2 * v for v, df in terms if v > 0))


def _p_value(terms: list[tuple[float, float]], margin: float) -> float:
    """The smallest ``alpha`` whose :func:`_banerjee_half_width` is below ``margin`` (the
    difference's distance beyond the threshold); 1 if it never is."""
    if margin <= 0:
        return 1.0
    if _banerjee_half_width(terms, 1.0 - 1e-12) >= margin:
        return 1.0
    if _banerjee_half_width(terms, 1e-15) < margin:
        return 1e-15
    from scipy.optimize import brentq

    return float(
        math.exp(
            brentq(
                lambda log_alpha: _banerjee_half_width(terms, math.exp(log_alpha)) - margin,
                math.log(1e-15),
                math.log(1.0 - 1e-12),
                xtol=1e-6,
            )
        )
    )


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


@dataclass(frozen=True)
class SeedVariance:
    """A variant's seed-block score variance, pooled over a comparison's variants."""

    variance: float
    """Of one variant's aggregate under one seed block, around its variant and seed means."""
    degrees_of_freedom: float
    """``(variants - 1) (seeds - 1)``: the variants x seeds table's residual."""
    variants: int


def pooled_seed_variance(
    order: list[str], scores: dict[str, Scores], doc_bytes: dict[str, np.ndarray]
) -> SeedVariance | None:
    """The seed-block variance from the variants x seeds table of aggregates (a randomised
    block design's residual mean square), for three or more variants under two or more
    seeds; None otherwise. Every pair's seed term then has ``(k - 1)(n - 1)`` degrees of
    freedom instead of its own ``n - 1``, assuming variants are alike in training noise."""
    seeds = sorted(scores[order[0]]) if order else []
    if len(order) < 3 or len(seeds) < 2:
        return None
    table = np.array([[aggregate(scores[v][s], doc_bytes) for s in seeds] for v in order])
    residual = (
        table - table.mean(axis=1, keepdims=True) - table.mean(axis=0, keepdims=True) + table.mean()
    )
    df = (len(order) - 1) * (len(seeds) - 1)
    return SeedVariance(float(np.sum(residual**2)) / df, float(df), len(order))


def decide_all(
    order: list[str],
    scores: dict[str, Scores],
    doc_bytes: dict[str, np.ndarray],
    *,
    threshold: float = 0.0,
    confidence: float = 0.95,
    family: Family = Family.HOLM,
) -> list[PairDecision]:
    """Every pair ``(order[i], order[j])`` for ``i < j``, in that order.

    ``scores`` maps each variant of ``order`` to its :data:`Scores`; the options are those
    of :func:`decide_pair`. Each pair's interval is at ``confidence`` on its own, its seed
    term pooled over the variants (:func:`pooled_seed_variance`); its decision follows its
    p-value corrected for the number of pairs under ``family`` (Holm: no pair is decided
    wrongly with more than ``1 - confidence`` chance).
    """
    check_options(threshold, confidence)
    missing = [v for v in order if v not in scores]
    if missing:
        raise ValueError(f"no scores for variants {missing}")
    if len(set(order)) != len(order):
        raise ValueError(f"variants repeat in the order {order}")
    pooled = pooled_seed_variance(order, scores, doc_bytes)
    pairs = [
        decide_pair(
            order[i],
            order[j],
            scores[order[i]],
            scores[order[j]],
            doc_bytes,
            threshold=threshold,
            confidence=confidence,
            seed_variance=pooled,
        )
        for i in range(len(order))
        for j in range(i + 1, len(order))
    ]
    family = family_of(family)
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


def _better_by_pair(pairs: list[PairDecision]) -> dict[tuple[str, str], bool]:
    """``(x, y) -> True`` if ``x`` is decided better than ``y``, for both orientations of each pair."""
    out: dict[tuple[str, str], bool] = {}
    for p in pairs:
        out[(p.a, p.b)] = p.decision == A_BETTER
        out[(p.b, p.a)] = p.decision == B_BETTER
    return out


def _decided_better(better: dict[tuple[str, str], bool], x: str, y: str) -> bool:
    if (x, y) not in better:
        raise ValueError(f"no decision between {x!r} and {y!r}")
    return better[(x, y)]


def tiers(order: list[str], pairs: list[PairDecision]) -> dict[str, int]:
    """Group variants that cannot be told apart into tiers 1, 2, ...

    ``order`` is best (lowest aggregate) first. Tier 1 starts with ``order[0]``;
    each next variant joins the current tier unless it is decided worse than
    the current tier's first variant, in which case it starts the next tier.
    ``pairs`` must hold a decision (either orientation) for each such
    comparison, else ``ValueError``.
    """
    better = _better_by_pair(pairs)
    out: dict[str, int] = {}
    tier, head = 0, None
    for v in order:
        if head is None or _decided_better(better, head, v):
            tier, head = tier + 1, v
        out[v] = tier
    return out


def best(order: list[str], pairs: list[PairDecision]) -> dict[str, bool]:
    """``True`` only for ``order[0]`` and only if it is decided better than every other variant.

    A single variant has beaten nothing, so it is not best.
    """
    better = _better_by_pair(pairs)
    out = dict.fromkeys(order, False)
    if len(order) > 1:
        head = order[0]
        out[head] = all(_decided_better(better, head, v) for v in order[1:])
    return out
