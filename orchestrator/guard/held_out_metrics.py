"""Deciding on a held-out metric other than bits per byte (``--decide-on accuracy``).

``decide_on`` names held-out domains (bits per byte, the default), or ``METRIC`` (every
domain) or ``METRIC:DOMAIN`` entries of one registered metric
(:data:`orchestrator.evaluation.METRICS`). The metric's per-document values become the
guard's per-document scores on a lower-is-better scale (negated when higher is better), as
a task's do (:mod:`orchestrator.guard.tasks`).
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.evaluation import DEFAULT_METRIC, METRICS, HeldOutMetric, held_out_metric
from orchestrator.guard.comparison import RunSummary


def metric_choice(
    decide_on: Sequence[str] | None, domains: list[str]
) -> tuple[HeldOutMetric, list[str]]:
    """The held-out metric ``decide_on`` asks for and its domains (default: bits per byte on
    every domain). ``ValueError`` for an unknown domain, or entries of different metrics."""
    names = {metric.name for metric in METRICS}
    chosen: dict[str, list[str]] = {}
    for entry in decide_on or []:
        name, _, domain = entry.partition(":")
        if not domain and name in names and name not in domains:
            chosen.setdefault(name, []).extend(domains)
        elif domain and name in names:
            chosen.setdefault(name, []).append(domain)
        else:
            chosen.setdefault(DEFAULT_METRIC, []).append(entry)
    if len(chosen) > 1:
        raise ValueError(
            f"decide on one held-out metric at a time: {list(decide_on or [])} names "
            f"{', '.join(chosen)}"
        )
    name, asked = next(iter(chosen.items()), (DEFAULT_METRIC, domains))
    unknown = sorted(set(asked) - set(domains))
    if unknown:
        raise ValueError(
            f"cannot decide on held-out domain(s) {unknown}: the runs were scored on "
            f"{', '.join(domains)} (metrics: {', '.join(sorted(names))})"
        )
    return held_out_metric(name), [d for d in domains if d in asked]


def with_metric_scores(
    runs: list[RunSummary], step: int, metric: HeldOutMetric, domains: list[str]
) -> tuple[list[RunSummary], list[str], str]:
    """``runs`` with ``metric``'s per-document values at ``step`` added as pseudo-domains
    ``METRIC:DOMAIN``; also their names and what the score is, in words. ``ValueError``
    naming a run that was evaluated before the metric existed."""
    sign = -1.0 if metric.higher_is_better else 1.0
    keys = [f"{metric.name}:{domain}" for domain in domains]
    scored = []
    for run in runs:
        found = run.held_out.get(step, {}).get(metric.name)
        if found is None or not all(d in found.documents for d in domains):
            raise ValueError(
                f"run {run.name} has no held-out {metric.name} per document at step {step} "
                "(evaluated before Zephon computed it); train it again to decide on it"
            )
        scores = {
            key: ([sign * v for v in found.documents[d].values], found.documents[d].weights)
            for key, d in zip(keys, domains, strict=True)
        }
        scored.append(run.with_scores(step, scores))
    direction = (
        f"-{metric.name} (higher {metric.name} is better; lower score is better)"
        if metric.higher_is_better
        else f"{metric.name} (lower is better)"
    )
    return scored, keys, f"{metric.title}, {direction}"
