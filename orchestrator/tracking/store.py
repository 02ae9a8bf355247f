"""The MLflow store behind a tracking URI: its client, writes within MLflow's limits, its errors.

MLflow is imported in :func:`load_mlflow` alone, on first use: ``import mlflow`` takes
1-2 s, which commands that never track (an offline run, an unknown folder) must not pay.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from orchestrator.errors import TrackingError, TrackingUnavailable
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.tracking.store_template import create_store
from pipeline.filelock import file_lock

if TYPE_CHECKING:  # annotations only; load_mlflow() imports MLflow at run time
    from mlflow import MlflowClient

# MLflow 3.17's limits (mlflow.utils.validation): values longer than these are rejected.
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
MAX_KEY = 250

OFFLINE_HINT = (
    "Start the MLflow server, fix tracking.uri, or set tracking.offline_ok=true to train now "
    "and send the metrics later with `zephon sync <run folder>`."
)

Point = tuple[str, float, int]
"""One metric point: key, value, step."""


def load_mlflow() -> ModuleType:
    """The ``mlflow`` module, imported on first use, its schema-migration logging quieted.

    MLflow logs every schema migration of a new SQLite store at INFO: keep warnings only.
    """
    for name in ("alembic", "mlflow.store.db.utils", "mlflow.store.db.db_types"):
        logging.getLogger(name).setLevel(logging.WARNING)
    import mlflow  # deferred: seconds to import; only a process that tracks needs it

    return mlflow


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:`` URI (None for other URIs and in-memory databases)."""
    if not uri.startswith("sqlite:"):
        return None
    rest = uri[len("sqlite:") :]
    if not rest.startswith("///"):
        return None
    path = rest[3:].split("?", 1)[0]
    return Path(unquote(path)) if path and path != ":memory:" else None


def retry_hint(folder: RunFolder | None) -> str:
    """What to do about an unreachable store: before launch, or while/after ``folder`` trains."""
    if folder is None:
        return f" {OFFLINE_HINT}"
    return (
        f" Nothing is lost: what was not sent stays in {folder.path} and goes with the next sync, "
        f"the final one, or `zephon sync {folder.path}`."
    )


def client_for(uri: str) -> MlflowClient:
    """An ``MlflowClient`` for exactly ``uri`` (never the process-wide default URI).

    Creating the client opens its store; on a new SQLite database that runs MLflow's schema
    migrations, which fail when two processes run them at once (``AttributeError:
    dimension_attributes``: two jobs of a sweep or of the job service starting together).
    So a process opens a SQLite store holding a lock file next to the database, and a new
    one is a copy of a migrated empty store (:mod:`orchestrator.tracking.store_template`).
    """
    mlflow = load_mlflow()
    db = sqlite_path(uri)
    with contextlib.nullcontext() if db is None else file_lock(db.with_name(f"{db.name}.lock")):
        if db is not None and not (db.is_file() and db.stat().st_size):
            create_store(db)
        return mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)


def mlflow_error_code(error: BaseException) -> str | None:
    """The error code of an ``MlflowException`` (``RESOURCE_DOES_NOT_EXIST``, ...); None for
    any other error."""
    if isinstance(error, load_mlflow().exceptions.MlflowException):
        return str(error.error_code)
    return None


def is_unavailable(error: BaseException) -> bool:
    """Whether ``error`` means the store cannot be reached (worth a retry), not a rejection."""
    if isinstance(error, (ConnectionError, TimeoutError)):
        return True
    try:
        import requests  # deferred: MLflow's HTTP client, loaded with MLflow (not on import)
    except ImportError:  # pragma: no cover - mlflow depends on requests
        requests = None
    if requests is not None and isinstance(error, requests.exceptions.RequestException):
        return True
    code = mlflow_error_code(error)
    if code is not None:
        if code in ("TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED"):
            return True
        # mlflow.utils.rest_utils wraps connection failures and exhausted retries this way.
        if str(error.message).startswith("API request to"):
            return True
        status = error.get_http_status_code()
        return status is not None and status >= 500 and code != "INTERNAL_ERROR"
    return False


@contextlib.contextmanager
def mlflow_errors(uri: str, doing: str, folder: RunFolder | None = None) -> Iterator[None]:
    """MLflow and transport errors as :class:`TrackingUnavailable` or :class:`TrackingError`."""
    try:
        yield
    except TrackingError:
        raise
    except Exception as e:
        if is_unavailable(e):
            raise TrackingUnavailable(
                f"MLflow tracking store {uri} is not reachable while {doing}: {e}."
                f"{retry_hint(folder)}"
            ) from e
        if mlflow_error_code(e) is not None:
            raise TrackingError(f"MLflow ({uri}) refused {doing}: {e}") from e
        raise


def now_ms() -> int:
    """The time now, in milliseconds since the epoch (MLflow's timestamps)."""
    return int(time.time() * 1000)


def param_value(value: object) -> str:
    """``value`` as MLflow stores a param: a string (JSON unless it is one), cut to the limit."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text[:MAX_PARAM_VALUE]


def log_params(client: MlflowClient, run_id: str, params: dict[str, str]) -> None:
    """Log the formatted ``params`` on the run ``run_id``, sorted by name, in MLflow's batches."""
    param = load_mlflow().entities.Param
    _log_in_batches(client, run_id, "params", [param(k, v) for k, v in sorted(params.items())])


def log_tags(client: MlflowClient, run_id: str, tags: dict[str, str]) -> None:
    """Set ``tags`` on the run ``run_id``, keys and values cut to MLflow's limits."""
    tag = load_mlflow().entities.RunTag
    _log_in_batches(
        client, run_id, "tags", [tag(k[:MAX_KEY], v[:MAX_TAG_VALUE]) for k, v in tags.items()]
    )


def log_points(client: MlflowClient, run_id: str, points: list[Point], timestamp_ms: int) -> None:
    """Log ``points`` (at most :data:`MAX_METRICS_PER_BATCH`) into the run ``run_id`` at once."""
    metric = load_mlflow().entities.Metric
    batch = [metric(key, value, timestamp_ms, step) for key, value, step in points]
    client.log_batch(run_id, metrics=batch, synchronous=True)


def _log_in_batches(client: MlflowClient, run_id: str, field: str, entities: list[Any]) -> None:
    """``log_batch`` the params or tags ``entities`` (``field`` says which), 100 at a time."""
    for start in range(0, len(entities), MAX_PARAMS_TAGS_PER_BATCH):
        chunk = entities[start : start + MAX_PARAMS_TAGS_PER_BATCH]
        client.log_batch(run_id, **{field: chunk}, synchronous=True)
