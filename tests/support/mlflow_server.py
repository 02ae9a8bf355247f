"""A real ``mlflow server`` for one test, started as ``scripts/tracking_server.sh`` starts it
(:func:`orchestrator.tracking.team_server.server_command`), on any backend store."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from orchestrator.run.launch import free_port
from orchestrator.tracking.team_server import server_command

STARTUP_TIMEOUT_S = 240.0
"""Migrating a new store and starting the workers takes 5-25 s on 2 busy cores; creating a
PostgreSQL cluster first, beside two other test workers, once took CI over 120 s."""


@dataclass
class RunningServer:
    """A started server: its tracking URI and its log file."""

    uri: str
    log: Path
    process_group: int = 0
    """The server's process group (set once it is started)."""

    def pause(self) -> None:
        """Stop the server's processes (SIGSTOP): it accepts connections and answers nothing."""
        os.killpg(self.process_group, signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused server go on (SIGCONT)."""
        os.killpg(self.process_group, signal.SIGCONT)

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server's log (for a failed assertion's message)."""
        return self.log.read_text(errors="replace")[-chars:]


@contextlib.contextmanager
def mlflow_server(folder: Path, backend_uri: str, *, workers: int = 1) -> Iterator[RunningServer]:
    """``mlflow server`` on ``backend_uri`` with its artifacts and log in ``folder``, healthy
    when entered, stopped (its process group) when left."""
    port = free_port()
    command = server_command(
        backend_uri, str(folder / "server-artifacts"), host="127.0.0.1", port=port, workers=workers
    )
    with serving(command, RunningServer(f"http://127.0.0.1:{port}", folder / "server.log")) as up:
        yield up


@contextlib.contextmanager
def serving(command: list[str], server: RunningServer) -> Iterator[RunningServer]:
    """``command`` (a tracking server at ``server.uri``) started in its own process group,
    output to ``server.log``, in the log's folder; healthy when entered, stopped when left."""
    with server.log.open("w") as log:
        process = subprocess.Popen(
            command,
            cwd=server.log.parent,  # what the server writes relative to its folder stays there
            # and what it writes to the temporary folder too (MLflow's db_init_lock-<hash>,
            # one per store, was left in /tmp by every test's server)
            env={**os.environ, "TMPDIR": str(server.log.parent)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server.process_group = process.pid
    try:
        started = time.perf_counter()
        while not _healthy(server.uri):
            assert process.poll() is None, server.log_tail()
            assert time.perf_counter() - started < STARTUP_TIMEOUT_S, (
                f"the server is not up after {STARTUP_TIMEOUT_S:.0f} s; its log:\n{server.log_tail()}"
            )
            time.sleep(0.25)
        print(f"\ntracking server healthy after {time.perf_counter() - started:.1f} s")
        yield server
    finally:
        os.killpg(process.pid, signal.SIGCONT)  # a paused server could not stop
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=15)


def _healthy(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=1) as response:
            return response.read().strip() == b"OK"
    except OSError:
        return False
