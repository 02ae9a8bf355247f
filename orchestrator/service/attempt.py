"""One attempt of one job of the job service: what its process does on the lease it got.

The scheduler starts it as ``python -m orchestrator.cli attempt ...`` (:func:`command`);
it admits the job's spec again, puts the experiment on *this* lease (:func:`on_lease`)
and runs, resumes or verifies it, returning an object whose ``status`` is succeeded,
failed or interrupted.

Design: docs/design/orchestrator_service.md
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any

from orchestrator.errors import LaunchError
from orchestrator.experiment import ExperimentConfig
from orchestrator.experiment.run_record import RunStatus
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run import api, interrupts
from orchestrator.run.elastic_check import verify_elastic
from orchestrator.service.admission import admit_job
from orchestrator.service.config import ServiceConfig
from orchestrator.service.job import Job
from orchestrator.service.pool import Lease, lease_resources


def command(service: ServiceConfig, job_id: str, lease: Lease) -> list[str]:
    """The argument list of an attempt of ``job_id`` on ``lease`` (its design:
    docs/design/orchestrator_service.md)."""
    devices = lease.devices
    gpus = ["--gpu-ids", ",".join(map(str, devices.gpu_ids))] if devices.gpu_ids else []
    return [
        sys.executable,
        "-m",
        "orchestrator.cli",
        "attempt",
        "--root",
        str(service.path),
        job_id,
        "--device",
        devices.kind,
        "--devices",
        str(devices.count),
        *gpus,
        "--dp",
        str(lease.dp),
        "--json",
    ]


def on_lease(config: ExperimentConfig, lease: Lease) -> ExperimentConfig:
    """``config`` placed on ``lease``: its device kind and its cores (CPU) or GPUs (CUDA)
    (:func:`~orchestrator.service.pool.lease_resources`)."""
    resources = replace(config.resources, device=lease.devices.kind, **lease_resources(lease))
    return replace(config, resources=resources)


def run(service: ServiceConfig, job: Job, lease: Lease) -> dict[str, Any]:
    """Run one attempt of ``job`` on ``lease`` (its design: docs/design/orchestrator_service.md);
    its result object."""
    admitted = admit_job(job.kind, job.spec, service.rules())
    config = on_lease(admitted.config, lease)
    if admitted.check is None:
        folder = RunFolder(service.runs_root / job.id)
        if folder.exists():
            return api.resume(folder, dp=lease.dp, like=config).to_dict()
        return api.run(config, dp=lease.dp, run_name=job.id, fresh=admitted.fresh).to_dict()
    check = admitted.check
    try:
        report = verify_elastic(
            config,
            first_dp=check.first_dp,
            second_dp=check.second_dp,
            split_step=check.split_step,
        )
    except LaunchError as e:  # one of its trainings did not succeed
        failed = RunStatus.INTERRUPTED if interrupts.requested() else RunStatus.FAILED
        return {"status": failed, "error": str(e)}
    if report["ok"]:
        return {"status": RunStatus.SUCCEEDED, **report}
    mismatch = report["first_mismatch"]
    error = (
        f"the digests differ from step {mismatch} on"
        if mismatch is not None
        else "the resumed run did not finish: " + "; ".join(report["messages"])
    )
    return {"status": RunStatus.FAILED, "error": error, **report}
