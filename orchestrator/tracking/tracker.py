"""The Tracker: the one writer of MLflow runs; a run folder -> its MLflow run, incrementally.

Params, tags, dataset inputs, metrics and artifacts, sent from the run folder (see
:class:`Tracker` for why the folder is the buffer); MLflow is imported on first use
(:mod:`.store`), not on import."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import TrackingError
from orchestrator.experiment.run_record import RunState, RunStatus, TrackingCursor
from orchestrator.experiment.runfolder import (
    EVAL_FILE,
    EXPERIMENT_FILE,
    RUN_SUBDIR,
    STEPS_FILE,
    TASKS_FILE,
)
from orchestrator.tracking.inputs import InputRecord, mirrored_display_name, mirrored_inputs
from orchestrator.tracking.metric_units import send_metrics
from orchestrator.tracking.mirrored_run import MirroredRun
from orchestrator.tracking.mlflow_names import (
    ARTIFACT_EVAL,
    ARTIFACT_EXPERIMENT,
    ARTIFACT_STEPS,
    ARTIFACT_TASKS,
    PARAM_CONTRACT_PREFIX,
    PARAM_MIX_PREFIX,
    PARAM_PRECISION,
    TAG_DATA_FINGERPRINT,
    TAG_DP_HISTORY,
    TAG_DP_SIZE,
    TAG_KIND,
    TAG_PARENT_RUN,
    TAG_STATUS,
    TAG_STEPS,
    flatten,
    metric_key,
)
from orchestrator.tracking.mlflow_status import ENDED, MLFLOW_STATUS, MlflowStatus
from orchestrator.tracking.provenance import run_start_tags
from orchestrator.tracking.run_kind import RunKind
from orchestrator.tracking.store import (
    MAX_KEY,
    client_for,
    is_unavailable,
    log_params,
    log_points,
    log_tags,
    mlflow_error_code,
    mlflow_errors,
    now_ms,
    param_value,
    sqlite_path,
)
from orchestrator.tracking.store_reader import StoredRun, download_run
from orchestrator.tracking.uris import is_http, ping_server

if TYPE_CHECKING:  # annotations only; load_mlflow() imports MLflow at run time
    from mlflow import MlflowClient

_log = logging.getLogger(__name__)

LAUNCH_LOG_ARTIFACT = "logs/launch.log"
INPUT_ATTEMPTS = 4
"""Tries to log a run's dataset inputs when MLflow refuses them (see ``Tracker._log_inputs``)."""


