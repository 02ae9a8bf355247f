"""Sending a run folder to MLflow: params, tags, metrics and artifacts, incrementally.

Design decision: the run folder is the durable buffer
-----------------------------------------------------
Training never writes to MLflow directly. It writes the JSONL files of its run
folder (``titan/zephon/steps.jsonl``, ``metrics.jsonl``, ``eval.jsonl``, see
:mod:`orchestrator.experiment.runfolder`), line by line and crash-safe, and :class:`Tracker`
*copies* what is new in them to MLflow. ``run.json`` keeps a cursor of what was
sent (``"tracking": {"metrics_step": <last step sent>, "eval_step": <last eval
step sent>}``), advanced only after MLflow accepted the batch that carried those
steps. So:

* Before launch, :func:`check_tracking` fails fast with a clear error when the
  tracking server cannot be reached, unless the user opted in to offline
  training (``tracking.offline_ok=true``; the caller decides, not this module).
* If the server goes away *during* training, :meth:`Tracker.sync` raises
  :class:`TrackingUnavailable` quickly (an HTTP server is pinged before each
  sync) without advancing the cursor; the caller warns once and keeps training,
  retrying later. Nothing is lost: the lines stay in the run folder.
* The final :meth:`Tracker.finish`, or ``zephon sync <run folder>``
  (:func:`sync_folder`) later, sends everything not yet sent, exactly once: the
  cursor makes every sync idempotent and incremental. MLflow keeps every point
  logged, so sending a step twice would duplicate it; the cursor prevents that.
* Even the MLflow run itself can be created late: :meth:`Tracker.start` records
  the tracking URI, experiment and tags in ``run.json`` *before* contacting the
  server, so a run trained fully offline is created by its first successful sync.

A step is sent whole, once its metrics are in: while training runs (``final=False``)
steps after the newest step with a loss in ``metrics.jsonl`` are held back, because
a step's data line is written when its data is handed over, before the step's
loss exists. ``final=True`` (the final sync of a run that succeeded) sends
everything; a run that failed or was interrupted keeps its loss-less last step
pending, since a resume trains it again. A resumed run continues the same
MLflow run; steps redone after the resume that were already sent keep their
first value (one point per step).

Residual window: if the process dies after MLflow accepted a batch but before
``run.json`` recorded it, the next sync resends that one batch (at most 1000
points). MLflow offers no idempotent metric write to close it.

MLflow is imported lazily (1-2 s): importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from orchestrator.errors import NotTracked, TrackingError, TrackingUnavailable
from orchestrator.experiment.runfolder import (
    EVAL_FILE,
    EXPERIMENT_FILE,
    RUN_SUBDIR,
    STEPS_FILE,
    RunFolder,
)
from orchestrator.filelock import file_lock
from orchestrator.tracking.names import (
    ARTIFACT_EVAL,
    ARTIFACT_EXPERIMENT,
    ARTIFACT_STEPS,
    METRIC_DATA_WAIT,
    METRIC_EVAL_AGGREGATE,
    METRIC_LOSS,
    METRIC_TOKENS_PER_S,
    PARAM_CONTRACT_PREFIX,
    PARAM_MIX_PREFIX,
    PARAM_PRECISION,
    TAG_CONTRACT,
    TAG_DATA_FINGERPRINT,
    TAG_DEVICE,
    TAG_DP_HISTORY,
    TAG_DP_SIZE,
    TAG_GIT,
    TAG_INIT,
    TAG_KIND,
    TAG_PARENT_RUN,
    TAG_PRECISION,
    TAG_RECIPE,
    TAG_RUN_FOLDER,
    TAG_STATUS,
    TAG_STEPS,
    TAG_SWEEP,
    TAG_VARIANT,
    TAG_VERSIONS,
    eval_metric,
    flatten,
    metric_key,
)

if TYPE_CHECKING:
    from mlflow import MlflowClient

_log = logging.getLogger(__name__)

DEFAULT_DB = "mlflow.db"
"""File name of the embedded SQLite store used when no tracking URI is configured."""

# MLflow 3.17's limits (mlflow.utils.validation): values longer than these are rejected.
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
MAX_KEY = 250

TITAN_LOSS = "loss_metrics/global_avg_loss"
TITAN_THROUGHPUT = "throughput_tps"
STEP_DATA_WAIT = "data_wait_s"
LAUNCH_LOG_ARTIFACT = "logs/launch.log"

MLFLOW_STATUS = {"succeeded": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
"""Orchestrator status -> MLflow run status, for :meth:`Tracker.finish`."""

VERSIONED_PACKAGES = ("zephon", "torch", "torchtitan", "mlflow", "tiktoken")

_OFFLINE_HINT = (
    "Start the MLflow server, fix tracking.uri, or set tracking.offline_ok=true to train now "
    "and send the metrics later with `zephon sync <run folder>`."
)


# -- URIs and the pre-launch check ------------------------------------------------------------


def resolve_uri(uri: str | None, workdir: Path) -> str:
    """The tracking URI to use: ``uri``, or the embedded SQLite store ``<workdir>/mlflow.db``.

    A relative SQLite path (``sqlite:///runs.db``) is made absolute against ``workdir``,
    so the URI stored in ``run.json`` still works from another working directory.
    """
    if not uri:
        return f"sqlite:///{(Path(workdir) / DEFAULT_DB).resolve()}"
    db = _sqlite_path(uri)
    if db is not None and not db.is_absolute():
        return f"sqlite:///{(Path(workdir) / db).resolve()}"
    return uri


def _sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:`` URI (None for other URIs and in-memory databases)."""
    if not uri.startswith("sqlite:"):
        return None
    rest = uri[len("sqlite:") :]
    if not rest.startswith("///"):
        return None
    path = rest[3:].split("?", 1)[0]
    return Path(unquote(path)) if path and path != ":memory:" else None


def _is_http(uri: str) -> bool:
    return urlparse(uri).scheme in ("http", "https")


def reachable_uri(uri: str | None, offline_ok: bool, workdir: Path) -> str | None:
    """The resolved tracking URI if its store answers now; None if it does not and
    ``offline_ok`` allows training without it; :class:`TrackingUnavailable` otherwise."""
    resolved = resolve_uri(uri, workdir)
    try:
        check_tracking(resolved)
    except TrackingUnavailable:
        if not offline_ok:
            raise
        return None
    return resolved


def check_tracking(uri: str, timeout_s: float = 5.0) -> None:
    """Check before launch that ``uri`` can take a run; raise :class:`TrackingError` if not.

    * ``sqlite:`` - the database's folder exists (or can be created) and is writable;
      the database is created (and migrated) now, so training does not pay for it.
    * ``http(s):`` - ``GET <uri>/health`` answers ``OK`` within ``timeout_s``; otherwise
      :class:`TrackingUnavailable`, naming the URI and the ways out (start the server,
      fix ``tracking.uri``, or ``tracking.offline_ok=true`` and ``zephon sync`` later).
    * anything else - MLflow is asked to list one experiment.
    """
    if _is_http(uri):
        _ping(uri, timeout_s)
        return
    db = _sqlite_path(uri)
    if db is not None:
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TrackingError(
                f"Cannot create the folder of the MLflow database {db} ({e}); fix tracking.uri."
            ) from e
        if not os.access(db.parent, os.W_OK) or (db.exists() and not os.access(db, os.W_OK)):
            raise TrackingError(
                f"The MLflow database {db} is not writable; fix its permissions or tracking.uri."
            )
    with _mlflow_errors(uri, "checking the tracking store"):
        _client(uri).search_experiments(max_results=1)


def _ping(uri: str, timeout_s: float = 5.0, folder: RunFolder | None = None) -> None:
    """``GET <uri>/health``; :class:`TrackingUnavailable` unless the server answers ``OK``.

    The message names the ways out: before launch (no ``folder``) starting the server,
    fixing the URI or training offline; during a run, that nothing is lost.
    """
    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body = response.read(100).decode(errors="replace").strip()
    except urllib.error.HTTPError as e:
        reason = f"GET {url} answered HTTP {e.code}"
    except (urllib.error.URLError, OSError) as e:
        reason = f"GET {url} failed: {getattr(e, 'reason', e)}"
    else:
        if body == "OK":
            return
        reason = f"GET {url} answered {body!r}, not 'OK': is this an MLflow server?"
    raise TrackingUnavailable(
        f"MLflow tracking server {uri} is not reachable ({reason}).{_later(folder)}"
    )


def _later(folder: RunFolder | None) -> str:
    """What to do about an unreachable store: before launch, or while/after ``folder`` trains."""
    if folder is None:
        return f" {_OFFLINE_HINT}"
    return (
        f" Nothing is lost: what was not sent stays in {folder.path} and goes with the next sync, "
        f"the final one, or `zephon sync {folder.path}`."
    )


# -- MLflow plumbing --------------------------------------------------------------------------


def _quiet_mlflow() -> None:
    """MLflow logs every schema migration of a new SQLite store at INFO: keep warnings only."""
    for name in ("alembic", "mlflow.store.db.utils", "mlflow.store.db.db_types"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _client(uri: str) -> MlflowClient:
    """An ``MlflowClient`` for exactly ``uri`` (never the process-wide default URI).

    Creating the client opens its store; on a new SQLite database that runs MLflow's schema
    migrations, which fail when two processes run them at once (``AttributeError:
    dimension_attributes``: two jobs of a sweep or of the job service starting together).
    So a process opens a SQLite store holding a lock file next to the database.
    """
    _quiet_mlflow()
    from mlflow import MlflowClient

    db = _sqlite_path(uri)
    with contextlib.nullcontext() if db is None else file_lock(db.with_name(f"{db.name}.lock")):
        return MlflowClient(tracking_uri=uri, registry_uri=uri)


def _unavailable(error: BaseException) -> bool:
    """Whether ``error`` means the store cannot be reached (worth a retry), not a rejection."""
    from mlflow.exceptions import MlflowException

    if isinstance(error, (ConnectionError, TimeoutError)):
        return True
    try:
        import requests
    except ImportError:  # pragma: no cover - mlflow depends on requests
        requests = None
    if requests is not None and isinstance(error, requests.exceptions.RequestException):
        return True
    if isinstance(error, MlflowException):
        if error.error_code in ("TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED"):
            return True
        # mlflow.utils.rest_utils wraps connection failures and exhausted retries this way.
        if str(error.message).startswith("API request to"):
            return True
        status = error.get_http_status_code()
        return status is not None and status >= 500 and error.error_code != "INTERNAL_ERROR"
    return False


@contextlib.contextmanager
def _mlflow_errors(uri: str, doing: str, folder: RunFolder | None = None) -> Iterator[None]:
    """Turn MLflow and transport errors into :class:`TrackingUnavailable` / :class:`TrackingError`."""
    try:
        yield
    except TrackingError:
        raise
    except Exception as e:
        from mlflow.exceptions import MlflowException

        if _unavailable(e):
            raise TrackingUnavailable(
                f"MLflow tracking store {uri} is not reachable while {doing}: {e}.{_later(folder)}"
            ) from e
        if isinstance(e, MlflowException):
            raise TrackingError(f"MLflow ({uri}) refused {doing}: {e}") from e
        raise


def _now_ms() -> int:
    return int(time.time() * 1000)


def _precision(experiment: dict[str, Any]) -> str | None:
    """The precision a run folder's ``experiment.json`` records (None: recorded before
    ``train.precision`` existed)."""
    return ((experiment.get("config") or {}).get("train") or {}).get("precision")


def param_value(value: object) -> str:
    """``value`` as MLflow stores a param: a string (JSON unless it is one), cut to the limit."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text[:MAX_PARAM_VALUE]


def _number(value: object) -> float | None:
    """``value`` as a float if it is a number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages a run's results depend on (None if absent)."""
    versions: dict[str, str | None] = {}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_revision(cwd: Path | None = None) -> str:
    """``git describe --always --dirty`` of the checkout holding this file, or ``unknown``."""
    cwd = Path(__file__).resolve().parent if cwd is None else cwd
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    revision = done.stdout.strip()
    return revision if done.returncode == 0 and revision else "unknown"


def run_start_tags(folder: RunFolder) -> dict[str, str]:
    """The tags a training run's MLflow run starts with, from its run folder alone.

    Fingerprints (contract, variant, recipe, initial checkpoint), precision and the
    folder from ``experiment.json``; the device of the latest launch segment and the sweep
    from ``run.json``; versions and git revision of this checkout. A run
    tracked from its launch and one trained offline and created later by ``zephon sync``
    get the same tags, so ``compare --sweep`` finds both.
    """
    experiment = folder.experiment()
    state = folder.state()
    segments = state.get("segments") or []
    precision = _precision(experiment)
    return {
        TAG_KIND: "run",
        TAG_CONTRACT: str(experiment.get("contract_fingerprint", "")),
        TAG_VARIANT: str(experiment.get("variant", "")),
        TAG_RECIPE: str(experiment.get("recipe_fingerprint", "")),
        TAG_INIT: str((experiment.get("init_checkpoint") or {}).get("sha256", "")),
        TAG_RUN_FOLDER: str(folder.path.resolve()),
        TAG_VERSIONS: json.dumps(package_versions(), sort_keys=True),
        TAG_GIT: git_revision(),
        TAG_DEVICE: str(segments[-1].get("device") or "cpu") if segments else "cpu",
        **({TAG_PRECISION: precision} if precision else {}),
        **({TAG_SWEEP: str(state["sweep"])} if state.get("sweep") else {}),
    }


def run_parent(folder: RunFolder) -> str | None:
    """The MLflow run a training run is a child of (its sweep's parent run), from ``run.json``."""
    return folder.state().get("parent_run_id") or None


# -- the tracker ------------------------------------------------------------------------------


class Tracker:
    """Mirrors run folders into one MLflow experiment of one tracking store.

    ``start`` once per launch segment, ``sync`` as often as wanted while training,
    ``finish`` at the end. Every method raises :class:`TrackingUnavailable` when the
    store cannot be reached, leaving ``run.json`` so that a later call resumes.
    """

    def __init__(self, uri: str, experiment: str = "zephon") -> None:
        self.uri = uri
        self.experiment = experiment
        self._client_obj: MlflowClient | None = None
        self._experiment_id: str | None = None

    def __repr__(self) -> str:
        return f"Tracker({self.uri!r}, experiment={self.experiment!r})"

    @property
    def client(self) -> MlflowClient:
        """The ``MlflowClient`` of this tracker's URI (created on first use)."""
        if self._client_obj is None:
            self._client_obj = _client(self.uri)
        return self._client_obj

    # -- run creation ---------------------------------------------------------------------

    def start(
        self,
        folder: RunFolder,
        *,
        tags: dict[str, str] | None = None,
        parent_run_id: str | None = None,
    ) -> str:
        """Create (or, on a resume, reopen) the MLflow run of ``folder``; return its id.

        The run gets :func:`run_start_tags` and :func:`run_parent` of the folder (what a
        run created later by ``zephon sync`` gets too); ``tags`` and ``parent_run_id`` add
        to or replace them. The URI, experiment, ``tags`` and ``parent_run_id`` are
        written to ``run.json`` first, so if the store is unreachable
        (:class:`TrackingUnavailable`) a later :meth:`sync` or ``zephon sync`` can still
        create the run. A ``run.json`` that already names an MLflow run found in this
        store reuses it and marks it RUNNING again; one not found there (another store,
        a deleted run) gets a new run and everything is sent to it from the start.
        """
        state = folder.state()
        tracking = dict(state.get("tracking") or {})
        tracking["tags"] = dict(tags or {})
        tracking["parent_run_id"] = parent_run_id
        folder.update_state(
            tracking_uri=self.uri, mlflow_experiment=self.experiment, tracking=tracking
        )
        return self._open_run(folder, reopen=True)

    def _open_run(self, folder: RunFolder, *, reopen: bool) -> str:
        """The id of ``folder``'s run in this store, created if needed; params and tags logged."""
        if _is_http(self.uri):
            _ping(self.uri, folder=folder)
        state = folder.state()
        tracking = dict(state.get("tracking") or {})
        run_id = state.get("mlflow_run_id")
        with _mlflow_errors(self.uri, f"opening the MLflow run of {folder.path}", folder):
            run = self._existing_run(run_id) if run_id else None
            if run is None:
                if run_id:
                    _log.warning(
                        "MLflow run %s of %s is not in %s (or was deleted): creating a new run "
                        "and sending everything to it.",
                        run_id,
                        folder.path,
                        self.uri,
                    )
                run_id = self.new_run(
                    folder.name,
                    kind="run",
                    parent_run_id=tracking.get("parent_run_id") or run_parent(folder),
                )
                tracking = {
                    "tags": tracking.get("tags") or {},
                    "parent_run_id": tracking.get("parent_run_id"),
                }
                folder.update_state(
                    mlflow_run_id=run_id,
                    tracking_uri=self.uri,
                    mlflow_experiment=self.experiment,
                    tracking=tracking,
                )
                logged: dict[str, str] = {}
            else:
                if reopen and run.info.status != "RUNNING":
                    self.client.update_run(run_id, status="RUNNING")
                logged = dict(run.data.params)
            if reopen or not tracking.get("params_logged"):
                self._log_params(folder, run_id, logged)
                self._log_tags(run_id, self._start_tags(folder, tracking.get("tags") or {}))
                tracking["params_logged"] = True
                folder.update_state(tracking=tracking)
        return run_id

    def _existing_run(self, run_id: str) -> Any:
        """The active run ``run_id`` in this store, or None if it is absent or deleted."""
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
        except MlflowException as e:
            if e.error_code == "RESOURCE_DOES_NOT_EXIST" or (
                e.error_code == "INVALID_PARAMETER_VALUE" and not _unavailable(e)
            ):
                return None
            raise
        return None if run.info.lifecycle_stage == "deleted" else run

    def experiment_id(self) -> str:
        """Id of this tracker's experiment, created on first use (artifacts beside a SQLite db)."""
        if self._experiment_id is not None:
            return self._experiment_id
        from mlflow.exceptions import MlflowException

        experiment = self.client.get_experiment_by_name(self.experiment)
        if experiment is None:
            location = None
            db = _sqlite_path(self.uri)
            if db is not None:
                safe = metric_key(self.experiment).replace("/", "_").replace(" ", "_") or "zephon"
                location = (db.resolve().parent / "mlruns" / safe).as_uri()
            try:
                self._experiment_id = self.client.create_experiment(
                    self.experiment, artifact_location=location
                )
            except MlflowException as e:  # created concurrently by another run of a sweep
                if e.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
                experiment = self.client.get_experiment_by_name(self.experiment)
        if experiment is not None:
            if experiment.lifecycle_stage == "deleted":
                raise TrackingError(
                    f"MLflow experiment {self.experiment!r} in {self.uri} is deleted: restore it "
                    f"(`mlflow experiments restore --experiment-id {experiment.experiment_id}`) "
                    "or choose another experiment name."
                )
            self._experiment_id = experiment.experiment_id
        assert self._experiment_id is not None
        return self._experiment_id

    def new_run(
        self,
        name: str,
        *,
        kind: str,
        tags: dict[str, str] | None = None,
        params: dict[str, object] | None = None,
        parent_run_id: str | None = None,
    ) -> str:
        """Create a RUNNING run named ``name``, tagged ``TAG_KIND=kind`` and ``tags``, with
        ``params`` (formatted by :func:`param_value`); return its id. Every Zephon run
        (trained, sweep parent, comparison, planned job) is created here."""
        from mlflow.entities import Param

        all_tags = {TAG_KIND: kind, **(tags or {})}
        if parent_run_id:
            all_tags[TAG_PARENT_RUN] = parent_run_id
        with _mlflow_errors(self.uri, f"creating the MLflow run {name}"):
            run_id = self.client.create_run(
                self.experiment_id(), tags=all_tags, run_name=name
            ).info.run_id
            batch = [Param(k, param_value(v)) for k, v in sorted((params or {}).items())]
            for chunk in _chunks(batch, MAX_PARAMS_TAGS_PER_BATCH):
                self.client.log_batch(run_id, params=chunk, synchronous=True)
        return run_id

    def tag_run(self, run_id: str, tags: dict[str, str]) -> None:
        """Set ``tags`` on the run ``run_id`` (cut to MLflow's limits)."""
        with _mlflow_errors(self.uri, f"tagging MLflow run {run_id}"):
            self._log_tags(run_id, tags)

    def attach_files(self, run_id: str, paths: list[Path]) -> None:
        """Attach the files ``paths`` to the run ``run_id``, at its artifact root."""
        with _mlflow_errors(self.uri, f"sending artifacts to MLflow run {run_id}"):
            for path in paths:
                self.client.log_artifact(run_id, str(path))

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int) -> None:
        """Log ``metrics`` at ``step`` into the run ``run_id`` (a search's round figures)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(key, float(value), now, step) for key, value in sorted(metrics.items())]
        with _mlflow_errors(self.uri, f"logging metrics to MLflow run {run_id}"):
            self.client.log_batch(run_id, metrics=batch, synchronous=True)

    def find_runs(self, filter_string: str) -> list[Any]:
        """Runs of this tracker's experiment matching MLflow's ``filter_string``."""
        with _mlflow_errors(self.uri, "searching MLflow runs"):
            return list(self.client.search_runs([self.experiment_id()], filter_string))

    def download_run(self, run_id: str, artifact_dir: str, into: Path) -> StoredRun:
        """The run ``run_id``, its ``artifact_dir`` artifacts downloaded under ``into`` (none
        there: nothing is downloaded). An unknown run id raises ``ValueError``."""
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
        except MlflowException as exc:
            raise ValueError(f"no MLflow run {run_id!r} at {self.uri}: {exc}") from exc
        with contextlib.suppress(MlflowException, OSError), _no_progress_bars():
            self.client.download_artifacts(run_id, artifact_dir, str(into))
        return StoredRun(run_id, run.info.run_name or run_id, dict(run.data.tags))

    def reopen_run(self, run_id: str) -> None:
        """Mark the run ``run_id`` RUNNING again (a continued sweep's parent)."""
        with _mlflow_errors(self.uri, f"reopening MLflow run {run_id}"):
            self.client.update_run(run_id, status="RUNNING")

    def end_run(self, run_id: str, status: str) -> None:
        """End the run ``run_id`` as ``FINISHED``, ``FAILED`` or ``KILLED``."""
        if status not in MLFLOW_STATUS.values():
            raise ValueError(f"unknown MLflow run status {status!r}; use one of {MLFLOW_STATUS}")
        with _mlflow_errors(self.uri, f"ending MLflow run {run_id}"):
            self.client.set_terminated(run_id, status)

    def _log_params(self, folder: RunFolder, run_id: str, logged: dict[str, str]) -> None:
        """Mixture shares and flattened contract fields not yet on the run (params are immutable)."""
        from mlflow.entities import Param

        experiment = folder.experiment()
        params: dict[str, str] = {}
        for name, share in (experiment.get("mixture") or {}).items():
            params[metric_key(PARAM_MIX_PREFIX + str(name))[:MAX_KEY]] = param_value(share)
        precision = _precision(experiment)
        if precision:
            params[PARAM_PRECISION] = precision
        for key, value in flatten(experiment.get("contract") or {}).items():
            params[metric_key(PARAM_CONTRACT_PREFIX + key)[:MAX_KEY]] = param_value(value)
        for key in [k for k in params if k in logged]:
            if logged[key] != params.pop(key):
                _log.warning("MLflow param %s of run %s differs from %s; kept", key, run_id, folder)
        batch = [Param(k, v) for k, v in sorted(params.items())]
        for chunk in _chunks(batch, MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(run_id, params=chunk, synchronous=True)

    def _start_tags(self, folder: RunFolder, tags: dict[str, str]) -> dict[str, str]:
        return {**run_start_tags(folder), **{str(k): str(v) for k, v in tags.items()}}

    def _log_tags(self, run_id: str, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        batch = [RunTag(k[:MAX_KEY], v[:MAX_TAG_VALUE]) for k, v in tags.items()]
        for chunk in _chunks(batch, MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(run_id, tags=chunk, synchronous=True)

    # -- syncing ----------------------------------------------------------------------------

    def sync(self, folder: RunFolder, *, final: bool = False) -> dict[str, int]:
        """Send what MLflow does not have yet; return ``{"metrics", "steps", "evals"}`` sent.

        Idempotent and incremental (cursor in ``run.json["tracking"]``). Metrics go in
        ``log_batch`` calls of at most 1000 points, a step's points together when they
        fit; the cursor advances after each accepted call. Tags (data fingerprint,
        steps, dp sizes, status) and the changed artifacts follow. ``final=False``
        holds back steps newer than the newest step with a loss in ``metrics.jsonl``
        (their loss may still be coming); ``final=True`` sends everything. Raises
        :class:`TrackingUnavailable` when the store cannot be reached: what was not
        accepted stays pending and goes with the next sync.
        """
        state = folder.state()
        run_id = state.get("mlflow_run_id")
        if not run_id:
            if not state.get("tracking_uri"):
                raise TrackingError(
                    f"{folder.path} has no MLflow run: call Tracker.start(folder) first."
                )
            run_id = self._open_run(folder, reopen=False)  # trained offline so far
        elif _is_http(self.uri):
            _ping(self.uri, folder=folder)
        if not (folder.state().get("tracking") or {}).get("params_logged"):
            run_id = self._open_run(folder, reopen=False)
        with _mlflow_errors(self.uri, f"syncing {folder.path}", folder):
            counts = self._send_metrics(folder, run_id, final)
            self._log_tags(run_id, self._progress_tags(folder))
            self._send_artifacts(folder, run_id)
        return counts

    def _send_metrics(self, folder: RunFolder, run_id: str, final: bool) -> dict[str, int]:
        from mlflow.entities import Metric

        tracking = dict(folder.state().get("tracking") or {})
        last_step = tracking.get("metrics_step")
        last_eval = tracking.get("eval_step")
        metrics, steps, evals = folder.metrics(), folder.steps(), folder.evals()
        # A step's data line comes before TorchTitan's loss line: hold back every step
        # after the newest one whose loss is in (unless this is the final sync).
        horizon = (
            None if final else max((s for s, m in metrics.items() if TITAN_LOSS in m), default=None)
        )
        now = _now_ms()

        # Units: (cursor field, step, points); each unit goes whole into the cursor.
        units: list[tuple[str, int, list[Any]]] = []
        for step in sorted(set(metrics) | set(steps)):
            if (last_step is not None and step <= last_step) or (
                not final and (horizon is None or step > horizon)
            ):
                continue
            values: dict[str, float] = {}
            for name, raw in metrics.get(step, {}).items():
                value = _number(raw)
                if name == "step" or value is None:
                    continue
                key = {TITAN_LOSS: METRIC_LOSS, TITAN_THROUGHPUT: METRIC_TOKENS_PER_S}.get(
                    name, metric_key(name)
                )
                if key:
                    values[key[:MAX_KEY]] = value
            wait = _number(steps.get(step, {}).get(STEP_DATA_WAIT))
            if wait is not None:
                values[METRIC_DATA_WAIT] = wait
            units.append(
                ("metrics_step", step, [Metric(k, v, now, step) for k, v in values.items()])
            )
        for step in sorted(evals):
            if last_eval is not None and step <= last_eval:
                continue
            record = evals[step]
            bpb = {str(d): _number(x) for d, x in (record.get("bpb") or {}).items()}
            values = {eval_metric(d): x for d, x in bpb.items() if x is not None}
            aggregate = _number(record.get("aggregate_bpb"))
            if aggregate is None and values:
                aggregate = math.fsum(values.values()) / len(values)
            if aggregate is not None:
                values[METRIC_EVAL_AGGREGATE] = aggregate
            units.append(("eval_step", step, [Metric(k, v, now, step) for k, v in values.items()]))

        counts = {"metrics": 0, "steps": 0, "evals": 0}
        batch: list[Any] = []
        closes: list[tuple[str, int]] = []  # units whose last point is in ``batch``

        def flush() -> None:
            if batch:
                self.client.log_batch(run_id, metrics=batch, synchronous=True)
                counts["metrics"] += len(batch)
            if closes:
                for field, step in closes:
                    tracking[field] = step
                    counts["steps" if field == "metrics_step" else "evals"] += 1
                folder.update_state(tracking=tracking)
            batch.clear()
            closes.clear()

        for field, step, points in units:
            if batch and len(batch) + len(points) > MAX_METRICS_PER_BATCH:
                flush()
            for point in points:
                if len(batch) == MAX_METRICS_PER_BATCH:  # a unit larger than a batch
                    self.client.log_batch(run_id, metrics=batch, synchronous=True)
                    counts["metrics"] += len(batch)
                    batch.clear()
                batch.append(point)
            closes.append((field, step))
        flush()
        return counts

    def _progress_tags(self, folder: RunFolder) -> dict[str, str]:
        state = folder.state()
        steps = folder.steps()
        tags: dict[str, str] = {TAG_STEPS: str(max(steps, default=0))}
        if steps:
            tags[TAG_DATA_FINGERPRINT] = str(steps[max(steps)]["data_fingerprint"])
        segments = [s for s in state.get("segments") or [] if "dp_size" in s]
        if segments:
            tags[TAG_DP_SIZE] = str(segments[-1]["dp_size"])
            tags[TAG_DP_HISTORY] = ",".join(str(s["dp_size"]) for s in segments)
        if state.get("status"):
            tags[TAG_STATUS] = str(state["status"])
        return tags

    def _send_artifacts(self, folder: RunFolder, run_id: str) -> None:
        """Upload the run folder's files that changed since the last upload (overwriting)."""
        files = {
            ARTIFACT_EXPERIMENT: folder.path / EXPERIMENT_FILE,
            ARTIFACT_STEPS: folder.titan_dir / RUN_SUBDIR / STEPS_FILE,
            ARTIFACT_EVAL: folder.titan_dir / RUN_SUBDIR / EVAL_FILE,
            LAUNCH_LOG_ARTIFACT: folder.log_path,
        }
        tracking = dict(folder.state().get("tracking") or {})
        sent = dict(tracking.get("artifacts") or {})
        for name, path in files.items():
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            if path.name != name.rsplit("/", 1)[-1]:  # pragma: no cover - names are fixed
                raise AssertionError(f"{path} cannot be stored as artifact {name}")
            signature = [stat.st_size, stat.st_mtime_ns]
            if sent.get(name) == signature:
                continue
            self.client.log_artifact(run_id, str(path), artifact_path=name.rsplit("/", 1)[0])
            sent[name] = signature
            tracking["artifacts"] = sent
            folder.update_state(tracking=tracking)

    # -- the end ----------------------------------------------------------------------------

    def finish(self, folder: RunFolder, status: str) -> None:
        """Final sync, then end the MLflow run: succeeded/failed/interrupted -> FINISHED/FAILED/KILLED.

        A run that did not succeed keeps its steps without a loss (the one a kill
        interrupted) pending: a resume trains them again and sends them once.

        Raises :class:`TrackingUnavailable` if the store cannot be reached; the run then
        stays RUNNING in MLflow until ``zephon sync <folder>`` (which ends it as
        ``run.json``'s status says).
        """
        self._finish(folder, status)

    def _finish(self, folder: RunFolder, status: str) -> dict[str, int]:
        if status not in MLFLOW_STATUS:
            raise ValueError(
                f"unknown run status {status!r}; expected one of {sorted(MLFLOW_STATUS)}"
            )
        # Only a finished run sends steps without a loss: an interrupted step is trained
        # again after a resume, and its values come then.
        counts = self.sync(folder, final=status == "succeeded")
        run_id = folder.state()["mlflow_run_id"]
        with _mlflow_errors(self.uri, f"ending the MLflow run of {folder.path}", folder):
            self._log_tags(run_id, {TAG_STATUS: status})
            if self.client.get_run(run_id).info.status != MLFLOW_STATUS[status]:
                self.client.set_terminated(run_id, status=MLFLOW_STATUS[status])
        return counts


def sync_folder(folder: RunFolder) -> dict[str, int]:
    """``zephon sync``: send everything pending of ``folder`` to the store named in its ``run.json``.

    Creates the MLflow run if the run trained offline from the start. A run whose
    ``run.json`` status is final (succeeded, failed, interrupted) is sent (in full if it
    succeeded; see :meth:`Tracker.finish`) and its MLflow run ended accordingly; a ``running`` one is synced as during training
    (steps whose metrics may still come are held back). Raises :class:`TrackingError`
    if the folder was never tracked, :class:`TrackingUnavailable` if the store is down.
    """
    state = folder.state()
    uri = state.get("tracking_uri")
    if not uri:
        what = "has no run.json" if not state else "has no tracking_uri in run.json"
        raise NotTracked(
            f"{folder.path} was never tracked ({what}): nothing to sync. Runs launched with "
            "tracking record their tracking URI there; check the folder path."
        )
    tracker = Tracker(uri, state.get("mlflow_experiment") or "zephon")
    status = state.get("status")
    if status in MLFLOW_STATUS:
        return tracker._finish(folder, status)
    return tracker.sync(folder)


# -- reading runs (the guard's view) ----------------------------------------------------------


@dataclass
class StoredRun:
    """A run as the store holds it."""

    run_id: str
    name: str
    """The run's name (its id if it has none)."""
    tags: dict[str, str]


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def training_run_ids(
    uri: str, *, experiment: str | None = None, sweep: str | None = None
) -> list[str]:
    """Ids of the training runs (``TAG_KIND == "run"``) of ``experiment`` (name; all
    experiments if None), only those of ``sweep`` if given; ordered by run name, then id.

    Raises ``ValueError`` if the experiment does not exist or no run matches.
    """
    client = _client(uri)
    if experiment is not None:
        found = client.get_experiment_by_name(experiment)
        if found is None:
            raise ValueError(f"no MLflow experiment named {experiment!r} at {client.tracking_uri}")
        experiment_ids = [found.experiment_id]
    else:
        experiment_ids = [e.experiment_id for e in client.search_experiments()]
    query = f"tags.`{TAG_KIND}` = 'run'"
    if sweep is not None:
        query += f" and tags.`{TAG_SWEEP}` = {_quote(sweep)}"
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
        raise ValueError(
            f"no training runs{which} in {where} at {client.tracking_uri} "
            f"(looked for tag {TAG_KIND}=run); check the names, or sync the runs' tracking first"
        )
    runs.sort(key=lambda r: (r.info.run_name or "", r.info.run_id))
    return [r.info.run_id for r in runs]


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """MLflow draws a download progress bar per run on stderr unless told not to."""
    import os

    previous = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
        else:
            os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = previous
