"""Tracking URIs and the pre-launch check: which store a run is tracked in, and whether it answers.

Importing this module is cheap; MLflow is imported (through :mod:`.store`) only when a
non-HTTP store is checked.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from orchestrator.errors import ConfigError, TrackingError, TrackingUnavailable
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.experiment.validation import tracking_uri_problem
from orchestrator.tracking.store import client_for, mlflow_errors, retry_hint, sqlite_path

DEFAULT_DB = "mlflow.db"
"""File name of the embedded SQLite store used when no tracking URI is configured."""


def resolve_uri(uri: str | None, workdir: Path) -> str:
    """The tracking URI to use: ``uri``, or the embedded SQLite store ``<workdir>/mlflow.db``.

    A relative SQLite path (``sqlite:///runs.db``) is made absolute against ``workdir``,
    so the URI stored in ``run.json`` still works from another working directory.
    """
    if not uri:
        return f"sqlite:///{(Path(workdir) / DEFAULT_DB).resolve()}"
    db = sqlite_path(uri)
    if db is not None and not db.is_absolute():
        return f"sqlite:///{(Path(workdir) / db).resolve()}"
    return uri


def stored_uri(uri: str | None, workdir: Path) -> str:
    """The resolved URI of a tracking store to read runs from (a comparison, a fit), checked
    before anything is read: a URI that names no store is a ``ConfigError``, a SQLite database that does not exist is a ``ConfigError``
    (opening it would create an empty one where the command runs), a server that does not
    answer ``/health`` within seconds :class:`TrackingUnavailable` (MLflow's client would
    retry for minutes)."""
    if uri and (problem := tracking_uri_problem(uri)):
        raise ConfigError(f"--tracking-uri (tracking.uri) {problem}")
    resolved = resolve_uri(uri, workdir)
    db = sqlite_path(resolved)
    if db is not None and not db.is_file():
        raise ConfigError(
            f"no tracking store at {resolved}: nothing was tracked there; name the store "
            "the runs were tracked in (--tracking-uri, tracking.uri)"
        )
    if is_http(resolved):
        ping_server(resolved, reading=True)
    return resolved


def is_http(uri: str) -> bool:
    """Whether ``uri`` names a tracking server (``http:`` or ``https:``)."""
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
    if is_http(uri):
        ping_server(uri, timeout_s)
        return
    db = sqlite_path(uri)
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
    with mlflow_errors(uri, "checking the tracking store"):
        client_for(uri).search_experiments(max_results=1)


def ping_server(
    uri: str,
    timeout_s: float = 5.0,
    folder: RunFolder | None = None,
    *,
    reading: bool = False,
) -> None:
    """``GET <uri>/health``; :class:`TrackingUnavailable` unless the server answers ``OK``.

    The message names the ways out: before launch (no ``folder``) starting the server,
    fixing the URI or training offline; during a run, that nothing is lost; for a command
    that reads runs (``reading``), starting the server or naming another store.
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
    hint = (
        " Start the server, or name the store the runs were tracked in (--tracking-uri)."
        if reading
        else retry_hint(folder)
    )
    raise TrackingUnavailable(f"MLflow tracking server {uri} is not reachable ({reason}).{hint}")
