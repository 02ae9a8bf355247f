"""How far a seed moves held-out scores: the seed standard deviation of twin mixtures.

Twins are two mixtures equal by construction (the decisions benchmark's A and A', or its
skewed S and S') trained under the same seeds. Per held-out domain and for the aggregate
(the mean over the domains), at the runs' last common eval step or on the mean of their last
``k`` evals (:mod:`orchestrator.guard.eval_smoothing`), this measures

* ``score_sd``: the standard deviation over seeds of one mixture's bits per byte, pooled over
  the two twins (their variances averaged, ``2 (seeds - 1)`` degrees of freedom): what a seed
  moves a mixture's score by (Marin's "seed standard deviation");
* ``difference_sd``: the standard deviation over seeds of the twins' paired difference
  (same seed: same initial weights and data order): what the guard's seed term sees;
* ``mean_difference``: that difference's mean over seeds (first minus second; for a pair
  with a planted effect, the signal beside that noise).

Used by ``benchmarks/decisions.py``; design: docs/design/benchmarks_decisions.md
"""

from __future__ import annotations

import statistics
from typing import Any

from orchestrator.guard.comparison import AGGREGATE, RunSummary
from orchestrator.guard.eval_smoothing import smoothed_runs, smoothing_steps
from orchestrator.guard.signal_noise import yardstick_noise


def twin_scores(
    first: dict[int, RunSummary],
    second: dict[int, RunSummary],
    domains: list[str],
    *,
    smooth_last: int = 1,
) -> tuple[list[int], dict[int, dict[str, float]], dict[int, dict[str, float]]]:
    """The eval steps averaged and each twin's scores by seed (domain or :data:`AGGREGATE`
    -> bits per byte) at their last common eval step, averaged over the last
    ``smooth_last`` evals."""
    seeds = sorted(set(first) & set(second))
    runs = [first[s] for s in seeds] + [second[s] for s in seeds]
    step = max(set.intersection(*(set(r.evals) for r in runs)))
    steps = smoothing_steps(runs, step, last=smooth_last)
    smoothed = {r.run_id: r for r in smoothed_runs(runs, step, last=smooth_last)}

    def scores(run: RunSummary) -> dict[str, float]:
        values = {d: float(smoothed[run.run_id].evals[step][d]) for d in domains}
        return {**values, AGGREGATE: statistics.fmean(values.values())}

    return (
        steps,
        {s: scores(first[s]) for s in seeds},
        {s: scores(second[s]) for s in seeds},
    )


def seed_spread(
    first: dict[int, RunSummary],
    second: dict[int, RunSummary],
    domains: list[str],
    *,
    smooth_last: int = 1,
) -> dict[str, Any]:
    """``score_sd``, ``difference_sd`` and ``mean_difference`` (module docstring) of the
    twins ``first`` and ``second`` (runs by seed) per domain and for the aggregate, and the
    mean scores; needs 2+ seeds."""
    steps, a, b = twin_scores(first, second, domains, smooth_last=smooth_last)
    seeds = sorted(a)
    if len(seeds) < 2:
        raise ValueError(f"a seed standard deviation needs 2+ seeds of both twins, got {seeds}")
    keys = [*domains, AGGREGATE]
    score_sd = {  # pooled over the twins: the guard's noise of a yardstick
        k: yardstick_noise(
            k, {"first": {s: a[s][k] for s in seeds}, "second": {s: b[s][k] for s in seeds}}
        ).noise
        for k in keys
    }
    difference_sd = {k: statistics.stdev([a[s][k] - b[s][k] for s in seeds]) for k in keys}
    mean_difference = {k: statistics.fmean([a[s][k] - b[s][k] for s in seeds]) for k in keys}
    mean = {
        k: statistics.fmean([*(a[s][k] for s in seeds), *(b[s][k] for s in seeds)]) for k in keys
    }
    return {
        "smooth_last": smooth_last,
        "steps": steps,
        "seeds": len(seeds),
        "mean": mean,
        "score_sd": score_sd,
        "difference_sd": difference_sd,
        "mean_difference": mean_difference,
    }


def ratios(numerator: dict[str, float], denominator: dict[str, float]) -> dict[str, float | None]:
    """``numerator[k] / denominator[k]`` for every key (None where the denominator is 0)."""
    return {k: numerator[k] / denominator[k] if denominator[k] else None for k in numerator}
