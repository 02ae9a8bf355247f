"""Launching TorchTitan for an experiment: the command, the launchers, and the progress monitor.

The launchers are local (one torchrun), multinode (a c10d rendezvous) and slurm
(:mod:`orchestrator.run.slurm`). Commands are argument lists, never shell strings;
torchrun's output goes to ``<run>/launch.log`` and a failed launch raises
:class:`LaunchError` carrying the log tail.

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
from typing import BinaryIO, TextIO, TypeAlias

import psutil

from orchestrator.experiment import ExperimentConfig
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run import interrupts, warm_start
from orchestrator.run.cpu_env import common_env, cpu_start_env
from orchestrator.run.devices import Devices, usable_cores
from orchestrator.run.init_from import initial_load_flags
from orchestrator.run.recipe import recipe_flags

TRAIN_MODULE = "orchestrator.titan.train"
POLL_S = 1.0
EXIT_POLL_S = 0.05
"""How often ``run_local`` looks whether its torchruns ended (ticks stay ``POLL_S`` apart)."""

Agent: TypeAlias = "subprocess.Popen[bytes] | warm_start.WarmProcess"
"""One started torchrun: a cold subprocess or a warm server's fork."""


def trainer_args(
    config: ExperimentConfig, folder: RunFolder, init_path: str | Path | None = None
) -> list[str]:
    """TorchTitan's flags for ``config`` (``zephon-train`` parses them): the recipe's
    (:func:`orchestrator.run.recipe.recipe_flags`), then the run's own. The data config is
    one file, ``folder``'s ``data.json`` (:mod:`orchestrator.experiment.dataspec`, written
    before each launch); ``init_path`` is the initial checkpoint every run of the recipe
    loads (:mod:`orchestrator.run.init_checkpoint`), unless the run folder has its own."""
    t = config.train
    args = [
        *recipe_flags(config),
        *("--dump-folder", str(folder.titan_dir.absolute())),
        *("--dataloader.spec", str(folder.data_spec_path.absolute())),
        *("--checkpoint.enable", "--checkpoint.interval", str(t.checkpoint_interval)),
        *("--checkpoint.keep-latest-k", str(t.keep_checkpoints)),
        *("--metrics.log-freq", "1"),
        *("--comm.train-timeout-seconds", "600"),  # oversubscribed CPUs: a step can take seconds
    ]
    if init_path is not None:
        args += ["--checkpoint.initial-load-path", str(Path(init_path).absolute())]
        args += initial_load_flags(config)
    e = config.eval
    if e.enable:
        args += ["--validator.enable", "--validator.freq", str(e.interval)]
        if e.initial:
            args += ["--validator.initial"]
    if e.tasks:
        args += ["--validator.tasks", ",".join(e.tasks)]  # TorchTitan parses lists as A,B,C
        if e.task_dir is not None:
            args += ["--validator.task-dir", e.task_dir]
        if e.tasks_at_every_eval:
            args += ["--validator.tasks-at-every-eval"]
        if e.task_limit is not None:
            args += ["--validator.task-limit", str(e.task_limit)]
    return args


