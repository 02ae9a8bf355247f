"""The guard over tracked runs: read them from MLflow, compare them, log the verdict back."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.guard.decisions import (
    DEFAULT_MAX_SEEDS,
    LookPlan,
    check_options,
    design_of,
    family_of,
)
from orchestrator.guard.eval_smoothing import DEFAULT_SMOOTH_LAST, check_smooth_last
from orchestrator.guard.report import comparison_markdown
from orchestrator.guard.runs import count_looks, load_runs, log_comparison
from orchestrator.guard.scoring import compare
from orchestrator.tracking.stored_runs import training_run_ids
from orchestrator.tracking.tracker import Tracker
from orchestrator.tracking.uris import stored_uri


def compare_tracked(
    run_ids: list[str] | None = None,
    *,
    experiment: str | None = None,
    sweep: str | None = None,
    tracking_uri: str | None = None,
    parent_run_id: str | None = None,
    workdir: str | Path | None = None,
    into_run_id: str | None = None,
    threshold: float = 0.0,
    decide_on: list[str] | None = None,
    confidence: float = 0.95,
    family: str = "holm",
    design: str = "sequential",
    max_seeds: int = DEFAULT_MAX_SEEDS,
    smooth_last: int = DEFAULT_SMOOTH_LAST,
) -> dict[str, Any]:
    """The comparison guard over MLflow runs (by id, or all runs of an experiment or sweep).

    Returns the verdict (``accepted``, ``rows``, ``refusals``, and the decision on every
    pair of variants, ``pairs``, at the decision ``threshold``, on the score ``decide_on``
    names: default the mean held-out bits per byte over all domains), the comparison run's
    id and its artifacts; the verdict is logged to MLflow either way: to a new comparison
    run (a child of ``parent_run_id`` if given), or into the run ``into_run_id``.
    ``confidence``: of each pair's interval (a caller deciding several pairs as one question
    lowers the error of each, e.g. a search's confirmation). ``family``: ``holm`` (default),
    ``bh`` or ``none``, the correction of the pairs' decisions for their number
    (:class:`orchestrator.guard.decisions.Family`). ``design``: ``sequential`` (one error
    budget for every look of this comparison as seeds are added, up to ``max_seeds``) or
    ``fixed`` (:mod:`orchestrator.guard.decisions.looks`); the earlier looks of its sequence
    are found among the tracked comparisons, numbered and recorded. ``smooth_last``: score
    each run on the mean of its last this many held-out evals (1: the last eval alone;
    :mod:`orchestrator.guard.eval_smoothing`).
    """
    check_options(threshold, confidence)  # before any run is read
    check_smooth_last(smooth_last)
    correction = family_of(family)
    plan = LookPlan(design_of(design), 1 - confidence, max_seeds)  # ValueError if wrong
    uri = stored_uri(tracking_uri, Path.cwd())
    tracker = Tracker(uri, experiment or "zephon")
    if not run_ids:
        run_ids = training_run_ids(uri, experiment=experiment, sweep=sweep)
    runs = load_runs(tracker, list(run_ids))
    comparison = compare(
        runs,
        threshold=threshold,
        confidence=confidence,
        decide_on=decide_on,
        family=correction,
        design=plan.design,
        max_seeds=plan.max_seeds,
        smooth_last=smooth_last,
    )
    if comparison.accepted:
        count_looks(tracker, comparison)
    with contextlib.ExitStack() as scratch:
        # The artifacts are copied into MLflow: without a workdir, the copies go with the call.
        work = workdir or scratch.enter_context(tempfile.TemporaryDirectory(prefix="zephon-"))
        comparison_run = log_comparison(
            tracker,
            comparison,
            runs=runs,
            parent_run_id=parent_run_id,
            workdir=Path(work),
            into_run_id=into_run_id,
        )
    return {
        **comparison.to_json(),
        "comparison_run_id": comparison_run,
        "tracking_uri": uri,
        "markdown": comparison_markdown(comparison),
    }
