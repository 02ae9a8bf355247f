"""The numbers a decision is built from: held-out scores checked, a run's aggregate, and the
document and seed terms of a difference's variance (docs/design/guard.md)."""

from __future__ import annotations

import math

import numpy as np

Scores = dict[str, dict[str, np.ndarray]]
"""Seed key -> dataset -> bits of each held-out document (float64, documents in one fixed order)."""


def bytes_arrays(doc_bytes: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
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


def bits_matrix(
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
    return aggregate_checked(bits, bytes_arrays(doc_bytes))


def aggregate_checked(bits: dict[str, np.ndarray], n_bytes: dict[str, np.ndarray]) -> float:
    """:func:`aggregate` with ``n_bytes`` already checked (:func:`bytes_arrays`)."""
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


def within_seed_variance(delta: dict[str, np.ndarray], n_bytes: dict[str, np.ndarray]) -> float:
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
    n_bytes = bytes_arrays(doc_bytes)
    seeds = sorted(scores)
    if not seeds or any(n.size < 2 for n in n_bytes.values()):
        raise ValueError("a sampling error needs a seed and 2 held-out documents per dataset")
    return math.sqrt(document_variance(bits_matrix("variant", scores, seeds, n_bytes), n_bytes)[0])


def welch_degrees_of_freedom(terms: list[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variance terms ``(v, df)``; 0 terms drop out."""
    live = [(v, df) for v, df in terms if v > 0]
    if not live:
        return math.nan
    total = sum(v for v, _ in live)
    # (sum v)^2 / sum(v^2 / df), with each v scaled by the total: tiny variances would
    # underflow when squared (0 / 0)
    return 1.0 / sum((v / total) ** 2 / df for v, df in live)
