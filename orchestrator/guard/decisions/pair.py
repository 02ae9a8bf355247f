"""One pair's decision: is variant ``a`` better than ``b``, worse, or can we not tell?

The difference of aggregate bits per byte over paired held-out documents and seeds, its
interval from the seed and document terms (:mod:`~orchestrator.guard.decisions.variance`)
combined as Banerjee's interval, and a decision only when the interval clears the threshold
and 2+ seeds measured training noise. Design: docs/design/guard.md, "The decision statistic".
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass
from typing import Any

import numpy as np

from orchestrator.guard.decisions.looks import MIN_SEEDS, LookPlan
from orchestrator.guard.decisions.seed_noise import SeedSource, SeedTerm
from orchestrator.guard.decisions.variance import (
    Scores,
    bits_matrix,
    bytes_arrays,
    document_variance,
    welch_degrees_of_freedom,
    within_seed_variance,
)

A_BETTER = "a_better"
B_BETTER = "b_better"
CANNOT_TELL = "cannot_tell"

POWER = 0.80
"""Power at which :attr:`PairDecision.detectable` and :class:`NextStep` are decided."""
MIN_PLANNING_DF = 3.0
"""Degrees of freedom the seeds' spread needs before a :class:`NextStep` promises a seed
count: on fewer, the promise is made where the spread came out small by luck, and it is
hollow (docs/design/guard.md, "Repeated looks")."""


@dataclass(frozen=True)
class NextStep:
    """What would decide a pair that cannot be told yet: the seeds at which a true
    difference equal to the observed one is decided with 80% power, at the level the
    :class:`LookPlan` gives that seed count, the seed and document terms as observed (the
    seed term shrinking with the seeds, the document term not)."""

    seeds: int | None
    """Seeds in all (None: not within the plan's ``max_seeds``: stop, the variants are
    alike within what this budget can see)."""
    target: float
    """The difference aimed at: the observed ``|difference|``, unless one was given."""
    reason: str
    """One line saying so."""
    powered: bool = True
    """Whether ``seeds`` is promised to decide with 80% power; False: the seeds' spread is
    measured on too few degrees of freedom to plan with, so one more seed is named first."""

    def to_json(self) -> dict[str, Any]:
        return {
            "seeds": self.seeds,
            "target": self.target,
            "reason": self.reason,
            "powered": self.powered,
        }


@dataclass(frozen=True)
class PairDecision:
    """The decision between variants ``a`` and ``b``, with the numbers behind it."""

    a: str
    b: str
    _: KW_ONLY
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
    """``p_value`` corrected for the comparison's number of pairs
    (:class:`~orchestrator.guard.decisions.family.Family`); the decision follows it. None:
    decided on its own."""
    next_step: NextStep | None = None
    """With a :class:`LookPlan`: the seeds that would decide the observed difference (shown
    for a pair that cannot be told)."""

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
            "next_step": None if self.next_step is None else self.next_step.to_json(),
        }


def check_options(threshold: float, confidence: float) -> None:
    """``ValueError`` unless ``threshold >= 0`` (finite) and ``0 < confidence < 1``."""
    if not (threshold >= 0 and math.isfinite(threshold)):
        raise ValueError(f"threshold must be finite and >= 0, got {threshold}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _documents_text(m: list[int]) -> str:
    lo, hi = min(m), max(m)
    return f"{lo} documents per dataset" if lo == hi else f"{lo}-{hi} documents per dataset"


def decide_pair(
    a: str,
    b: str,
    *,
    a_scores: Scores,
    b_scores: Scores,
    doc_bytes: dict[str, np.ndarray],
    threshold: float = 0.0,
    confidence: float = 0.95,
    seed_term: SeedTerm | None = None,
    plan: LookPlan | None = None,
    target: float | None = None,
) -> PairDecision:
    """Decide between variants ``a`` and ``b`` (the statistic: docs/design/guard.md).

    ``a_scores`` and ``b_scores`` must have the same seeds and, under every seed,
    the datasets of ``doc_bytes`` with one bits value per document; every
    dataset needs at least 2 held-out documents. ``a`` is decided better only if
    the whole interval lies below ``-threshold``, worse only if above
    ``threshold``. ``seed_term``: the pair's training-noise term as its comparison measured it
    (:meth:`~orchestrator.guard.decisions.seed_noise.SeedNoise.pair_term`: its variants' own
    spreads, or pooled where they are alike the rest), instead of this pair's per-seed
    differences alone. ``plan``: the levels later looks decide at, for the
    :class:`NextStep` of a pair that cannot be told (None: none given), aimed at a true
    difference of ``target`` (None: the observed one). Raises ``ValueError``
    otherwise, naming what is wrong.
    """
    check_options(threshold, confidence)
    n_bytes = bytes_arrays(doc_bytes)
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
    bits_a = bits_matrix(a, a_scores, seeds, n_bytes)
    bits_b = bits_matrix(b, b_scores, seeds, n_bytes)

    n_seeds = len(seeds)
    delta = {d: bits_a[d] - bits_b[d] for d in n_bytes}  # seeds x documents
    per_seed = sum(delta[d].sum(axis=1) / n.sum() for d, n in n_bytes.items()) / len(n_bytes)
    difference = float(np.mean(per_seed))  # mean over seeds of D_s
    v_doc, df_doc = document_variance(delta, n_bytes)
    docs = [int(n.size) for n in n_bytes.values()]
    if n_seeds >= 2:
        if seed_term is None:
            seed_term = SeedTerm(
                float(np.var(per_seed, ddof=1)), float(n_seeds - 1), SeedSource.PAIR, 2
            )
        within = within_seed_variance(delta, n_bytes)
        terms = [
            (seed_term.variance / n_seeds, seed_term.degrees_of_freedom),
            (max(v_doc - within, 0.0), df_doc),
        ]
        method = (
            f"paired over {_documents_text(docs)} (stratified by dataset, blocked by seed) "
            f"and {n_seeds} seeds: {seed_term.describe()}, Banerjee's interval"
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
    # deferred: scipy takes ~0.5 s, which every zephon-run would pay through the Hydra
    # plugin (hydra_plugins/zephon -> sweeps.sweeper) though only a report decides;
    # stdtrit: Student t quantiles, ~100x faster than scipy.stats' t.ppf
    from scipy.special import stdtrit

    half = _banerjee_half_width(terms, 1 - confidence)
    lo, hi = difference - half, difference + half
    if n_seeds < MIN_SEEDS:
        decision, detectable, p_value = CANNOT_TELL, None, 1.0
    else:
        decision = A_BETTER if hi < -threshold else B_BETTER if lo > threshold else CANNOT_TELL
        detectable = threshold + half + float(stdtrit(df, POWER)) * standard_error
        p_value = _p_value(terms, abs(difference) - threshold)
    next_step = None
    if plan is not None and n_seeds >= MIN_SEEDS:
        aim = abs(difference) if target is None else target
        next_step = _next_step(  # ``within``: the seed term's part documents explain
            plan, terms, seeds=n_seeds, target=aim, threshold=threshold, floor=within
        )
    return PairDecision(
        a=a,
        b=b,
        next_step=next_step,
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


def _next_step(
    plan: LookPlan,
    terms: list[tuple[float, float]],
    *,
    seeds: int,
    target: float,
    threshold: float,
    floor: float,
) -> NextStep:
    """The fewest seeds, up to ``plan.max_seeds``, at which ``target`` is decided with
    :data:`POWER` (``terms``: the seed term first, as observed at ``seeds`` seeds; ``floor``:
    the part of it the held-out documents' own noise explains, measured on many degrees of
    freedom, below which an unlucky seed spread is not believed)."""
    if target <= threshold:
        return NextStep(
            None, target, f"the observed difference is within the threshold {threshold:g}: stop"
        )
    (v_seed, df_seed), *rest = terms
    if df_seed < MIN_PLANNING_DF and seeds < plan.max_seeds:
        return NextStep(
            seeds + 1,
            target,
            f"add a seed and compare again: the seeds' spread rests on {df_seed:g} df, too few "
            f"to say how many seeds decide a difference of {target:.4g}",
            powered=False,
        )
    from scipy.stats import chi2, nct  # deferred: scipy (see decide_pair)

    training = max(v_seed - floor, 0.0)  # the seed term's own part, on df_seed
    v_seed = floor + training * df_seed / float(chi2.ppf(0.5, df_seed))

    for more in range(seeds + 1, plan.max_seeds + 1):
        level = plan.level(more)
        if level <= 0:
            continue
        scaled = [(v_seed * seeds / more, df_seed * (more - 1) / (seeds - 1)), *rest]
        error = math.sqrt(sum(v for v, _ in scaled))
        df = welch_degrees_of_freedom(scaled)
        # the decision's ratio |difference| / standard error against its critical value,
        # a noncentral t at the target's distance from the threshold
        critical = _banerjee_half_width(scaled, level) / error
        distance = (target - threshold) / error
        if float(nct.sf(critical, df if math.isfinite(df) else 1e6, distance)) >= POWER:
            return NextStep(
                more,
                target,
                f"{more} seeds decide a difference of {target:.4g} with {POWER:.0%} power at "
                f"the observed spread (measured on {df_seed:g} df)",
            )
    return NextStep(
        None,
        target,
        f"{plan.max_seeds} seeds ({plan.design} design's maximum) would not decide a difference of "
        f"{target:.4g} with {POWER:.0%} power: stop, the variants are alike within what this budget can see",
    )


def _banerjee_half_width(terms: list[tuple[float, float]], alpha: float) -> float:
    """``sqrt(sum t_{df}^2 v)`` over the variance terms ``(v, df)``: Banerjee's interval for a
    sum of independently estimated variances, at least ``1 - alpha`` coverage whatever their
    ratio (Welch-Satterthwaite's single t is short when a few-df term dominates)."""
    # deferred: scipy (see decide_pair); stdtrit: Student t quantiles, ~100x faster than t.ppf
    from scipy.special import stdtrit

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
    from scipy.optimize import brentq  # deferred: scipy (see decide_pair)

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
