"""The job service's attempts as Slurm jobs: submit (submitit), read every state at once, cancel.

Each attempt of a training job is one Slurm job named ``zephon-<job id>``, one node and
one task that runs the attempt process (:mod:`.attempt`) on the cores or GPUs Slurm gave
it; the job reads its spec from ``<root>/jobs/<id>/job.json``, never from the queue
file, so compute nodes need only the shared service root. Slurm decides where and when
it runs, preempts and requeues it; the scheduler keeps admission, keys, states and
limits, and polls the states of all its Slurm jobs with one ``squeue`` per poll.

Design: docs/design/orchestrator_service.md, On Slurm
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import submitit

from orchestrator.errors import ExperimentError
from orchestrator.experiment import DeviceKind
from orchestrator.experiment.runfolder import write_json_atomic
from orchestrator.machine.devices import discover
from orchestrator.run.slurm import is_settled
from orchestrator.service import attempt
from orchestrator.service.config import ServiceConfig
from orchestrator.service.job import Job
from orchestrator.service.pool import Lease
from pipeline.errors import ConfigError

JOB_NAME_PREFIX = "zephon-"
"""Slurm job names are this plus the service's job id (how a restarted service finds them)."""
SLURM_COMMANDS = ("sbatch", "squeue", "scancel")
SLURM_COMMAND_TIMEOUT_S = 60.0
"""How long one ``sbatch``/``squeue``/``scancel`` may take before the poll gives up on it."""


class SlurmUnavailable(RuntimeError):
    """A Slurm command failed (controller down, not configured): try again later."""


@dataclass(frozen=True)
class SlurmJobRequest:
    """One attempt as a Slurm job: the job, its dp, and the devices it asks for."""

    job: Job
    dp: int
    kind: DeviceKind
    """CPU: ``dp`` cores; CUDA: ``dp`` GPUs on one node."""
    timeout_min: int


def check_commands() -> None:
    """ConfigError unless Slurm's client commands are on ``PATH`` (checked at start)."""
    missing = [command for command in SLURM_COMMANDS if shutil.which(command) is None]
    if missing:
        raise ConfigError(
            f"--launcher slurm needs Slurm's commands on PATH, and {missing} are not: run "
            "`zephon serve` on a machine that submits to the cluster (a login node), or "
            "use --launcher local"
        )


def job_name(job_id: str) -> str:
    """The Slurm job name of the service's job ``job_id``."""
    return JOB_NAME_PREFIX + job_id


def job_file(service: ServiceConfig, job_id: str) -> Path:
    """Where the attempt running in Slurm reads its job (spec, kind, key)."""
    return service.job_dir(job_id) / "job.json"


def submit(service: ServiceConfig, request: SlurmJobRequest) -> str:
    """Submit attempt ``job.attempts + 1`` of ``request.job`` to Slurm; its Slurm job id.
    SlurmUnavailable when ``sbatch`` fails."""
    job, settings = request.job, service.slurm
    write_json_atomic(job_file(service, job.id), job.to_dict())
    executor = submitit.AutoExecutor(folder=service.job_dir(job.id) / "slurm", cluster="slurm")
    placement = {"cpus_per_task": request.dp}
    if request.kind == DeviceKind.CUDA:
        placement["gpus_per_node"] = request.dp
    optional = {"slurm_partition": settings.partition, "slurm_account": settings.account}
    executor.update_parameters(
        **settings.parameters,
        **placement,
        **{name: value for name, value in optional.items() if value is not None},
        name=job_name(job.id),
        nodes=1,
        tasks_per_node=1,
        timeout_min=request.timeout_min,
    )
    task = SlurmAttempt(
        service, job.id, attempt_number=job.attempts + 1, dp=request.dp, kind=request.kind
    )
    try:
        return str(executor.submit(task).job_id)
    except (submitit.core.utils.FailedJobError, OSError, subprocess.SubprocessError) as e:
        raise SlurmUnavailable(f"sbatch failed for job {job.id}: {e}") from e


