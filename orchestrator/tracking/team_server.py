"""The team tracking server: ``mlflow server`` on PostgreSQL, artifacts in a folder or on S3.

``bash scripts/tracking_server.sh [OPTIONS]`` runs :func:`main`; ``tracking=team`` points runs
at the server it starts (docs/team.md). The checks run first, so that a missing driver, an
unreachable database or a port in use is said plainly instead of in MLflow's traceback.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path
from urllib.parse import urlparse

from orchestrator.errors import EXIT_TRACKING, TrackingError
from orchestrator.tracking.postgres_cluster import PostgresCluster, load_driver

DB_URI_ENV = "ZEPHON_TEAM_DB_URI"
"""The PostgreSQL URI of the server's store, when ``--backend-store-uri`` is not given."""
ARTIFACTS_ENV = "ZEPHON_TEAM_ARTIFACTS"
"""The artifact root (a folder or ``s3://bucket/prefix``), when ``--artifacts`` is not given."""
DEFAULT_ARTIFACTS = "mlartifacts"
"""The artifact folder (relative to the working directory) when neither names one."""
CLUSTER_DATABASE = "mlflow"
"""The database that ``--init-cluster`` creates for MLflow."""
POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg2")
"""How a PostgreSQL URI may start; the last one names the driver (the `team` extra's)."""


def server_command(
    backend_uri: str,
    artifacts: str,
    *,
    host: str,
    port: int,
    workers: int,
    allowed_hosts: str | None = None,
) -> list[str]:
    """The ``mlflow server`` command line: store ``backend_uri`` (a PostgreSQL one with its
    driver named, :func:`with_driver`; another, e.g. SQLite, as it is), artifacts proxied by
    the server to ``artifacts`` (a folder, or an ``s3://`` URL: then only the server needs S3
    keys); ``allowed_hosts``: the host names clients may use for it, beyond MLflow's default
    (localhost and private addresses)."""
    return [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        with_driver(backend_uri),
        "--artifacts-destination",
        artifacts_destination(artifacts),
        "--serve-artifacts",
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
        *(["--allowed-hosts", _with_default_hosts(allowed_hosts)] if allowed_hosts else []),
    ]


def _with_default_hosts(allowed_hosts: str) -> str:
    """``allowed_hosts`` and MLflow's default ones: ``--allowed-hosts`` replaces the default
    list, which would refuse the clients on this machine and the private network."""
    # deferred: imports mlflow (3 s), needed only when a team names its hosts
    from mlflow.server.security_utils import get_default_allowed_hosts

    return ",".join([allowed_hosts, *get_default_allowed_hosts()])


def with_driver(uri: str) -> str:
    """A PostgreSQL ``uri`` as ``postgresql+psycopg2://``: SQLAlchemy 2.1 reads a bare
    ``postgresql://`` as the psycopg 3 driver, which the `team` extra does not install."""
    return _with_scheme(uri, POSTGRES_SCHEMES[-1])


def as_libpq(uri: str) -> str:
    """A PostgreSQL ``uri`` as libpq (psycopg2.connect) reads it: ``postgresql://``."""
    return _with_scheme(uri, POSTGRES_SCHEMES[0])


def _with_scheme(uri: str, scheme: str) -> str:
    """A PostgreSQL ``uri`` starting ``scheme://``; any other URI as it is."""
    given, separator, rest = uri.partition("://")
    return f"{scheme}://{rest}" if separator and given in POSTGRES_SCHEMES else uri


def artifacts_destination(root: str) -> str:
    """``root`` as the server's ``--artifacts-destination``: an ``s3://`` URL as is, a folder
    made absolute and created (the server's working directory must not matter)."""
    if urlparse(root).scheme == "s3":
        return root
    folder = Path(root).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder)


def check_database(uri: str, timeout_s: int = 5) -> None:
    """:class:`TrackingError` unless ``uri`` is a PostgreSQL database that accepts a connection
    now (the driver installed, the server up, the database there)."""
    if urlparse(uri).scheme not in POSTGRES_SCHEMES:
        raise TrackingError(
            f"{redacted(uri)} is not a PostgreSQL URI: give postgresql://USER[:PASSWORD]@HOST"
            "[:PORT]/DATABASE (for one machine without a server, use tracking=embedded)."
        )
    psycopg2 = load_driver()
    try:
        psycopg2.connect(as_libpq(uri), connect_timeout=timeout_s).close()
    except psycopg2.OperationalError as e:
        raise TrackingError(
            f"PostgreSQL database {redacted(uri)} is not reachable: {str(e).strip()}. Start "
            "PostgreSQL, create the database, fix the URI, or let this script create a private "
            "cluster with --init-cluster DIR."
        ) from e