class Tracker:
    """Mirrors run folders into one MLflow experiment of one tracking store.

    ``start`` once per launch segment, ``sync`` as often as wanted while training,
    ``finish`` at the end, each given the run (:class:`MirroredRun`): its records as their
    owner holds them, and the owner's ``commit`` for the cursor. Every method raises
    :class:`TrackingUnavailable` when the store cannot be reached, the cursor recorded so
    that a later call resumes.

    Why the run folder is the buffer, and what a sync guarantees:
    docs/design/orchestrator_tracking.md.
    """

    def __init__(self, uri: str, experiment: str = "zephon") -> None:
        self.uri = uri
        self.experiment = experiment
        self._client_obj: MlflowClient | None = None
        self._experiment_id: str | None = None
        self._found: set[str] = set()
        """Runs this tracker found in its store (or made there): a sync looks each up once."""

    def __repr__(self) -> str:
        return f"Tracker({self.uri!r}, experiment={self.experiment!r})"

    @property
    def client(self) -> MlflowClient:
        """The ``MlflowClient`` of this tracker's URI (created on first use)."""
        if self._client_obj is None:
            self._client_obj = client_for(self.uri)
        return self._client_obj

    # -- run creation ---------------------------------------------------------------------

    def start(
        self,
        run: MirroredRun,
        *,
        tags: dict[str, str] | None = None,
        parent_run_id: str | None = None,
    ) -> str:
        """Create (or, on a resume, reopen) the MLflow run of ``run``; return its id.

        The run is named by what it varies (:func:`run_display_name`: experiment name,
        mixture or dataset version, seed and dp size; the run folder keeps its own name)
        and gets :func:`run_start_tags`, its sweep's parent run and its datasets as dataset
        inputs (:mod:`.inputs`): what a run created later by ``zephon sync`` gets too;
        ``tags`` and ``parent_run_id`` add to or replace them. The URI, experiment,
        ``tags`` and ``parent_run_id`` are recorded first, so if the store is unreachable
        (:class:`TrackingUnavailable`) a later :meth:`sync` or ``zephon sync`` can still
        create the run. A run that already names an MLflow run found in this store reuses
        it and marks it RUNNING again; one not found there (another store, a deleted run)
        gets a new run and everything is sent to it from the start.
        """
        run.commit(**self.destination(run.state, tags=tags, parent_run_id=parent_run_id))
        return self._open_run(run, reopen=True)

    def destination(
        self,
        state: RunState,
        *,
        tags: dict[str, str] | None = None,
        parent_run_id: str | None = None,
    ) -> dict[str, Any]:
        """What :meth:`start` records in ``run.json`` (``state`` as it is) before it opens
        the MLflow run: this store, its experiment, and the start's ``tags`` and parent."""
        tracking = state.tracking.with_(tags=dict(tags or {}), parent_run_id=parent_run_id)
        return {
            "tracking_uri": self.uri,
            "mlflow_experiment": self.experiment,
            "tracking": tracking,
        }

    def _open_run(self, run: MirroredRun, *, reopen: bool) -> str:
        """The id of ``run``'s MLflow run in this store, created if needed; params, tags and
        dataset inputs logged (each once: the run records it, and inputs already on the
        MLflow run are not sent again)."""
        folder = run.folder
        if is_http(self.uri):
            ping_server(self.uri, folder=folder)
        tracking = run.state.tracking
        run_id = run.state.mlflow_run_id
        with mlflow_errors(self.uri, f"opening the MLflow run of {folder.path}", folder):
            found = self._existing_run(run_id) if run_id else None
            if found is None:
                if run_id:
                    _log.warning(
                        "MLflow run %s of %s is not in %s (or was deleted): creating a new run "
                        "and sending everything to it.",
                        run_id,
                        folder.path,
                        self.uri,
                    )
                run_id = self.new_run(
                    mirrored_display_name(run),
                    kind=RunKind.RUN,
                    parent_run_id=tracking.parent_run_id or run.state.parent_run_id or None,
                )
                tracking = TrackingCursor.new(
                    tags=tracking.tags, parent_run_id=tracking.parent_run_id
                )
                # recorded at once: a run made again after a kill here would be a twin
                run.commit(
                    mlflow_run_id=run_id,
                    tracking_uri=self.uri,
                    mlflow_experiment=self.experiment,
                    tracking=tracking,
                )
                logged: dict[str, str] = {}
            else:
                if reopen and found.info.status != MlflowStatus.RUNNING:
                    self.client.update_run(run_id, status=MlflowStatus.RUNNING)
                logged = dict(found.data.params)
            if reopen or not tracking.params_logged:
                self._log_params(run, run_id, logged)
                tags = {str(k): str(v) for k, v in tracking.tags.items()}
                log_tags(self.client, run_id, {**run_start_tags(run), **tags})
                tracking = tracking.with_(params_logged=True)
            if reopen or not tracking.inputs_logged:
                self._log_inputs(run_id, mirrored_inputs(run), found)
                tracking = tracking.with_(inputs_logged=True)
            # one record for both: sent again after a kill, neither is held twice (params
            # are compared with the run's, inputs with those it holds)
            run.commit(tracking=tracking)
        self._found.add(run_id)
        return run_id

    def _existing_run(self, run_id: str) -> Any:
        """The active run ``run_id`` in this store, or None if it is absent or deleted."""
        try:
            run = self.client.get_run(run_id)
        except Exception as e:
            code = mlflow_error_code(e)
            if code == "RESOURCE_DOES_NOT_EXIST" or (
                code == "INVALID_PARAMETER_VALUE" and not is_unavailable(e)
            ):
                return None
            raise
        return None if run.info.lifecycle_stage == "deleted" else run

    def experiment_id(self) -> str:
        """Id of this tracker's experiment, created on first use (artifacts beside a SQLite db)."""
        if self._experiment_id is not None:
            return self._experiment_id
        experiment = self.client.get_experiment_by_name(self.experiment)
        if experiment is None:
            location = None
            db = sqlite_path(self.uri)
            if db is not None:
                safe = metric_key(self.experiment).replace("/", "_").replace(" ", "_") or "zephon"
                location = (db.resolve().parent / "mlruns" / safe).as_uri()
            try:
                self._experiment_id = self.client.create_experiment(
                    self.experiment, artifact_location=location
                )
            except Exception as e:  # created concurrently by another run of a sweep
                if mlflow_error_code(e) != "RESOURCE_ALREADY_EXISTS":
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
        kind: RunKind,
        tags: dict[str, str] | None = None,
        params: dict[str, object] | None = None,
        parent_run_id: str | None = None,
    ) -> str:
        """Create a RUNNING run named ``name``, tagged ``TAG_KIND=kind`` and ``tags``, with
        ``params`` (formatted by :func:`param_value`); return its id. Every Zephon run
        (trained, sweep parent, comparison, planned job) is created here."""
        all_tags = {TAG_KIND: kind, **(tags or {})}
        if parent_run_id:
            all_tags[TAG_PARENT_RUN] = parent_run_id
        with mlflow_errors(self.uri, f"creating the MLflow run {name}"):
            run_id = self.client.create_run(
                self.experiment_id(), tags=all_tags, run_name=name
            ).info.run_id
            log_params(self.client, run_id, {k: param_value(v) for k, v in (params or {}).items()})
        return run_id

    def tag_run(self, run_id: str, tags: dict[str, str]) -> None:
        """Set ``tags`` on the run ``run_id`` (cut to MLflow's limits)."""
        with mlflow_errors(self.uri, f"tagging MLflow run {run_id}"):
            log_tags(self.client, run_id, tags)

    def attach_files(self, run_id: str, paths: list[Path]) -> None:
        """Attach the files ``paths`` to the run ``run_id``, at its artifact root."""
        with mlflow_errors(self.uri, f"sending artifacts to MLflow run {run_id}"):
            for path in paths:
                self.client.log_artifact(run_id, str(path))

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int) -> None:
        """Log ``metrics`` at ``step`` into the run ``run_id`` (a search's round figures)."""
        points = [(key, float(value), step) for key, value in sorted(metrics.items())]
        with mlflow_errors(self.uri, f"logging metrics to MLflow run {run_id}"):
            log_points(self.client, run_id, points, now_ms())

    def find_runs(self, filter_string: str) -> list[Any]:
        """Runs of this tracker's experiment matching MLflow's ``filter_string``."""
        with mlflow_errors(self.uri, "searching MLflow runs"):
            return list(self.client.search_runs([self.experiment_id()], filter_string))

    def download_run(self, run_id: str, artifact_dir: str, into: Path) -> StoredRun:
        """The run ``run_id``, its ``artifact_dir`` artifacts downloaded under ``into`` (none
        there: nothing is downloaded). An unknown run id raises :class:`ConfigError`."""
        return download_run(
            self.client, self.uri, run_id=run_id, artifact_dir=artifact_dir, into=into
        )

    def reopen_run(self, run_id: str) -> None:
        """Mark the run ``run_id`` RUNNING again (a continued sweep's parent)."""
        with mlflow_errors(self.uri, f"reopening MLflow run {run_id}"):
            self.client.update_run(run_id, status=MlflowStatus.RUNNING)

    def end_run(self, run_id: str, status: MlflowStatus) -> None:
        """End the run ``run_id`` as ``FINISHED``, ``FAILED`` or ``KILLED``."""
        if status not in ENDED:
            raise ValueError(
                f"cannot end an MLflow run as {str(status)!r}; use one of {', '.join(sorted(ENDED))}"
            )
        with mlflow_errors(self.uri, f"ending MLflow run {run_id}"):
            self.client.set_terminated(run_id, status)

    def _log_params(self, run: MirroredRun, run_id: str, logged: dict[str, str]) -> None:
        """Mixture shares and flattened contract fields not yet on the run (params are immutable)."""
        experiment = run.experiment
        values: dict[str, object] = {
            **{PARAM_MIX_PREFIX + str(name): share for name, share in experiment.mixture.items()},
            **{PARAM_CONTRACT_PREFIX + k: v for k, v in flatten(dict(experiment.contract)).items()},
        }
        params = {metric_key(key)[:MAX_KEY]: param_value(value) for key, value in values.items()}
        if experiment.precision:
            params[PARAM_PRECISION] = experiment.precision
        for key in [k for k in params if k in logged]:
            if logged[key] != params.pop(key):
                _log.warning(
                    "MLflow param %s of run %s differs from %s; kept", key, run_id, run.folder
                )
        log_params(self.client, run_id, params)

    def _log_inputs(self, run_id: str, records: list[InputRecord], run: Any) -> list[InputRecord]:
        """Log the ``records`` that ``run`` (the run ``run_id`` as read; None: just created)
        does not hold yet as dataset inputs; return those logged. MLflow keeps one input
        per dataset name and digest per run; the check makes a retry send nothing twice.

        MLflow's store adds a dataset to the experiment the first time a run logs it,
        checking first, so jobs of a sweep starting together on the same datasets collide
        (a unique key: experiment, name, digest), and all but one are refused. Refused,
        this reads the run again and retries: the dataset is there now, and is reused.
        """
        for attempt in range(1, INPUT_ATTEMPTS + 1):
            held = set()
            if run is not None and run.inputs is not None:
                held = {(d.dataset.name, d.dataset.digest) for d in run.inputs.dataset_inputs}
            missing = [r for r in records if r.key not in held]
            if not missing:
                return []
            try:
                self.client.log_inputs(run_id, datasets=[r.entity() for r in missing])
                return missing
            except Exception as e:
                if attempt == INPUT_ATTEMPTS or mlflow_error_code(e) is None or is_unavailable(e):
                    raise
                first_line = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
                _log.debug("MLflow refused the inputs of run %s (%s); retrying", run_id, first_line)
                time.sleep(0.1 * attempt)
                run = self.client.get_run(run_id)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    # -- syncing ----------------------------------------------------------------------------

    def sync(self, run: MirroredRun, *, final: bool = False) -> dict[str, int]:
        """Send what MLflow does not have yet; return ``{"metrics", "steps", "evals"}`` sent.

        Idempotent and incremental (the cursor is ``run.json``'s ``tracking``, committed
        by ``run``). Metrics go in ``log_batch`` calls of at most 1000 points, a step's
        points together when they fit; the cursor advances after each accepted call. Tags
        (data fingerprint, steps, dp sizes, status) and the changed artifacts follow.
        ``final=False`` holds back steps newer than the newest step with a loss in
        ``metrics.jsonl`` (their loss may still be coming); ``final=True`` sends
        everything. Raises :class:`TrackingUnavailable` when the store cannot be reached:
        what was not accepted stays pending and goes with the next sync.
        """
        folder = run.folder
        run_id = run.state.mlflow_run_id
        if not run_id:
            if not run.state.tracking_uri:
                raise TrackingError(
                    f"{folder.path} has no MLflow run: call Tracker.start(run) first."
                )
            run_id = self._open_run(run, reopen=False)  # trained offline so far
        elif is_http(self.uri):
            ping_server(self.uri, folder=folder)
        opened = run.state.tracking
        # a folder moved to another store (or whose run was deleted) gets a new run there
        if not (opened.params_logged and opened.inputs_logged) or run_id not in self._found:
            run_id = self._open_run(run, reopen=False)
        with mlflow_errors(self.uri, f"syncing {folder.path}", folder):
            counts = send_metrics(self.client, run, run_id, final=final)
            log_tags(self.client, run_id, self._progress_tags(run))
            self._send_artifacts(run, run_id)
        return counts

    def _progress_tags(self, run: MirroredRun) -> dict[str, str]:
        steps = run.folder.steps()
        tags: dict[str, str] = {TAG_STEPS: str(max(steps, default=0))}
        if steps:
            tags[TAG_DATA_FINGERPRINT] = str(steps[max(steps)]["data_fingerprint"])
        sizes = run.state.dp_sizes
        if sizes:
            tags[TAG_DP_SIZE] = str(sizes[-1])
            tags[TAG_DP_HISTORY] = ",".join(map(str, sizes))
        if run.state.status:
            tags[TAG_STATUS] = str(run.state.status)
        return tags

    def _send_artifacts(self, run: MirroredRun, run_id: str) -> None:
        """Upload the run folder's files that changed since the last upload (overwriting)."""
        folder = run.folder
        files = {
            ARTIFACT_EXPERIMENT: folder.path / EXPERIMENT_FILE,
            ARTIFACT_STEPS: folder.titan_dir / RUN_SUBDIR / STEPS_FILE,
            ARTIFACT_EVAL: folder.titan_dir / RUN_SUBDIR / EVAL_FILE,
            ARTIFACT_TASKS: folder.titan_dir / RUN_SUBDIR / TASKS_FILE,
            LAUNCH_LOG_ARTIFACT: folder.log_path,
        }
        tracking = run.state.tracking
        sent = dict(tracking.artifacts)
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
            tracking = tracking.with_(artifacts=dict(sent))
            run.commit(tracking=tracking)

    # -- the end ----------------------------------------------------------------------------

    def finish(self, run: MirroredRun, status: str) -> dict[str, int]:
        """Final sync, then end the MLflow run: succeeded/failed/interrupted ->
        FINISHED/FAILED/KILLED; return what the sync sent.

        A run that did not succeed keeps its steps without a loss (the one a kill
        interrupted) pending: a resume trains them again and sends them once.

        Raises :class:`TrackingUnavailable` if the store cannot be reached; the run then
        stays RUNNING in MLflow until ``zephon sync <folder>`` (which ends it as
        ``run.json``'s status says).
        """
        if status not in MLFLOW_STATUS:
            raise ValueError(
                f"unknown run status {status!r}; expected one of {sorted(MLFLOW_STATUS)}"
            )
        # Only a finished run sends steps without a loss: an interrupted step is trained
        # again after a resume, and its values come then.
        counts = self.sync(run, final=status == RunStatus.SUCCEEDED)
        run_id = run.state.mlflow_run_id
        assert run_id is not None, "sync() opens the MLflow run"
        with mlflow_errors(self.uri, f"ending the MLflow run of {run.folder.path}", run.folder):
            log_tags(self.client, run_id, {TAG_STATUS: status})
            if self.client.get_run(run_id).info.status != MLFLOW_STATUS[status]:
                self.client.set_terminated(run_id, status=MLFLOW_STATUS[status])
        return counts
