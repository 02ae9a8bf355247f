"""The guard over tracked runs: read them from MLflow, compare them, log the verdict back."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.guard.decision_policy import DEFAULT_POLICY, DecisionPolicy
from orchestrator.guard.report import comparison_markdown
from orchestrator.guard.scoring import compare
from orchestrator.guard.tracker_io import count_looks, load_runs, log_comparison
from orchestrator.tracking.store_reader import training_run_ids
from orchestrator.tracking.tracker import Tracker
from orchestrator.tracking.uris import stored_uri


def compare_tracked(
    run_ids: list[str] | None = None,
    policy: DecisionPolicy = DEFAULT_POLICY,
    *,
    experiment: str | None = None,
    sweep: str | None = None,
    tracking_uri: str | None = None,
    parent_run_id: str | None = None,
    workdir: str | Path | None = None,
    into_run_id: str | None = None,
) -> dict[str, Any]:
    """The comparison guard over MLflow runs (by id, or all runs of an experiment or sweep),
    decided under ``policy``.

    Returns the verdict (``accepted``, ``rows``, ``refusals``, and the decision on every
    pair of variants, ``pairs``, at the policy's threshold, on the score its ``decide_on``
    names: default the mean held-out bits per byte over all domains), the comparison run's
    id and its artifacts; the verdict is logged to MLflow either way: to a new comparison
    run (a child of ``parent_run_id`` if given), or into the run ``into_run_id``. The earlier
    looks of its sequence are found among the tracked comparisons, numbered and recorded
    (:mod:`orchestrator.guard.decisions.looks`). The policy's values were checked when it
    was built, before any run is read
    (:class:`~orchestrator.guard.decision_policy.DecisionPolicy`).
    """
    uri = stored_uri(tracking_uri, Path.cwd())
    tracker = Tracker(uri, experiment or "zephon")
    if not run_ids:
        run_ids = training_run_ids(uri, experiment=experiment, sweep=sweep)
    runs = load_runs(tracker, list(run_ids))
    comparison = compare(runs, policy)
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
