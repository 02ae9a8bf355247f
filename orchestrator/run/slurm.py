"""Training on a Slurm cluster through submitit: the allocation, not the submitting machine,
decides the devices, dp and rendezvous.

One Slurm task per rank (:class:`SlurmTask`) finds its node's devices and meets the
others at a rendezvous published in the run folder; a job Slurm cancels, preempts or
requeues resumes from the run folder's last checkpoint.

Design: docs/design/orchestrator_run.md
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import submitit
from submitit.slurm.slurm import SlurmInfoWatcher

from orchestrator.errors import ExperimentError
from orchestrator.experiment import (
    DeviceKind,
    DeviceRequest,
    ExperimentConfig,
    dp_problems,
)
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.machine.devices import Devices, discover
from orchestrator.run import interrupts
from orchestrator.run.launch import POLL_S, launch_env, parent_death_signal
from orchestrator.run.trainer_command import slurm_task_command

OWNED_PARAMETERS = ("nodes", "tasks_per_node", "ntasks_per_node", "slurm_ntasks_per_node")
"""submitit parameters Zephon sets from ``resources`` (``nodes`` and ``dp``)."""
GPU_PARAMETERS = ("gpus_per_node", "gpus_per_task", "slurm_gpus_per_task", "slurm_gres")
CANCEL_WAIT_S = 30.0
"""How long an interrupted launch waits for its cancelled job to end."""
RENDEZVOUS_WAIT_S = 300.0
"""How long a rank waits for rank 0 to publish the rendezvous port."""
STATE_CHECK_S = 10.0
"""How often a running job's state is asked for (its result file is seen at once)."""
UNSETTLED = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "RESIZING", "SUSPENDED")
ENDED_BY_SLURM = ("CANCELLED", "PREEMPTED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "DEADLINE")
SETTLED_RECHECK_S = 2.0
"""An ended state is believed only when it still holds this much later: under load, a job
that ``scontrol requeue`` killed was seen ended between its attempts, and its run failed."""


@dataclass(frozen=True)
class SlurmAllocation:
    """What a run asks Slurm for: ``nodes`` x ``tasks_per_node`` ranks, one device each."""

    nodes: int
    tasks_per_node: int
    kind: DeviceKind
    """A GPU per task, or CPU."""

    @property
    def dp(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def devices(self) -> Devices:
        """The devices as the plan records them (the node's own are found there)."""
        return Devices(self.kind, self.dp, "slurm")


def allocation(config: ExperimentConfig, requested_dp: int | None = None) -> SlurmAllocation:
    """The allocation of ``config`` on Slurm: dp is ``requested_dp``, else ``resources.dp``,
    else ``resources.nodes`` x ``resources.slurm.tasks_per_node``; ExperimentError before
    anything is submitted when it does not split into nodes or divide the lanes."""
    r = config.resources
    params = r.slurm
    # tasks_per_node may say what dp is; an explicit dp (a resume's) wins over it
    owned = [k for k in params if k in OWNED_PARAMETERS and k != "tasks_per_node"]
    dp = requested_dp or r.dp
    per_node = params.get("tasks_per_node")
    problems = []
    if owned:
        problems.append(
            f"resources.slurm sets {owned}: Zephon sets the job's nodes and tasks from "
            "resources.nodes and the dp size (one task per rank); set those instead"
        )
    if dp is None and per_node is None:
        problems.append(
            "resources.launcher=slurm needs resources.dp (or resources.slurm.tasks_per_node): "
            "the allocation, not this machine, decides the dp size"
        )
    else:
        dp = dp if dp is not None else r.nodes * int(per_node)
        problems += dp_problems(config, dp)
    if problems:
        raise ExperimentError(problems)
    gpus = r.device == DeviceRequest.CUDA or any(k in params for k in GPU_PARAMETERS)
    kind = DeviceKind.CUDA if gpus else DeviceKind.CPU
    return SlurmAllocation(r.nodes, dp // r.nodes, kind)


def run_slurm(
    folder: RunFolder,
    trainer_args: list[str],
    *,
    alloc: SlurmAllocation,
    params: dict[str, Any],
    timeout_s: float | None = None,
    on_tick: Callable[[RunFolder], None] | None = None,
    on_job: Callable[[str], object] | None = None,
) -> int:
    """Submit ``trainer_args`` as a job of ``alloc`` (submitit ``params`` added) and wait for
    it, calling ``on_tick`` about once a second; the first failing rank's exit status, or a
    negative one when the job did not finish: minus the signal when this process was
    interrupted (the job is cancelled), ``-SIGTERM`` when Slurm ended it (the launch log
    says how: cancelled, preempted, timed out)."""
    use_squeue_without_accounting()
    executor = submitit.AutoExecutor(folder=folder.path / "submitit", cluster="slurm")
    settings = {k: v for k, v in params.items() if k not in OWNED_PARAMETERS}
    if alloc.kind == DeviceKind.CUDA and not any(k in params for k in GPU_PARAMETERS):
        settings["gpus_per_node"] = alloc.tasks_per_node
    executor.update_parameters(**settings, nodes=alloc.nodes, tasks_per_node=alloc.tasks_per_node)
    task = SlurmTask(trainer_args, str(folder.path.absolute()), alloc.kind)
    job = executor.submit(task)
    _append_to_log(
        folder, f"\n=== Slurm job {job.job_id}: {alloc.nodes} node(s) x {alloc.tasks_per_node}\n"
    )
    if on_job is not None:
        on_job(job.job_id)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    last_check = time.monotonic()
    with interrupts.handling():
        while not _is_job_settled(job):
            late = deadline is not None and time.monotonic() > deadline
            if interrupts.requested() or late:
                job.cancel(check=False)
                _wait_done(job, CANCEL_WAIT_S)
                if late:
                    _append_to_log(
                        folder, f"\n[zephon] Slurm job {job.job_id} cancelled after {timeout_s} s\n"
                    )
                    return 1
                return -interrupts.signal_received()
            if on_tick is not None:
                on_tick(folder)
            if time.monotonic() - last_check > STATE_CHECK_S:
                job.watcher.update()  # submitit polls less and less often on long jobs
                last_check = time.monotonic()
            interrupts.STOP.wait(POLL_S)
    if on_tick is not None:
        on_tick(folder)
    state = job.watcher.get_state(job.job_id, mode="cache").upper()
    # Before results: a task Slurm stopped may still have written one (submitit ignores
    # SIGTERM, so it outlives the trainer it ran).
    if any(state.startswith(s) for s in ENDED_BY_SLURM):
        _append_to_log(
            folder, f"\n[zephon] Slurm job {job.job_id} ended {state}; resume the run folder\n"
        )
        return -15
    try:
        codes = [int(code) for code in job.results()]
    except Exception as error:  # submitit re-raises a task's failure here
        _append_to_log(folder, f"\n[zephon] Slurm job {job.job_id} ended {state}: {error}\n")
        return 1
    # A rank killed by a signal (an OOM kill) failed; only Slurm's ending is an interruption.
    return next((code if code > 0 else 1 for code in codes if code != 0), 0)


def _is_job_settled(job: Any) -> bool:
    """Whether Slurm is done with ``job``. submitit's ``done()`` (a result file, or an ended
    state) is not enough: the attempt of a job that Slurm requeued (preemption, ``scontrol
    requeue``) writes a result as it dies, and the job runs again; and a job whose result
    is written is COMPLETING for a moment."""
    if not job.done():
        return False
    for look in range(2):
        if look:  # a requeue passes through an ended-looking state: it must still hold
            time.sleep(SETTLED_RECHECK_S)
        if not is_settled(job.watcher.get_state(job.job_id, mode="force").upper()):
            return False
    return True


def is_settled(state: str | None) -> bool:
    """Whether Slurm is done with a job in ``state`` (None: Slurm forgot the job): not
    pending, running, completing, suspended or requeued."""
    return state is None or not (state in UNSETTLED or state.startswith("REQUEUE"))


def _append_to_log(folder: RunFolder, text: str) -> None:
    with folder.log_path.open("a") as log:
        log.write(text)


def _wait_done(job: Any, limit_s: float) -> None:
    end = time.monotonic() + limit_s
    while not job.done(force_check=True) and time.monotonic() < end:
        time.sleep(0.5)


class SlurmTask(submitit.helpers.Checkpointable):
    """One rank of a Zephon job on a compute node (docs/design/orchestrator_run.md); submitit
    pickles it.

    Checkpointable: on submitit's time-limit signal the job is requeued with this same
    task, which resumes from the run folder's last checkpoint.
    """

    def __init__(self, trainer_args: list[str], folder: str, kind: DeviceKind) -> None:
        self.trainer_args = trainer_args
        self.folder = folder
        self.kind = kind

    def __call__(self) -> int:
        job = submitit.JobEnvironment()
        folder = RunFolder(self.folder)
        local_tasks = job.num_tasks // job.num_nodes
        devices = discover(self.kind)
        env = launch_env(folder, devices, local_tasks)  # the job's cores on this node
        if devices.kind == DeviceKind.CUDA:
            env["LOCAL_RANK"] = str(_gpu_index(devices, job.local_rank, local_tasks))
        else:
            env["LOCAL_RANK"] = str(job.local_rank)
        env.update(
            RANK=str(job.global_rank),
            WORLD_SIZE=str(job.num_tasks),
            LOCAL_WORLD_SIZE=str(local_tasks),
            GROUP_RANK=str(job.node),
            MASTER_ADDR=node_address(job.hostnames[0]),
            MASTER_PORT=str(self._rendezvous_port(job)),
        )
        command = slurm_task_command(self.trainer_args)
        with folder.log_path.open("ab") as log:
            return subprocess.run(
                command,
                cwd=self.folder,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=parent_death_signal(),
                check=False,
            ).returncode

    def _rendezvous_port(self, job: Any) -> int:
        """Rank 0 finds a free port on its node and publishes it; the others read it."""
        restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
        published = Path(self.folder, "slurm", f"rendezvous-{job.job_id}-{restarts}")
        if job.global_rank == 0:
            with socket.socket() as s:
                s.bind(("", 0))
                port = s.getsockname()[1]
            published.parent.mkdir(parents=True, exist_ok=True)
            partial = published.with_suffix(".partial")
            partial.write_text(str(port))
            partial.replace(published)
            return port
        end = time.monotonic() + RENDEZVOUS_WAIT_S
        while not published.exists():
            if time.monotonic() > end:
                raise RuntimeError(
                    f"rank 0 published no rendezvous port in {published} within "
                    f"{RENDEZVOUS_WAIT_S:.0f} s: is the run folder on a file system every "
                    "node shares?"
                )
            time.sleep(0.2)
        return int(published.read_text())


def _gpu_index(devices: Devices, local_rank: int, local_tasks: int) -> int:
    """The GPU of ``local_rank`` among those visible to the task: its own index when Slurm
    shows the node's GPUs to every task, 0 when it binds one GPU per task."""
    if devices.count >= local_tasks:
        return local_rank
    if devices.count == 1:
        return 0
    raise RuntimeError(
        f"this task sees {devices.count} GPUs for {local_tasks} tasks per node: ask Slurm "
        "for a GPU per task (gpus_per_node = tasks per node, or gpus_per_task=1)"
    )


def node_address(node: str) -> str:
    """The address Slurm reaches ``node`` at (its ``NodeAddr``), else the name itself."""
    done = subprocess.run(
        ["scontrol", "show", "node", "--oneliner", node],
        capture_output=True,
        text=True,
        check=False,
    )
    for field in done.stdout.split():
        if field.startswith("NodeAddr="):
            return field.removeprefix("NodeAddr=")
    return node


# -- job states without accounting -------------------------------------------------------------


def use_squeue_without_accounting() -> None:
    """Make submitit read job states from ``squeue`` where ``sacct`` fails (why:
    docs/design/orchestrator_run.md). Idempotent; for this process's submitit Slurm jobs,
    Hydra's Slurm launcher's included."""
    from submitit.slurm import slurm

    if not isinstance(slurm.SlurmJob.watcher, SqueueWatcher):
        slurm.SlurmJob.watcher = SqueueWatcher(delay_s=600)


class SqueueWatcher(SlurmInfoWatcher):
    """submitit's Slurm state watcher, asking ``squeue --states=all`` where there is no
    accounting; its output is read as ``sacct``'s (``JobID|State|NodeList``)."""

    SQUEUE_HEADER = "JOBID|STATE|NODELIST"

    def __init__(self, delay_s: int = 60) -> None:
        super().__init__(delay_s=delay_s)
        self._accounting: bool | None = None

    def _make_command(self) -> list[str] | None:
        command = super()._make_command()
        if command is None or self._has_accounting():
            return command
        ids = [command[i + 1] for i, word in enumerate(command) if word == "-j"]
        return ["squeue", "--states=all", f"--jobs={','.join(ids)}", "--format=%i|%T|%N"]

    def read_info(self, string: bytes | str) -> dict[str, dict[str, str]]:
        text = string.decode() if isinstance(string, bytes) else string
        if text.startswith(self.SQUEUE_HEADER):
            text = "JobID|State|NodeList" + text[len(self.SQUEUE_HEADER) :]
        return super().read_info(text)

    def _has_accounting(self) -> bool:
        if self._accounting is None:
            probe = subprocess.run(
                ["sacct", "--noheader", "--jobs=1", "--format=JobID"],
                capture_output=True,
                check=False,
            )
            self._accounting = probe.returncode == 0
        return self._accounting
