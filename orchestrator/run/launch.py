"""Starting a run's torchruns on this machine and watching them: their environment, their
process groups, time-outs and interrupts.

The commands come from :mod:`orchestrator.run.trainer_command`; Slurm launches go through
:mod:`orchestrator.run.slurm`. torchrun's output goes to ``<run>/launch.log``.

Design: docs/design/orchestrator_run.md
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeAlias

import psutil

from orchestrator.experiment import DeviceKind, Launcher
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.machine.devices import Devices, usable_cores
from orchestrator.run import interrupts, warm_start
from orchestrator.run.cpu_env import TRAIN_MODULE, common_env, cpu_start_env

POLL_S = 1.0
EXIT_POLL_S = 0.05
"""How often ``run_local`` looks whether its torchruns ended (ticks stay ``POLL_S`` apart)."""

Agent: TypeAlias = "subprocess.Popen[bytes] | warm_start.WarmProcess"
"""One started torchrun: a cold subprocess or a warm server's fork."""


def train_command(
    procs_per_node: int, args: list[str], rendezvous: list[str] | None = None
) -> list[str]:
    """torchrun of :data:`TRAIN_MODULE` with TorchTitan flags ``args`` on ``procs_per_node``
    processes; ``rendezvous`` (torchrun's flags) defaults to one node on a free local port.

    Also for launches whose flags do not come from a plan (the initial checkpoint, benchmarks).
    """
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *(rendezvous or [f"--master-port={free_port()}"]),
        f"--nproc-per-node={procs_per_node}",
        "-m",
        TRAIN_MODULE,
        *args,
    ]


