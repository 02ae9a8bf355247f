"""A private PostgreSQL cluster in a temporary folder, for the team tracking server's tests:
started, killed (as a crash kills it) and restarted."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from orchestrator.run.launch import free_port
from orchestrator.tracking.postgres_cluster import PostgresCluster, StopMode
from orchestrator.tracking.team_server import CLUSTER_DATABASE


class TemporaryPostgres:
    """A cluster in a new folder under the system's temporary folder, with the database
    MLflow uses. When the tests run as root the ``postgres`` user runs it, so the folder is
    not under pytest's ``tmp_path`` (which only root can enter)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="zephon-pg-"))
        self.root.chmod(0o755)  # the postgres user enters it to reach the cluster's folder
        self.cluster = PostgresCluster(self.root / "cluster", free_port())
        self.downtimes: list[float] = []
        """Seconds between each :meth:`kill` and the end of its :meth:`restart`."""
        self._killed_at: float | None = None

    @property
    def uri(self) -> str:
        """The MLflow database's URI."""
        return self.cluster.uri(CLUSTER_DATABASE)

    def start(self) -> TemporaryPostgres:
        """Create the cluster, start it, create the database."""
        self.cluster.init()
        self.cluster.start()
        self.cluster.create_database(CLUSTER_DATABASE)
        return self

    def kill(self) -> None:
        """Stop PostgreSQL at once, as a crash does (open transactions lost, no checkpoint)."""
        self.cluster.stop(StopMode.IMMEDIATE)
        self._killed_at = time.monotonic()

    def restart(self) -> None:
        """Start PostgreSQL again after :meth:`kill` (it recovers from its log first)."""
        self.cluster.start()
        assert self._killed_at is not None, "restart() follows kill()"
        self.downtimes.append(time.monotonic() - self._killed_at)
        self._killed_at = None

    def close(self) -> None:
        """Stop PostgreSQL if it runs and remove the folder."""
        try:
            if self.cluster.is_running():
                self.cluster.stop(StopMode.IMMEDIATE)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
