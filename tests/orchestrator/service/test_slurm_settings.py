"""The service's Slurm settings: kept in service.json, checked before the service starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.service.config import ServiceConfig, load_service
from orchestrator.service.scheduler import Scheduler
from orchestrator.service.slurm_settings import ServiceLauncher, SlurmSettings
from pipeline.errors import ConfigError


def test_slurm_settings_are_kept_and_checked(tmp_path: Path) -> None:
    slurm = SlurmSettings(partition="gpu", job_devices=4, parameters={"slurm_qos": "high"})
    service = ServiceConfig(root=str(tmp_path / "svc"), launcher="slurm", slurm=slurm)
    service.save()
    loaded = load_service(tmp_path / "svc")
    assert (loaded.launcher, loaded.slurm) == (ServiceLauncher.SLURM, slurm)
    with pytest.raises(ConfigError, match=r"launcher='pbs' is invalid; use one of \['local'"):
        ServiceConfig(root=str(tmp_path / "x"), launcher="pbs")
    with pytest.raises(ConfigError, match=r"sets \['cpus_per_task'\]: the service sets them"):
        SlurmSettings(parameters={"cpus_per_task": 8})
    with pytest.raises(ConfigError, match=r"slurm\.job_devices must be an integer >= 1, not 0"):
        SlurmSettings(job_devices=0)


def test_a_slurm_service_without_slurm_commands_is_refused_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch, squeue or scancel here
    service = ServiceConfig(root=str(tmp_path / "svc"), launcher="slurm")
    with pytest.raises(ConfigError, match=r"needs Slurm's commands on PATH.*--launcher local"):
        Scheduler(service).serve(until_idle=True)
    assert not (tmp_path / "svc" / "service.json").exists()