def free_port() -> int:
    """A TCP port free on the loopback interface now (for a rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare_warm_start(kind: DeviceKind, launcher: Launcher) -> None:
    """Before a run's launches on ``kind`` devices by ``launcher``: start the warm server now
    if they will start from it, CPU torchruns on this machine (not Slurm's), so that its
    imports overlap the work before them; else end a speculative one
    (:mod:`orchestrator.run.warm_start`)."""
    if kind == DeviceKind.CPU and launcher != Launcher.SLURM:
        warm_start.prepare(cpu_start_env())
    else:
        warm_start.withdraw()


def launch_env(
    folder: RunFolder, devices: Devices, procs_per_node: int, cores: int | None = None
) -> dict[str, str]:
    """The environment of a launch: caches and temporary files (torchrun's log folders) in
    the run folder, each process an equal share of ``cores`` (default: the usable cores) as
    threads."""
    env = cpu_start_env() if devices.kind == DeviceKind.CPU else common_env()
    scratch = folder.path.absolute() / ".tmp"
    scratch.mkdir(parents=True, exist_ok=True)  # Python ignores a TMPDIR that does not exist
    env.update(
        HF_HOME=str(folder.path.absolute() / ".hf"),
        TORCHINDUCTOR_CACHE_DIR=str(folder.path.absolute() / ".inductor"),
        TMPDIR=str(scratch),
        OMP_NUM_THREADS=str(max(1, (cores or usable_cores()) // procs_per_node)),
    )
    if devices.kind == DeviceKind.CUDA:
        # gpu_ids index the GPUs torch sees: those CUDA_VISIBLE_DEVICES (a scheduler's, or
        # Slurm's) names, if set, else all.
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        ids = [visible[i] if visible != [""] else str(i) for i in devices.gpu_ids]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(ids[:procs_per_node])
    return env


@dataclass
class Launch:
    """What to run for one segment of a run and how to watch it."""

    commands: list[list[str]]
    """One torchrun command per node this machine runs."""
    env: dict[str, str]
    folder: RunFolder
    timeout_s: float | None = None
    on_tick: Callable[[RunFolder], None] | None = None
    """Called about once a second while training runs (progress, tracking sync)."""
    tick_every_s: float = POLL_S
    on_processes: Callable[[tuple[int, ...]], object] | None = None
    """Called with the torchruns' process groups once they started, on node 0, whose run
    records them (a later resume stops them if this process dies without cleanup)."""
    node_rank: int = 0
    """This machine's node: node 0 logs to ``launch.log``, node k to ``launch-node<k>.log``."""

    @property
    def log_path(self) -> Path:
        if self.node_rank == 0:
            return self.folder.log_path
        return self.folder.path / f"launch-node{self.node_rank}.log"


def run_local(launch: Launch) -> int:
    """Run ``launch.commands`` here, output appended to ``launch.log``; their worst exit status,
    or minus the signal number when SIGINT/SIGTERM stopped it (:mod:`orchestrator.run.interrupts`).

    Each torchrun runs in its own process group, killed whole on time-out, on
    SIGINT/SIGTERM to this process, or when another node's torchrun fails; on Linux
    the kernel also sends it SIGTERM if the thread that started it dies.
    """
    folder = launch.folder
    folder.path.mkdir(parents=True, exist_ok=True)
    if interrupts.requested():
        return -interrupts.signal_received()
    with launch.log_path.open("ab") as log:
        log.write(f"\n=== launch {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
        log.flush()
        agents = [_start_torchrun(command, launch, log) for command in launch.commands]
    if launch.on_processes is not None:
        launch.on_processes(tuple(a.pid for a in agents))
    deadline = None if launch.timeout_s is None else time.monotonic() + launch.timeout_s
    next_tick = time.monotonic()
    with interrupts.handling():
        try:
            while any(a.poll() is None for a in agents):
                failed = any(a.returncode not in (None, 0) for a in agents)
                late = deadline is not None and time.monotonic() > deadline
                if interrupts.requested() or failed or late:
                    _kill_agent_groups(agents)
                    if late:
                        with launch.log_path.open("a") as log:
                            log.write(f"\n[zephon] killed after {launch.timeout_s} s\n")
                    break
                if launch.on_tick is not None and time.monotonic() >= next_tick:
                    launch.on_tick(folder)
                    next_tick = time.monotonic() + launch.tick_every_s
                # Short waits: the run's result is ready the moment torchrun ends.
                interrupts.STOP.wait(EXIT_POLL_S)
        finally:
            _kill_agent_groups(agents)
    if launch.on_tick is not None:
        launch.on_tick(folder)
    if interrupts.requested():
        return -interrupts.signal_received()
    return next((a.returncode for a in agents if a.returncode != 0), 0)


def _start_torchrun(command: list[str], launch: Launch, log: BinaryIO) -> Agent:
    """Start one torchrun of ``launch``: from the warm server when it can
    (:mod:`orchestrator.run.warm_start`: CPU launches of the trainer), else cold."""
    warm = warm_start.torchrun_arguments(command) is not None and warm_start.enabled()
    if warm and launch.env.get("CUDA_VISIBLE_DEVICES") == "":
        log.write(f"{warm_start.WARM_LOG_LINE}\n".encode())
        log.flush()
        try:
            server = warm_start.starter(launch.env)
            return server.start(command, launch.env, launch.folder.path, launch.log_path)
        except warm_start.WarmStartUnavailable as e:
            log.write(f"[zephon] warm start unavailable ({e}); starting torchrun cold\n".encode())
            log.flush()
    return subprocess.Popen(
        command,
        cwd=launch.folder.path,
        env=launch.env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=parent_death_signal(),
    )


def parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` making the kernel SIGTERM the child when the thread that started it
    dies (Linux ``prctl(PR_SET_PDEATHSIG)``), so not even a SIGKILLed Zephon leaves torchrun
    behind: torchrun stops its workers on SIGTERM. Resolved here, in the parent: after a
    fork in a threaded process the child must not load libraries."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM))

    return preexec


def stop_leftover_launch(folder: RunFolder, groups: tuple[int, ...]) -> list[int]:
    """Kill the torchrun process groups ``groups`` of ``folder``'s last launch that are
    still alive; return their ids.

    ``run_local`` kills them itself on any exit it sees; they outlive it only when its
    own process was SIGKILLed (an OOM kill, a killed scheduler). A resume must stop
    them first: two trainings must not write one run folder. A group counts as the
    launch's only while its leader's command line still names the run folder.
    """
    stopped = []
    for pgid in groups:
        try:
            command = " ".join(psutil.Process(pgid).cmdline())
        except psutil.Error:
            continue  # gone, or not ours to read
        if str(folder.path.absolute()) in command:
            _signal_group(pgid, signal.SIGKILL)
            stopped.append(pgid)
    return stopped


def _kill_agent_groups(agents: list[Agent]) -> None:
    """SIGTERM each launch's process group, SIGKILL what is left of it after 10 s.

    Groups, not leaders: a leader that is gone already (the SIGTERM the interrupt handler
    forwards to this process's children may have ended it) can leave its children running.
    """
    for agent in agents:
        _signal_group(agent.pid, signal.SIGTERM)
    end = time.monotonic() + 10
    while any(_group_alive(a) for a in agents) and time.monotonic() < end:
        time.sleep(0.1)
    for agent in agents:
        if _group_alive(agent):
            _signal_group(agent.pid, signal.SIGKILL)
        agent.wait()


def _group_alive(agent: Agent) -> bool:
    """Whether any process of ``agent``'s group is left (the leader reaped first: a zombie
    still counts as a member)."""
    agent.poll()
    try:
        os.killpg(agent.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # a member this process may not signal is alive all the same
    return True


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