def states(slurm_job_ids: list[str]) -> dict[str, str]:
    """Slurm job id -> state (``RUNNING``, ``REQUEUED``, ``COMPLETED`` ...) of every id Slurm
    still knows, read with one ``squeue`` (and one ``sacct`` for ids ``squeue`` has
    forgotten, where the cluster has accounting); SlurmUnavailable when ``squeue`` fails."""
    if not slurm_job_ids:
        return {}
    ids = ",".join(slurm_job_ids)
    # squeue fails on a list whose every id it forgot: then none is known
    listed = _run(
        ["squeue", "--states=all", "--noheader", f"--jobs={ids}", "--format=%i|%T"],
        forgotten_ok=True,
    )
    found = _parse_states(listed)
    missing = [i for i in slurm_job_ids if i not in found]
    if missing:
        wanted = ",".join(missing)
        sacct = ["sacct", "--noheader", "--parsable2", "--allocations", "--format=JobID,State"]
        accounted = _run([*sacct, f"--jobs={wanted}"], forgotten_ok=True)
        found.update(_parse_states(accounted))
    return found


def find_active(job_ids: list[str]) -> dict[str, str]:
    """Service job id -> Slurm job id of each of ``job_ids`` that has a Slurm job not yet
    ended (submitted by a scheduler that stopped before it recorded the id)."""
    wanted = {job_name(i): i for i in job_ids}
    if not wanted:
        return {}
    listed = _run(["squeue", "--noheader", "--format=%i|%j|%T", f"--name={','.join(wanted)}"])
    active = {}
    for line in listed.splitlines():
        slurm_id, name, state = line.strip().split("|")
        if name in wanted and not is_settled(state):
            active[wanted[name]] = slurm_id
    return active


def cancel(slurm_job_id: str) -> None:
    """``scancel`` the Slurm job (its attempt is told with SIGTERM and stops)."""
    _run(["scancel", slurm_job_id])


def _parse_states(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        if "|" in line:
            slurm_id, state = line.strip().split("|")[:2]
            # "CANCELLED by 0" in sacct; array or step ids are not the service's jobs
            found[slurm_id] = state.split()[0] if state else state
    return found


def _run(argv: list[str], *, forgotten_ok: bool = False) -> str:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=SLURM_COMMAND_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SlurmUnavailable(f"{argv[0]} failed: {e}") from e
    if done.returncode != 0:
        forgotten = "Invalid job id" in done.stderr or argv[0] == "sacct"
        if forgotten_ok and forgotten:
            return ""
        raise SlurmUnavailable(f"{' '.join(argv[:2])} exited {done.returncode}: {done.stderr}")
    return done.stdout


class SlurmAttempt(submitit.helpers.Checkpointable):
    """One attempt of a service job, run by Slurm on a compute node; submitit pickles it.

    It runs the attempt process (:func:`attempt.command`) on the node's allocated cores or
    GPUs, its JSON result in ``attempt-<n>.json`` as on a local lease. Slurm's requeue
    (preemption, ``scontrol requeue``) runs it again: the attempt finds the run folder and
    resumes it from its last checkpoint, and overwrites the result.
    """

    def __init__(
        self,
        service: ServiceConfig,
        job_id: str,
        *,
        attempt_number: int,
        dp: int,
        kind: DeviceKind,
    ) -> None:
        self.service = service
        self.job_id = job_id
        self.attempt_number = attempt_number
        self.dp = dp
        self.kind = kind

    def __call__(self) -> int:
        devices = discover(self.kind)
        if devices.count < self.dp:
            raise ExperimentError(
                [f"Slurm gave this job {devices.count} {devices.kind} devices for dp {self.dp}"]
            )
        lease = Lease(devices, self.dp)
        command = attempt.command(self.service, self.job_id, lease)
        command += ["--job-file", str(job_file(self.service, self.job_id))]
        job_dir = self.service.job_dir(self.job_id)
        with (
            (job_dir / f"attempt-{self.attempt_number}.json").open("wb") as out,
            (job_dir / f"attempt-{self.attempt_number}.log").open("ab") as err,
        ):
            return subprocess.run(
                command, cwd=self.service.path, stdout=out, stderr=err, check=False
            ).returncode
