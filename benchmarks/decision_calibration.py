"""The guard's decisions at every seed count: a noise model fitted to real runs, simulated.

From the decisions benchmark's real runs (mixtures A and A', equal by construction, and B,
A with half its code replaced by junk, each under the same seeds), the model takes every
held-out document's bytes and bits per byte, and fits per held-out domain the training noise
of a paired difference (``run_sd``: how a seed moves a domain's bits per byte between two
equal mixtures) and each document's own noise (``document_sd``, per byte: a document of
``n`` bytes moves by ``document_sd / sqrt(n)``), and B's true effect per domain. It then
draws thousands of comparisons at 2, 3, 4, 6 and 8 seeds: A/A (nothing to find) and A/B
(B's effect planted), decided by the guard's statistic and by the one before issue 38 (a
single t with Welch-Satterthwaite degrees of freedom), and sweeps of 6 equal mixtures
decided under each family correction.

Design: docs/design/benchmarks_decisions.md
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from orchestrator.guard.comparison import RunSummary
from orchestrator.guard.decisions import (
    CANNOT_TELL,
    Family,
    Scores,
    decide_all,
    decide_pair,
    document_variance,
    welch_degrees_of_freedom,
)

SEED_COUNTS = (2, 3, 4, 6, 8)
COMPARISONS = 2000
"""Simulated comparisons per seed count and design."""
SWEEPS = 1000
"""Simulated sweeps of six equal mixtures."""
SWEEP_MIXTURES = 6
SWEEP_SEEDS = 3
TRAINING_NOISE_FACTOR = 3.0
"""The stressed model's training noise, in multiples of the documents' part of a seed's score
variance."""


@dataclass(frozen=True)
class NoiseModel:
    """Per held-out domain: document bytes, the noise of a paired difference, B's effect."""

    document_bytes: dict[str, list[float]]
    run_sd: dict[str, float]
    """Standard deviation over seeds of a domain's bits per byte difference between two
    equal mixtures, net of the documents' own noise."""
    document_sd: dict[str, float]
    """A document's own noise in a paired difference, in bits per byte times sqrt(bytes)."""
    effect: dict[str, float]
    """B minus A in bits per byte per domain, mean over seeds (the planted difference)."""
    seeds: int
    """Seeds the fit used."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def with_training_noise(self, factor: float) -> NoiseModel:
        """This model with each domain's training noise set to ``factor`` times the variance
        its documents' own noise adds to a seed's domain score: the regime where a few seeds
        must carry the decision (the mix-search benchmark's, where the old statistic failed)."""
        run_sd = {
            d: math.sqrt(factor * self.document_sd[d] ** 2 / float(np.sum(n)))
            for d, n in self.document_bytes.items()
        }
        return NoiseModel(self.document_bytes, run_sd, self.document_sd, self.effect, self.seeds)


def fit_noise_model(
    a_runs: dict[int, RunSummary],
    twin_runs: dict[int, RunSummary],
    b_runs: dict[int, RunSummary],
    *,
    domains: list[str],
) -> NoiseModel:
    """The model of the module docstring over the held-out ``domains``, from runs keyed by
    seed (A, A' and B) scored on the same documents at their last common eval step."""
    seeds = sorted(set(a_runs) & set(twin_runs) & set(b_runs))
    if len(seeds) < 3:
        raise ValueError(f"fitting the noise needs 3+ seeds of A, A' and B, got {seeds}")
    step = max(set.intersection(*(set(r.documents) for r in a_runs.values())))
    first = a_runs[seeds[0]].documents[step]
    doc_bytes = {d: np.asarray(first[d]["bytes"], dtype=np.float64) for d in domains}

    def bits_per_byte(run: RunSummary, domain: str) -> np.ndarray:
        return np.asarray(run.documents[step][domain]["bits"], dtype=np.float64) / doc_bytes[domain]

    run_sd, document_sd, effect = {}, {}, {}
    for d in domains:
        n = doc_bytes[d]
        delta = np.stack(
            [bits_per_byte(twin_runs[s], d) - bits_per_byte(a_runs[s], d) for s in seeds]
        )
        level = (delta * n).sum(axis=1) / n.sum()  # each seed's domain difference
        within = (delta - level[:, None]) - (delta - level[:, None]).mean(axis=0)
        # residual per document and seed, in bits per byte times sqrt(bytes)
        document_var = float(np.sum(within**2 * n) / ((len(seeds) - 1) * (n.size - 1)))
        document_sd[d] = math.sqrt(document_var)
        own = document_var * float(np.sum(n)) / n.sum() ** 2  # its part of a level's variance
        run_sd[d] = math.sqrt(max(float(np.var(level, ddof=1)) - own, 0.0))
        effect[d] = float(
            np.mean(
                [
                    ((bits_per_byte(b_runs[s], d) - bits_per_byte(a_runs[s], d)) * n).sum()
                    / n.sum()
                    for s in seeds
                ]
            )
        )
    return NoiseModel(
        document_bytes={d: n.tolist() for d, n in doc_bytes.items()},
        run_sd=run_sd,
        document_sd=document_sd,
        effect=effect,
        seeds=len(seeds),
    )


def draw_scores(
    model: NoiseModel,
    rng: np.random.Generator,
    *,
    seeds: int,
    effect: dict[str, float] | None = None,
) -> Scores:
    """One variant's per-document bits under ``seeds`` seeds: documents' shared difficulty
    cancels in a pair, so each variant draws its training noise and documents' noise
    around ``effect`` (bits per byte per domain; None: 0)."""
    scores: Scores = {}
    for s in range(seeds):
        scores[f"seed-{s}"] = {}
        for d, listed in model.document_bytes.items():
            n = np.asarray(listed)
            # a paired difference has twice a variant's variance: each variant draws half
            shift = rng.normal(0.0, model.run_sd[d] / math.sqrt(2))
            own = rng.normal(0.0, model.document_sd[d] / math.sqrt(2), n.size) / np.sqrt(n)
            scores[f"seed-{s}"][d] = n * (1.0 + (effect or {}).get(d, 0.0) + shift + own)
    return scores


def welch_decides(a: Scores, b: Scores, doc_bytes: dict[str, np.ndarray]) -> bool:
    """Whether the statistic before issue 38 named a winner at 95%: a single Student t on
    Welch-Satterthwaite degrees of freedom over the guard's document term and the seed term
    (the per-seed differences' spread)."""
    from scipy import stats

    seeds = sorted(a)
    delta = {d: np.stack([a[s][d] - b[s][d] for s in seeds]) for d in doc_bytes}
    per_seed = sum(delta[d].sum(axis=1) / n.sum() for d, n in doc_bytes.items()) / len(doc_bytes)
    terms = [
        document_variance(delta, doc_bytes),
        (float(np.var(per_seed, ddof=1)) / len(seeds), float(len(seeds) - 1)),
    ]
    df = welch_degrees_of_freedom(terms)
    half = float(stats.t.ppf(0.975, df)) * math.sqrt(sum(v for v, _ in terms))
    return abs(float(np.mean(per_seed))) > half


def wilson(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion."""
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = (
        z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    )
    return centre - half, centre + half


def rate(successes: int, trials: int) -> dict[str, Any]:
    """``successes`` of ``trials`` as a rate with its 95% Wilson interval."""
    lo, hi = wilson(successes, trials)
    return {"count": successes, "trials": trials, "rate": successes / trials, "interval": [lo, hi]}


def simulate_seed_counts(
    model: NoiseModel, *, comparisons: int = COMPARISONS, seed: int = 0
) -> list[dict[str, Any]]:
    """Per seed count: A/A false decisions and A/B power, now and before issue 38."""
    rng = np.random.default_rng(seed)
    doc_bytes = {d: np.asarray(n) for d, n in model.document_bytes.items()}
    rows = []
    for seeds in SEED_COUNTS:
        counts = dict.fromkeys(("aa_now", "aa_before", "ab_now", "ab_before"), 0)
        for _ in range(comparisons):
            a = draw_scores(model, rng, seeds=seeds)
            twin = draw_scores(model, rng, seeds=seeds)
            b = draw_scores(model, rng, seeds=seeds, effect=model.effect)
            counts["aa_now"] += (
                decide_pair("a", "t", a_scores=a, b_scores=twin, doc_bytes=doc_bytes).decision
                != CANNOT_TELL
            )
            counts["aa_before"] += welch_decides(a, twin, doc_bytes)
            decided = decide_pair("a", "b", a_scores=a, b_scores=b, doc_bytes=doc_bytes).decision
            counts["ab_now"] += (
                decided == "a_better" if _b_is_worse(model) else decided == "b_better"
            )
            counts["ab_before"] += welch_decides(a, b, doc_bytes)
        rows.append({"seeds": seeds, **{k: rate(v, comparisons) for k, v in counts.items()}})
    return rows


def _b_is_worse(model: NoiseModel) -> bool:
    return sum(model.effect.values()) > 0


def simulate_sweeps(model: NoiseModel, *, sweeps: int = SWEEPS, seed: int = 1) -> dict[str, Any]:
    """Sweeps of :data:`SWEEP_MIXTURES` equal mixtures under :data:`SWEEP_SEEDS` seeds: how
    often any pair names a winner, per family correction."""
    rng = np.random.default_rng(seed)
    doc_bytes = {d: np.asarray(n) for d, n in model.document_bytes.items()}
    named = dict.fromkeys(Family, 0)
    before = 0  # the statistic before issue 38, each pair on its own
    for _ in range(sweeps):
        scores = {
            f"m{i}": draw_scores(model, rng, seeds=SWEEP_SEEDS) for i in range(SWEEP_MIXTURES)
        }
        order = sorted(scores)
        for family in Family:
            pairs = decide_all(order, scores, doc_bytes=doc_bytes, family=family)
            named[family] += any(p.decision != CANNOT_TELL for p in pairs)
        before += any(
            welch_decides(scores[a], scores[b], doc_bytes)
            for i, a in enumerate(order)
            for b in order[i + 1 :]
        )
    return {
        "mixtures": SWEEP_MIXTURES,
        "seeds": SWEEP_SEEDS,
        "pairs": SWEEP_MIXTURES * (SWEEP_MIXTURES - 1) // 2,
        **{str(family): rate(count, sweeps) for family, count in named.items()},
        "before": rate(before, sweeps),
    }
