"""Downstream task scores as the guard's per-document scores, so pairs are decided on a task.

``decide_on=["task:NAME[:METRIC]"]``: each task item is one document of the paired
statistic, on a lower-is-better score (bits per byte for perplexity tasks, ``-metric``
otherwise). Design: docs/tasks.md, "Deciding on a task".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from orchestrator.guard.comparison import RunSummary

TASK_PREFIX = "task:"
#: Metrics tried, in order, when ``task:NAME`` names no metric.
DEFAULT_TASK_METRICS = ("acc", "bits_per_byte")


def task_choice(decide_on: Sequence[str] | None) -> tuple[str, str | None] | None:
    """``(task, metric or None)`` when ``decide_on`` asks for a task, else None.

    Raises ValueError when a task is mixed with held-out domains or with another task."""
    asked = [d for d in decide_on or [] if d.startswith(TASK_PREFIX)]
    if not asked:
        return None
    if len(asked) > 1 or len(decide_on or []) > 1:
        raise ValueError(
            f"decide on one task at a time, or on held-out domains: got {list(decide_on or [])}"
        )
    task, _, metric = asked[0][len(TASK_PREFIX) :].partition(":")
    return task, metric or None


def _items_of(run: RunSummary, step: int, task: str) -> dict[int, dict[str, float]]:
    items = run.task_items.get(step, {}).get(task)
    if not items:
        scored = sorted(run.task_items.get(step, {}))
        raise ValueError(
            f"run {run.name} has no scores of task {task!r} at step {step} (its tasks there: "
            f"{', '.join(scored) or 'none'}); add it to eval.tasks"
        )
    return items


def _metric_of(items: dict[int, dict[str, float]], task: str, metric: str | None) -> str:
    available = sorted({m for values in items.values() for m in values})
    if metric is None:
        metric = next((m for m in DEFAULT_TASK_METRICS if m in available), None)
    if metric not in available:
        raise ValueError(
            f"task {task!r} has no per-item metric {metric!r}: use task:{task}:METRIC with "
            f"METRIC one of {', '.join(available)}"
        )
    return metric


def with_task_scores(
    runs: list[RunSummary], step: int, task: str, metric: str | None
) -> tuple[list[RunSummary], str, str]:
    """``runs`` with the task's per-item scores at ``step`` added as one held-out pseudo-domain
    (module docstring); also the pseudo-domain's name and what its score is, in words.

    Raises ValueError naming the run when a run lacks the task or scored other items."""
    first = _items_of(runs[0], step, task)
    metric = _metric_of(first, task, metric)
    ids = sorted(first)
    higher = runs[0].task_higher_is_better.get(task, {}).get(metric, True)
    as_bits = metric == "bits_per_byte" and all("bytes" in first[i] for i in ids)
    key = f"{TASK_PREFIX}{task}:{metric}"
    if as_bits:
        what = f"bits per byte of task {task} (-loglikelihood / ln 2 over each item's bytes)"
    elif higher:
        what = f"-{metric} of task {task} (higher {metric} is better; lower score is better)"
    else:
        what = f"{metric} of task {task} (lower is better)"
    scored = []
    for run in runs:
        items = _items_of(run, step, task)
        if sorted(items) != ids:
            raise ValueError(
                f"run {run.name} scored other items of task {task!r} than {runs[0].name} "
                "(another eval.task_limit or task version?); compare runs scored alike"
            )
        if as_bits:
            bits = [-items[i]["loglikelihood"] / math.log(2) for i in ids]
            weights = [items[i]["bytes"] for i in ids]
        else:
            sign = -1.0 if higher else 1.0
            bits = [sign * items[i][metric] for i in ids]
            weights = [1.0] * len(ids)
        scored.append(run.with_scores(step, {key: (bits, weights)}))
    return scored, key, what