def free_port() -> int:
    """A TCP port free on the loopback interface now (for a rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_command(
    config: ExperimentConfig,
    folder: RunFolder,
    dp: int,
    *,
    nodes: int = 1,
    node_rank: int = 0,
    rdzv_endpoint: str | None = None,
    init_path: str | Path | None = None,
) -> list[str]:
    """The torchrun command of one node: ``dp // nodes`` processes (``init_path``: see
    :func:`trainer_args`)."""
    assert dp % nodes == 0, f"dp ({dp}) must be a multiple of nodes ({nodes})"
    rendezvous = None
    if nodes > 1 or rdzv_endpoint is not None:
        rendezvous = c10d_rendezvous(nodes, node_rank, str(rdzv_endpoint), folder.name)
    return train_command(dp // nodes, trainer_args(config, folder, init_path), rendezvous)


def c10d_rendezvous(nodes: int, node_rank: int, endpoint: str, run_id: str) -> list[str]:
    """torchrun's flags for node ``node_rank`` of ``nodes`` meeting at ``endpoint``
    (``host:port``) under ``run_id``."""
    return [
        f"--nnodes={nodes}",
        f"--node-rank={node_rank}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={run_id}",
    ]


def train_command(
    procs_per_node: int, args: list[str], rendezvous: list[str] | None = None
) -> list[str]:
    """torchrun of :data:`TRAIN_MODULE` with TorchTitan flags ``args`` on ``procs_per_node``
    processes; ``rendezvous`` (torchrun's flags) defaults to one node on a free local port.

    For launches whose flags do not come from an ``ExperimentConfig`` (benchmarks).
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


def launch_env(
    folder: RunFolder, devices: Devices, procs_per_node: int, cores: int | None = None
) -> dict[str, str]:
    """The environment of a launch: caches and temporary files (torchrun's log folders) in
    the run folder, each process an equal share of ``cores`` (default: the usable cores) as
    threads."""
    env = cpu_start_env() if devices.kind == "cpu" else common_env()
    scratch = folder.path.absolute() / ".tmp"
    scratch.mkdir(parents=True, exist_ok=True)  # Python ignores a TMPDIR that does not exist
    env.update(
        HF_HOME=str(folder.path.absolute() / ".hf"),
        TORCHINDUCTOR_CACHE_DIR=str(folder.path.absolute() / ".inductor"),
        TMPDIR=str(scratch),
        OMP_NUM_THREADS=str(max(1, (cores or usable_cores()) // procs_per_node)),
    )
    if devices.kind == "cuda":
        # gpu_ids index the GPUs torch sees: those CUDA_VISIBLE_DEVICES (a scheduler's, or
        # Slurm's) names, if set, else all.
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        ids = [visible[i] if visible != [""] else str(i) for i in devices.gpu_ids]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(ids[:procs_per_node])
    return env


# -- progress ----------------------------------------------------------------------------------


class Progress:
    """Training progress from ``steps.jsonl``: a bar on a terminal, one line per ~10 s otherwise."""

    def __init__(self, total_steps: int, stream: TextIO | None = None, label: str = "") -> None:
        self.total = total_steps
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.label = label
        self._start = time.monotonic()
        self._first: tuple[int, float] | None = None
        self._last_line = 0.0
        self._shown = -1

    def update(self, folder: RunFolder) -> None:
        steps = folder.steps()
        if not steps:
            return
        done = max(steps)
        now = time.monotonic()
        if self._first is None:
            self._first = (done, now)
        # Measured from the first step seen on: no rate until a whole interval is measured.
        tokens = sum(r.get("tokens", 0) for s, r in steps.items() if s > self._first[0])
        rate = tokens / (now - self._first[1]) if tokens and now > self._first[1] else None
        loss = folder.metrics().get(done, {}).get("loss_metrics/global_avg_loss")
        loss_text = f" loss {loss:.3f}" if isinstance(loss, float) else ""
        if self.tty:
            width = 24
            filled = int(width * done / max(1, self.total))
            rate_text = "" if rate is None else f" {rate:,.0f} tok/s"
            self.stream.write(
                f"\r{self.label}[{'#' * filled}{'.' * (width - filled)}] step {done}/{self.total}"
                f"{rate_text}{loss_text}   "
            )
            self.stream.flush()
        elif done != self._shown and (now - self._last_line >= 10 or done == self.total):
            rate_text = "" if rate is None else f", {rate:,.0f} tokens/s"
            self.stream.write(
                f"{self.label}step {done}/{self.total}{rate_text}{loss_text}, "
                f"{now - self._start:.0f} s\n"
            )
            self.stream.flush()
            self._last_line = now
        self._shown = done

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


# -- launchers ---------------------------------------------------------------------------------


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
    leader: bool = True
    """Whether this launch keeps the run folder's records (``run.json``, ``launch.log``);
    the other nodes of a multi-node run (node rank > 0) only log, to ``launch-node<k>.log``."""
    node_rank: int = 0

    @property
    def log_path(self) -> Path:
        if self.leader:
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
    if launch.leader:  # so that a later resume can stop them if this process dies without cleanup
        folder.update_state(launch_process_groups=[a.pid for a in agents])
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


def stop_leftover_launch(folder: RunFolder) -> list[int]:
    """Kill the torchrun process groups of ``folder``'s last launch that are still alive;
    return their ids.

    ``run_local`` kills them itself on any exit it sees; they outlive it only when its
    own process was SIGKILLed (an OOM kill, a killed scheduler). A resume must stop
    them first: two trainings must not write one run folder. A group counts as the
    launch's only while its leader's command line still names the run folder.
    """
    stopped = []
    for pgid in folder.state().get("launch_process_groups", []):
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
