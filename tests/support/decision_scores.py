"""Simulated held-out scores of variants of one mixture, for the guard's decision tests."""

from __future__ import annotations

import numpy as np

DATASETS = ("code", "docs", "i18n")


def equal_variants(
    rng: np.random.Generator,
    *,
    variants: int,
    seeds: int,
    run_sd: float,
    run_sds: list[float] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, dict[str, dict[str, np.ndarray]]]]:
    """Variants of one mixture: per-document bits of shared difficulty, a shift per run and
    dataset (``run_sd`` bits per byte: training noise, or each variant's own ``run_sds``) and
    noise per document and run."""
    sds = run_sds if run_sds is not None else [run_sd] * variants
    doc_bytes = {d: rng.integers(200, 2001, size=16).astype(np.float64) for d in DATASETS}
    hardness = {d: rng.normal(1.0, 0.3, size=16) for d in DATASETS}
    scores = {
        f"v{v}": {
            f"s{s}": {
                d: n * (hardness[d] + rng.normal(0.0, sds[v]) + rng.normal(0.0, 0.1, size=16))
                for d, n in doc_bytes.items()
            }
            for s in range(seeds)
        }
        for v in range(variants)
    }
    return doc_bytes, scores
