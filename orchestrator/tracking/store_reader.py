"""Reading runs back from the store, for the guard: which training runs there are, and their files.

Runs asked for by name that are not there raise :class:`ConfigError` (exit code 2, as a
request refused before any work started).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.tracking.mlflow_names import TAG_KIND, TAG_SWEEP
from orchestrator.tracking.run_kind import RunKind
from orchestrator.tracking.store import client_for, load_mlflow
from pipeline.errors import ConfigError

if TYPE_CHECKING:  # annotations only; load_mlflow() imports MLflow at run time
    from mlflow import MlflowClient


@dataclass
class StoredRun:
    """A run as the store holds it."""

    run_id: str
    name: str
    """The run's name (its id if it has none)."""
    tags: dict[str, str]
    seconds: float | None = None
    """From the run's start to its end (None: still open, or never started)."""


def runs_everywhere(uri: str, filter_string: str) -> list[Any]:
    """Runs of every experiment of the store at ``uri`` matching MLflow's ``filter_string``."""
    client = client_for(uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    return list(client.search_runs(experiments, filter_string))


def training_run_ids(
    uri: str, *, experiment: str | None = None, sweep: str | None = None
) -> list[str]:
    """Ids of the training runs (``TAG_KIND == RunKind.RUN``) of ``experiment`` (name; all
    experiments if None), only those of ``sweep`` if given; ordered by run name, then id.

    Raises :class:`ConfigError` if the experiment does not exist or no run matches.
    """
    client = client_for(uri)
    if experiment is not None:
        found = client.get_experiment_by_name(experiment)
        if found is None:
            raise ConfigError(f"no MLflow experiment named {experiment!r} at {client.tracking_uri}")
        experiment_ids = [found.experiment_id]
    else:
        experiment_ids = [e.experiment_id for e in client.search_experiments()]
    query = f"tags.`{TAG_KIND}` = '{RunKind.RUN}'"
    if sweep is not None:
        query += f" and tags.`{TAG_SWEEP}` = {_filter_literal(sweep)}"
    runs = []
    token = None
    while experiment_ids:
        page = client.search_runs(experiment_ids, query, max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    if not runs:
        where = f"experiment {experiment!r}" if experiment is not None else "any experiment"
        which = f" of sweep {sweep!r}" if sweep is not None else ""
        raise ConfigError(
            f"no training runs{which} in {where} at {client.tracking_uri} "
            f"(looked for tag {TAG_KIND}={RunKind.RUN}); check the names, or sync the runs' tracking first"
        )
    runs.sort(key=lambda r: (r.info.run_name or "", r.info.run_id))
    return [r.info.run_id for r in runs]


def _filter_literal(value: str) -> str:
    """``value`` as a quoted string of MLflow's search filter syntax."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def download_run(
    client: MlflowClient, uri: str, *, run_id: str, artifact_dir: str, into: Path
) -> StoredRun:
    """The run ``run_id`` of ``client``'s store (at ``uri``), its ``artifact_dir`` artifacts
    downloaded under ``into`` (none there: nothing is downloaded).

    An unknown run id raises :class:`ConfigError`.
    """
    mlflow_exception = load_mlflow().exceptions.MlflowException
    try:
        run = client.get_run(run_id)
    except mlflow_exception as exc:
        raise ConfigError(f"no MLflow run {run_id!r} at {uri}: {exc}") from exc
    with contextlib.suppress(mlflow_exception, OSError), _no_progress_bars():
        client.download_artifacts(run_id, artifact_dir, str(into))
    began, ended = run.info.start_time, run.info.end_time
    seconds = (ended - began) / 1000 if began and ended and ended >= began else None
    return StoredRun(run_id, run.info.run_name or run_id, dict(run.data.tags), seconds)


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """MLflow draws a download progress bar per run on stderr unless told not to."""
    previous = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
        else:
            os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = previous
