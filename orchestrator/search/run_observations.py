"""Observations from Zephon runs: only a set of runs the comparison guard accepts."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from orchestrator import guard
from orchestrator.errors import SearchError
from orchestrator.experiment.config import ExperimentConfig
from orchestrator.experiment.run_record import ExperimentRecord
from orchestrator.guard.comparison import RunSummary
from orchestrator.guard.decision_policy import DecisionPolicy
from orchestrator.search.observations import Observations
from orchestrator.tracking.mlflow_names import ARTIFACT_DIR, ARTIFACT_EXPERIMENT
from orchestrator.tracking.store_reader import training_run_ids
from orchestrator.tracking.tracker import Tracker
from orchestrator.tracking.uris import stored_uri


def observations_from_runs(
    run_ids: list[str] | None = None,
    *,
    sweep: str | None = None,
    experiment: str | None = None,
    tracking_uri: str | None = None,
    targets: list[str] | None = None,
) -> Observations:
    """Every run's mixture and held-out bits per byte at the comparison's eval step, for the
    runs named (by id, or all runs of a sweep or MLflow experiment).

    The guard checks them first (same data contract, recipe and initial weights; digests
    agreeing within each variant): a refused set raises :class:`SearchError` with the
    guard's reasons, since a fit across incomparable runs would learn the differences of
    their set-ups. Runs of several model sizes (a ladder) are checked size by size and
    carry their parameter counts (``params``). ``targets``: held-out domains whose mean is
    the objective (default all, as the guard's aggregate). Replicates (seeds, dp sizes) are
    separate observations.
    """
    if not run_ids and not sweep and not experiment:
        raise SearchError(["name the runs: run ids, a sweep or an experiment"])
    uri = stored_uri(tracking_uri, Path.cwd())
    try:
        ids = run_ids or training_run_ids(uri, experiment=experiment, sweep=sweep)
        runs = guard.load_runs(Tracker(uri, experiment or "zephon"), list(ids))
    except ValueError as e:  # unknown run or experiment
        raise SearchError([str(e)]) from None
    return observations_by_size(runs, targets)


def observations_by_size(runs: list[RunSummary], targets: list[str] | None) -> Observations:
    """:func:`observations_from_runs` of loaded runs: one guard comparison per model size
    (runs that recorded their parameter count; else all runs as one size). Mixtures only: a
    fit over variants that differ in a dataset's version or their processing is refused."""
    varying = sorted({key for run in runs for key in run.varied})
    if varying:
        raise SearchError(
            [
                f"the runs' variants differ in {', '.join(varying)} (data.compared), not only "
                "in their mixtures: fit and propose model the mixture alone; compare them with "
                "zephon compare, or fit the runs of one dataset version and processing chain"
            ]
        )
    sizes = {run.parameters for run in runs}
    if len(sizes) < 2 or None in sizes:
        return _observations_of_one_size(runs, targets, None)
    parts = [
        _observations_of_one_size([r for r in runs if r.parameters == size], targets, size)
        for size in sorted(sizes)  # type: ignore[type-var]
    ]
    joined = parts[0]
    for part in parts[1:]:
        joined = joined.concatenate(part)
    return joined


def _observations_of_one_size(
    runs: list[RunSummary], targets: list[str] | None, size: int | None
) -> Observations:
    """The runs of one model size (``size`` parameters; None: not told) as observations,
    once the guard accepts them."""
    try:
        comparison = guard.compare(runs, DecisionPolicy(decide_on=targets))
    except ValueError as e:  # an unknown held-out domain
        raise SearchError([str(e)]) from None
    if not comparison.accepted:
        at = "" if size is None else f" (the runs of {size:,} parameters)"
        raise SearchError(
            [
                f"the guard refused these runs{at}: {r.code}: {r.message}"
                for r in comparison.refusals
            ]
        )
    step = comparison.eval_step
    chosen = tuple(targets or comparison.domains)
    domains = tuple(sorted({d for run in runs for d in run.mixture}))
    mixtures = np.array([[float(run.mixture.get(d, 0.0)) for d in domains] for run in runs])
    scores = np.array([[float(run.evals[step][t]) for t in chosen] for run in runs])
    return Observations(
        ids=tuple(run.run_id for run in runs),
        domains=domains,
        mixtures=mixtures / mixtures.sum(axis=1, keepdims=True),
        targets=chosen,
        scores=scores,
        blocks=tuple(run.seed for run in runs),
        params=None if size is None else np.full(len(runs), float(size)),
    )


def run_experiment(run_id: str, tracking_uri: str | None = None) -> ExperimentConfig:
    """The experiment a run trained (its ``zephon/experiment.json`` artifact): the data and
    schedule a repetition cap is computed from. :class:`SearchError` if it is not there."""
    uri = stored_uri(tracking_uri, Path.cwd())
    with tempfile.TemporaryDirectory(prefix="zephon-search-") as folder:
        try:
            Tracker(uri, "zephon").download_run(run_id, ARTIFACT_DIR, Path(folder))
            text = (Path(folder) / ARTIFACT_EXPERIMENT).read_text()
            recorded = ExperimentRecord.from_dict(json.loads(text))
        except (ValueError, OSError) as e:
            raise SearchError([f"run {run_id}: its experiment is not in MLflow ({e})"]) from None
    return recorded.experiment_config()
