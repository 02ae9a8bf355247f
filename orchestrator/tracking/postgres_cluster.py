"""A private PostgreSQL cluster in one folder: for a team tracking server that has no database.

PostgreSQL refuses to run as root: a root process (a CI job, a container) runs ``initdb`` and
``pg_ctl`` as the ``postgres`` system user, which must then own the folder and be able to
reach it (every folder above it searchable).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import ModuleType

from orchestrator.errors import TrackingError

CLUSTER_USER = "zephon"
"""The cluster's superuser (``initdb -U``); it connects without a password from this machine."""
POSTGRES_SYSTEM_USER = "postgres"
"""The system user that runs PostgreSQL for a root process."""
LOG_FILE = "server.log"
"""PostgreSQL's log, in the cluster's folder."""


class StopMode(StrEnum):
    """How ``pg_ctl stop`` ends the server (PostgreSQL's shutdown modes)."""

    FAST = "fast"
    """Roll back open transactions, write a checkpoint, exit."""
    IMMEDIATE = "immediate"
    """Exit at once, as a crash does: the next start recovers from the write-ahead log."""


@dataclass
class PostgresCluster:
    """The cluster in ``folder`` (data, unix socket and log), serving TCP on 127.0.0.1:``port``."""

    folder: Path
    port: int

    def uri(self, database: str) -> str:
        """The ``postgresql://`` URI of ``database`` in this cluster (libpq reads it as is)."""
        return f"postgresql://{CLUSTER_USER}@127.0.0.1:{self.port}/{database}"

    @property
    def log_path(self) -> Path:
        """PostgreSQL's log file."""
        return self.folder / LOG_FILE

    def exists(self) -> bool:
        """Whether ``folder`` holds a cluster (``initdb`` ran there)."""
        return (self.folder / "PG_VERSION").is_file()

    def init(self) -> None:
        """``initdb`` a new cluster in ``folder`` (absent or empty); local connections trusted."""
        if self.folder.exists() and any(self.folder.iterdir()):
            raise TrackingError(
                f"{self.folder} is not empty and holds no PostgreSQL cluster: give an empty or "
                "new folder to create one in, or the folder of an existing cluster."
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        if _is_root():
            _hand_to_postgres(self.folder)
        self._run(
            "initdb",
            ["-D", str(self.folder), "-A", "trust", "-U", CLUSTER_USER, "-E", "UTF8"],
            doing="creating a PostgreSQL cluster",
        )

    def is_running(self) -> bool:
        """Whether the cluster's server runs (``pg_ctl status``)."""
        command = _as_cluster_owner(["pg_ctl", "status", "-D", str(self.folder)])
        return subprocess.run(command, capture_output=True, check=False).returncode == 0

    def start(self) -> None:
        """Start the server and wait until it accepts connections (after a crash: recovered)."""
        options = f"-k {self.folder} -p {self.port} -c listen_addresses=127.0.0.1"
        self._run(
            "pg_ctl",
            ["-D", str(self.folder), "-o", options, "-l", str(self.log_path), "-w", "start"],
            doing=f"starting PostgreSQL on port {self.port}",
        )

    def stop(self, mode: StopMode = StopMode.FAST) -> None:
        """Stop the server (:attr:`StopMode.IMMEDIATE`: as if it crashed)."""
        self._run(
            "pg_ctl",
            ["-D", str(self.folder), "-m", str(mode), "-w", "stop"],
            doing="stopping PostgreSQL",
        )

    def create_database(self, name: str) -> None:
        """Create the database ``name`` unless the cluster has it."""
        psycopg2 = load_driver()
        connection = psycopg2.connect(self.uri("postgres"), connect_timeout=10)
        try:
            connection.autocommit = True  # CREATE DATABASE cannot run in a transaction
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cursor.fetchone() is None:
                    quoted = psycopg2.extensions.quote_ident(name, cursor)
                    cursor.execute(f"CREATE DATABASE {quoted}")
        finally:
            connection.close()

    def _run(self, program: str, args: list[str], *, doing: str) -> None:
        if shutil.which(program) is None:
            raise TrackingError(
                f"{program} is not on PATH: install PostgreSQL's server programs (Debian: "
                "`apt-get install postgresql`, then add /usr/lib/postgresql/<version>/bin to PATH)."
            )
        done = subprocess.run(
            _as_cluster_owner([program, *args]), capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            log = self.log_path.read_text()[-2000:] if self.log_path.is_file() else ""
            raise TrackingError(
                f"{doing} in {self.folder} failed (exit status {done.returncode}):\n"
                f"{(done.stdout + done.stderr).strip()}\n{log}".rstrip()
            )


def load_driver() -> ModuleType:
    """The ``psycopg2`` module (the PostgreSQL driver ``mlflow server`` needs), or a
    :class:`TrackingError` saying which extra installs it."""
    try:
        import psycopg2  # deferred: an optional dependency (the `team` extra)
    except ImportError as e:
        raise TrackingError(
            "PostgreSQL's driver psycopg2 is not installed: "
            "`pip install -e '.[team]'` (psycopg2-binary) in Zephon's environment."
        ) from e
    return psycopg2


def _is_root() -> bool:
    return os.geteuid() == 0


def _as_cluster_owner(command: list[str]) -> list[str]:
    """``command`` as the ``postgres`` system user when this process is root."""
    if _is_root():
        return ["runuser", "-u", POSTGRES_SYSTEM_USER, "--", *command]
    return command


def _hand_to_postgres(folder: Path) -> None:
    """Give ``folder`` to the ``postgres`` user, after checking that it can reach it."""
    for above in folder.resolve().parents:
        if not above.stat().st_mode & stat.S_IXOTH:
            raise TrackingError(
                f"the postgres user cannot reach {folder}: {above} is not searchable by others. "
                "Choose a folder under one that is (e.g. /var/lib/zephon or /tmp)."
            )
    shutil.chown(folder, user=POSTGRES_SYSTEM_USER, group=POSTGRES_SYSTEM_USER)
