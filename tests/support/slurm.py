"""A real Slurm cluster on this machine for the tests: Debian's ``slurm-wlm`` and ``munge``.

:class:`LocalSlurm` installs the packages when they are missing (``apt-get``, as root),
writes a ``slurm.conf`` into a private folder and starts the daemons itself (there is no
systemd here)::

    munged      its own key and socket in the folder (no system munged needed)
    slurmctld   -D: the controller, on a free port
    slurmd      -D -N n1, -D -N n2: two nodes on this machine, each on its own port,
                each with this machine's cores and half its memory (Slurm counts the
                cores twice; jobs only ask for what the tests need)

It waits until ``sinfo`` shows every node idle and stops the daemons by pid on
:meth:`LocalSlurm.stop`. Clients (``sbatch``, ``squeue``, submitit) find the cluster
through ``SLURM_CONF``, which :meth:`LocalSlurm.env` sets. There is no accounting
(``sacct`` fails); Zephon falls back to ``squeue`` for job states
(:mod:`orchestrator.run.slurm`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from orchestrator.run.launch import free_port
from tests.support import REPO

PACKAGES = ("slurm-wlm", "munge")
NODES = ("n1", "n2")
START_TIMEOUT_S = 60.0
REQUEUE_DELAY_S = 10
"""Seconds a requeued job waits before it starts again (Slurm's ``cred_expire``)."""


def ensure_installed() -> None:
    """Install Debian's slurm-wlm and munge unless their daemons are on PATH."""
    if all(shutil.which(d) for d in ("slurmctld", "slurmd", "munged")):
        return
    if os.geteuid() != 0:
        raise RuntimeError(
            "the Slurm tests need Debian's slurm-wlm and munge: run "
            f"`apt-get install -y {' '.join(PACKAGES)}` as root, or run the tests as root"
        )
    apt = ["apt-get", "install", "-y", "-q", *PACKAGES]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(apt, env=env, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, check=True)
        subprocess.run(apt, env=env, check=True)


@contextlib.contextmanager
def cluster_for_tests() -> Iterator[LocalSlurm]:
    """A started :class:`LocalSlurm` whose clients this process and its children find:
    ``SLURM_CONF`` set, and this checkout on ``PYTHONPATH`` (the jobs' processes import it;
    Slurm passes the environment on). Stopped, and the environment restored, on exit."""
    slurm = LocalSlurm().start()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("SLURM_CONF", str(slurm.conf))
            patch.setenv(
                "PYTHONPATH",
                os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            )
            yield slurm
    finally:
        slurm.stop()


class LocalSlurm:
    """A two-node Slurm cluster on loopback, owned by this process (module docstring)."""

    def __init__(self) -> None:
        # munged wants every folder above its socket searchable by all: not pytest's 0700 tmp.
        self.root = Path(tempfile.mkdtemp(prefix="zephon-slurm-"))
        self.root.chmod(0o755)
        self.conf = self.root / "slurm.conf"
        self.socket = self.root / "munge.socket"
        self._daemons: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        """The environment for Slurm clients of this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> LocalSlurm:
        ensure_installed()
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        self._spawn(
            "munged",
            "-F",
            f"--socket={self.socket}",
            f"--key-file={key}",
            f"--pid-file={self.root / 'munged.pid'}",
            f"--log-file={self.root / 'munged.log'}",
            f"--seed-file={self.root / 'munged.seed'}",
        )
        self._wait(lambda: self.socket.exists(), "munged's socket")
        self._write_conf()
        self._spawn("slurmctld", "-D", "-i")
        for node in NODES:
            self._spawn("slurmd", "-D", "-N", node)
        self._wait(self._all_idle, "every node idle in sinfo")
        return self

    def _write_conf(self) -> None:
        (self.root / "state").mkdir()
        (self.root / "spool").mkdir()
        cores = len(os.sched_getaffinity(0))
        memory_mb = psutil.virtual_memory().total // 2**20 // len(NODES)
        lines = [
            "ClusterName=zephon-test",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # a requeued job waits cred_expire seconds before it may start again (120 s
            # by default): preemption tests would mostly wait
            f"AuthInfo=socket={self.socket},cred_expire={REQUEUE_DELAY_S}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "ReturnToService=2",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "KillWait=10",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool' / '%n'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.root / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'slurmd-%n.log'}",
            *(
                f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 "
                f"Port={free_port()} CPUs={cores} RealMemory={memory_mb} State=UNKNOWN"
                for node in NODES
            ),
            "PartitionName=debug Default=YES Nodes=ALL MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")

    def _spawn(self, *command: str) -> None:
        log = (self.root / f"{command[0]}-{len(self._daemons)}.out").open("ab")
        self._daemons.append(
            subprocess.Popen(
                list(command),
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    def _all_idle(self) -> bool:
        done = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %t"],
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
        )
        states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
        return sorted(states) == sorted(NODES) and set(states.values()) == {"idle"}

    def _wait(self, ready: object, what: str) -> None:
        end = time.monotonic() + START_TIMEOUT_S
        while not ready():  # type: ignore[operator]
            dead = [d.args for d in self._daemons if d.poll() is not None]
            if dead or time.monotonic() > end:
                self.stop()
                logs = "\n".join(
                    f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                    for p in sorted(self.root.glob("*.out")) + sorted(self.root.glob("*.log"))
                )
                raise RuntimeError(f"local Slurm: no {what} (exited: {dead}); logs:\n{logs}")
            time.sleep(0.2)

    def run(self, *command: str) -> str:
        """A Slurm client command against this cluster; its stdout."""
        return subprocess.run(
            list(command), env=self.env(), capture_output=True, text=True, check=True
        ).stdout

    def stop(self) -> None:
        """Cancel every job and wait (30 s at most) until Slurm has ended them, so that no
        job step outlives the cluster; then stop the daemons (by pid: SIGTERM, SIGKILL
        after 10 s)."""
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            self.run("scancel", "--user=root")
            end = time.monotonic() + 30
            while self.run("squeue", "--noheader") and time.monotonic() < end:
                time.sleep(0.5)
        for daemon in reversed(self._daemons):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.pid, signal.SIGTERM)
        for daemon in reversed(self._daemons):
            try:
                daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
        self._daemons.clear()
        shutil.rmtree(self.root, ignore_errors=True)