def check_port_free(host: str, port: int) -> None:
    """:class:`TrackingError` if ``host:port`` cannot be listened on (another server has it)."""
    with socket.socket() as probe:
        # as the server binds: a port whose last connections are closing is free
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            raise TrackingError(
                f"cannot listen on {host}:{port} ({e.strerror}): another server uses the port. "
                "Stop it, or choose another port with --port."
            ) from e


def redacted(uri: str) -> str:
    """``uri`` without its password, to be printed."""
    parsed = urlparse(uri)
    if parsed.password is None:
        return uri
    return parsed._replace(netloc=parsed.netloc.replace(f":{parsed.password}@", ":***@")).geturl()


def private_cluster_uri(folder: Path, port: int) -> str:
    """The URI of the ``mlflow`` database of the private cluster in ``folder``: the cluster
    created (first time) and started (unless it runs), and the database created if missing."""
    cluster = PostgresCluster(folder.expanduser().resolve(), port)
    if not cluster.exists():
        print(f"tracking_server: creating a PostgreSQL cluster in {cluster.folder}")
        cluster.init()
    if not cluster.is_running():
        print(f"tracking_server: starting PostgreSQL on 127.0.0.1:{port} (log {cluster.log_path})")
        cluster.start()
    cluster.create_database(CLUSTER_DATABASE)
    return cluster.uri(CLUSTER_DATABASE)


def build_parser() -> argparse.ArgumentParser:
    """The options of ``scripts/tracking_server.sh``."""
    parser = argparse.ArgumentParser(
        prog="tracking_server.sh",
        description="Start the team's MLflow tracking server on PostgreSQL (docs/team.md).",
    )
    store = parser.add_mutually_exclusive_group()
    store.add_argument(
        "--backend-store-uri",
        default=os.environ.get(DB_URI_ENV),
        help=f"postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE (default: ${DB_URI_ENV})",
    )
    store.add_argument(
        "--init-cluster",
        type=Path,
        metavar="DIR",
        help="create (first time) and start a private PostgreSQL cluster in DIR, with a "
        f"database {CLUSTER_DATABASE!r}, and use it",
    )
    parser.add_argument(
        "--pg-port", type=int, default=5433, help="the private cluster's port (default: 5433)"
    )
    parser.add_argument(
        "--artifacts",
        default=os.environ.get(ARTIFACTS_ENV, DEFAULT_ARTIFACTS),
        help=f"artifact root: a folder or s3://BUCKET/PREFIX (default: ${ARTIFACTS_ENV}, else "
        f"./{DEFAULT_ARTIFACTS})",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface (0.0.0.0: all)")
    parser.add_argument("--port", type=int, default=5000, help="port (default: 5000)")
    parser.add_argument("--workers", type=int, default=4, help="server processes (default: 4)")
    parser.add_argument(
        "--allowed-hosts",
        help="host names clients use to reach the server, e.g. mlflow.internal,mlflow.internal:5000 "
        "(MLflow refuses other Host headers than localhost and private addresses)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Check, then become ``mlflow server`` (``exec``: its exit status is the script's)."""
    args = build_parser().parse_args(argv)
    try:
        if args.init_cluster is not None:
            backend = private_cluster_uri(args.init_cluster, args.pg_port)
        elif args.backend_store_uri:
            backend = args.backend_store_uri
        else:
            raise TrackingError(
                f"no database: give --backend-store-uri postgresql://..., set ${DB_URI_ENV}, "
                "or create a private cluster with --init-cluster DIR."
            )
        check_database(backend)
        check_port_free(args.host, args.port)
        artifacts = artifacts_destination(args.artifacts)
    except TrackingError as e:
        print(f"tracking_server: error: {e}", file=sys.stderr)
        return EXIT_TRACKING
    print(
        f"tracking_server: MLflow on http://{args.host}:{args.port}, store {redacted(backend)}, "
        f"artifacts {artifacts}",
        flush=True,
    )
    command = server_command(
        backend,
        artifacts,
        host=args.host,
        port=args.port,
        workers=args.workers,
        allowed_hosts=args.allowed_hosts,
    )
    os.execv(command[0], command)  # does not return


if __name__ == "__main__":
    sys.exit(main())
